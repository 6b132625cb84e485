/**
 * Data directories that do not open (issue 11 item 1): a lock held by
 * another process, damaged LevelDB files and a directory without its node
 * key are three different errors, each naming the file at fault; a damaged
 * directory is never recreated (LevelDB would delete its tables) and a node
 * never takes a new identity unless told to (`newIdentity`,
 * `ioa start --new-identity`, the real bin over a child process).
 */
import { cp, mkdir, mkdtemp, readFile, readdir, rm, truncate, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { LevelDatastore } from 'datastore-level'
import { Key } from 'interface-datastore'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { expectErrorCode } from '../../../test/util.js'
import { createIoaNode } from '../src/index.js'
import { errorLineOf, runIoa, startIoa } from './fixtures/run-ioa.js'
import type { IoaNodeInit } from '../src/index.js'

const PLAIN = { keyStore: { insecurePlaintext: true } } satisfies IoaNodeInit
const PASSPHRASE = 'correct horse battery staple, twice'

let root: string
/** A data directory (plaintext keys) with an agent, reopened once so that its data is in a table */
let original: string
let peerId: string
let agentDid: string
let copies = 0

/** A fresh copy of the original directory */
async function copy (): Promise<string> {
  const dir = join(root, `copy-${++copies}`)
  await cp(original, dir, { recursive: true })
  return dir
}

async function run (dir: string, init: IoaNodeInit = {}): Promise<{ peerId: string, did: string }> {
  const node = await createIoaNode({ dataDir: dir, ...PLAIN, ...init })
  try {
    const agent = await node.host({ key: 'hotel', name: 'Hotel', skills: [{ id: 'travel.hotel' }] })
    return { peerId: node.transport.peerId.toString(), did: agent.did }
  } finally {
    await node.stop()
  }
}

/** The manifest CURRENT names */
async function manifestOf (dir: string): Promise<string> {
  return (await readFile(join(dir, 'CURRENT'), 'utf8')).trim()
}

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'ioa-data-dir-'))
  original = join(root, 'original')
  ;({ peerId, did: agentDid } = await run(original))
  // compacted, so that the keys live in a table (a deleted table is then a real loss)
  const store = new LevelDatastore(original)
  await store.open()
  // classic-level has compactRange; the `Level` type of datastore-level does not name it
  await (store.db as unknown as { compactRange(start: string, end: string): Promise<void> }).compactRange('/', '0')
  await store.close()
  expect((await readdir(original)).some(f => f.endsWith('.ldb'))).toBe(true)
}, 60_000)

afterAll(async () => {
  await rm(root, { recursive: true, force: true })
})

describe('a data directory that opens', () => {
  it('keeps its identity across restarts; a new or empty directory needs no newIdentity', async () => {
    expect(await run(await copy())).toEqual({ peerId, did: agentDid })
    const empty = join(root, 'empty')
    await mkdir(empty)
    const fresh = await run(empty)
    expect(fresh.peerId).not.toBe(peerId)
    expect(await run(empty)).toEqual(fresh)
    expect((await run(join(root, 'not-yet', 'there'))).peerId).toMatch(/^12D3KooW/)
  }, 60_000)
})

describe('a data directory that does not open', () => {
  it('held by another process: DATA_DIR_LOCKED naming LOCK', async () => {
    const dir = await copy()
    const holder = new LevelDatastore(dir)
    await holder.open()
    try {
      const err = await expectErrorCode(run(dir), 'DATA_DIR_LOCKED')
      expect(err).toMatchObject({ name: 'DataDirLockedError', file: 'LOCK', dir, field: 'dataDir' })
      expect(err.message).toContain('in use')
    } finally {
      await holder.close()
    }
  })

  it('damaged: DATA_DIR_CORRUPT naming the file, for a truncated or missing CURRENT, a missing or truncated manifest, a deleted table; nothing is changed', async () => {
    const cases: Array<{ what: string, damage: (dir: string) => Promise<string> }> = [
      { what: 'truncated CURRENT', damage: async dir => { await writeFile(join(dir, 'CURRENT'), 'MANIF'); return 'CURRENT' } },
      { what: 'empty CURRENT', damage: async dir => { await writeFile(join(dir, 'CURRENT'), ''); return 'CURRENT' } },
      { what: 'deleted CURRENT', damage: async dir => { await rm(join(dir, 'CURRENT')); return 'CURRENT' } },
      { what: 'deleted manifest', damage: async dir => { const m = await manifestOf(dir); await rm(join(dir, m)); return m } },
      { what: 'truncated manifest', damage: async dir => { const m = await manifestOf(dir); await truncate(join(dir, m), 10); return m } },
      { what: 'empty manifest', damage: async dir => { const m = await manifestOf(dir); await truncate(join(dir, m), 0); return m } },
      {
        what: 'deleted table',
        damage: async dir => {
          const table = (await readdir(dir)).find(f => f.endsWith('.ldb'))!
          await rm(join(dir, table))
          return table
        }
      }
    ]
    for (const c of cases) {
      const dir = await copy()
      const file = await c.damage(dir)
      const before = (await readdir(dir)).filter(f => !f.startsWith('LOG')).sort()
      for (const init of [{}, { newIdentity: true }]) {
        const err = await expectErrorCode(run(dir, init), 'DATA_DIR_CORRUPT')
        expect(err, c.what).toMatchObject({ name: 'DataDirCorruptError', file, dir, field: 'dataDir' })
        expect(err.message, c.what).toContain(file)
        expect(err.message, c.what).not.toContain('in use')
      }
      // LevelDB's own attempt would have written a new manifest and deleted the tables
      expect((await readdir(dir)).filter(f => !f.startsWith('LOG') && f !== 'LOCK').sort(), c.what).toEqual(before.filter(f => f !== 'LOCK'))
    }
  }, 120_000)

  it('state without its node key: IDENTITY_MISSING, unless newIdentity (then a new peer id, the agents keep theirs)', async () => {
    const dir = await copy()
    const store = new LevelDatastore(dir)
    await store.open()
    await store.delete(new Key('/pkcs8/self'))
    await store.delete(new Key('/info/self'))
    await store.close()
    const err = await expectErrorCode(run(dir), 'IDENTITY_MISSING')
    expect(err).toMatchObject({ name: 'IdentityMissingError', dir, field: 'dataDir' })
    expect(err.message).toContain('--new-identity')
    const renewed = await run(dir, { newIdentity: true })
    expect(renewed.peerId).not.toBe(peerId)
    expect(renewed.did).toBe(agentDid)
    // from then on the new identity is the directory's own
    expect(await run(dir)).toEqual(renewed)
  }, 60_000)

  it('an encrypted store without its node key: IDENTITY_MISSING too (the key store would make a new one)', async () => {
    const dir = join(root, 'encrypted')
    const keyStore = { passphrase: PASSPHRASE }
    const first = await run(dir, { keyStore })
    const store = new LevelDatastore(dir)
    await store.open()
    await store.delete(new Key('/ioa/keystore/chain/pkcs8/self'))
    await store.close()
    await expectErrorCode(run(dir, { keyStore }), 'IDENTITY_MISSING')
    expect((await run(dir, { keyStore, newIdentity: true })).peerId).not.toBe(first.peerId)
  }, 60_000)
})

describe('ioa start on such a directory (the bin)', () => {
  it('exits 2 with DATA_DIR_CORRUPT or IDENTITY_MISSING naming dataDir, 1 with DATA_DIR_LOCKED; --new-identity starts the node', async () => {
    const corrupt = await copy()
    await rm(join(corrupt, 'CURRENT'))
    const keyless = await copy()
    const store = new LevelDatastore(keyless)
    await store.open()
    await store.delete(new Key('/pkcs8/self'))
    await store.close()
    const locked = await copy()
    const holder = new LevelDatastore(locked)
    await holder.open()
    const config = async (name: string, dataDir: string): Promise<string> => {
      const file = join(root, `${name}.json`)
      await writeFile(file, JSON.stringify({ dataDir, keyStore: { insecurePlaintext: true } }))
      return file
    }
    try {
      const [c, k, l] = await Promise.all([
        runIoa(['start', '--json', '--config', await config('corrupt', corrupt)], { cwd: root }),
        runIoa(['start', '--json', '--config', await config('keyless', keyless)], { cwd: root }),
        runIoa(['start', '--json', '--config', await config('locked', locked)], { cwd: root })
      ])
      expect(c.code, c.stderr).toBe(2)
      expect(errorLineOf(c)).toMatchObject({ code: 'DATA_DIR_CORRUPT', field: 'dataDir', message: expect.stringContaining('CURRENT') })
      expect(k.code, k.stderr).toBe(2)
      expect(errorLineOf(k)).toMatchObject({ code: 'IDENTITY_MISSING', field: 'dataDir', message: expect.stringContaining('--new-identity') })
      expect(l.code, l.stderr).toBe(1)
      expect(errorLineOf(l)).toMatchObject({ code: 'DATA_DIR_LOCKED', field: 'dataDir' })
    } finally {
      await holder.close()
    }
    const node = await startIoa(['--config', join(root, 'keyless.json'), '--new-identity'], { cwd: root })
    try {
      expect(node.ready.peerId).toMatch(/^12D3KooW/)
      expect(node.ready.peerId).not.toBe(peerId)
    } finally {
      expect(await node.stop()).toBe(0)
    }
  }, 240_000)
})
