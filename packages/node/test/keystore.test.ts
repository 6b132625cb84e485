/**
 * Keys at rest (issue 9 item 9): the node key and agent keys in a data
 * directory are encrypted with a passphrase, restarts keep the identities, a
 * wrong or missing passphrase is refused without a new identity, and a data
 * directory of the earlier plaintext layout is migrated.
 */
import { createDecipheriv, pbkdf2Sync } from 'node:crypto'
import { chmod, readdir, readFile, stat, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { KeyStore, publicKeyToDid } from '@ioa/interconnect'
import { loadOrCreateSelfKey } from '@libp2p/config'
import { generateKeyPair, privateKeyToProtobuf } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { MemoryDatastore } from 'datastore-core'
import { LevelDatastore } from 'datastore-level'
import { Key } from 'interface-datastore'
import { describe, expect, it } from 'vitest'
import { readSpecBlock, rejectionOf, toHex } from '../../../test/util.js'
import { KEYSTORE_DEFAULTS, changePassphrase, createIoaNode, openKeyStore, startFromConfig } from '../src/index.js'
import { scratch } from './fixtures/scratch.js'
import type { ConfigError, KeyStoreError, NodeLogEvent } from '../src/index.js'
import type { PrivateKey } from '@libp2p/interface'

const PASS = 'correct horse battery staple 42'
const { nodes, tempDir } = scratch('ioa-keys-')

/** Every file under `dir`, recursively */
async function files (dir: string): Promise<string[]> {
  const out: string[] = []
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name)
    if (e.isDirectory()) out.push(...await files(p))
    else out.push(p)
  }
  return out
}

/** The files under `dir` that contain any of `needles` (raw bytes) */
async function filesHolding (dir: string, needles: Uint8Array[]): Promise<string[]> {
  const hits: string[] = []
  for (const f of await files(dir)) {
    const bytes = await readFile(f)
    if (needles.some(n => bytes.indexOf(Buffer.from(n)) >= 0)) hits.push(f)
  }
  return hits
}

/** The secret bytes of an Ed25519 key: its 32-byte seed and its protobuf encoding */
function secrets (key: PrivateKey): Uint8Array[] {
  return [key.raw.subarray(0, 32), privateKeyToProtobuf(key)]
}

/** The peer key of a store, read with the passphrase (the store is closed after) */
async function storedNodeKey (dir: string, passphrase = PASS): Promise<PrivateKey> {
  const ds = new LevelDatastore(dir)
  await ds.open()
  try {
    const store = await openKeyStore(ds, { passphrase, persistent: true, where: dir })
    return store!.nodeKey
  } finally {
    await ds.close()
  }
}

const ROBOT = { key: 'robot', name: 'Patrol robot', skills: [{ id: 'security.patrol' }] }
const DRONE = { key: 'drone.1', name: 'Drone', skills: [{ id: 'security.drone' }] }

describe('keys at rest', () => {
  it('writes no plaintext key bytes (node, agents, gateway), keeps the identities across a restart, and is dialable by its old peer id over TCP', async () => {
    const dataDir = await tempDir()
    const gateway = { exports: [{ skill: 'security.patrol' }] }
    let node = await createIoaNode({ dataDir, keyStore: { passphrase: PASS }, gateway })
    const peer = node.transport.peerId.toString()
    const gatewayPeer = node.gateway!.inner.node.peerId.toString()
    const robot = await node.host(ROBOT)
    const drone = await node.host(DRONE)
    const agentKeys = [robot, drone].map(a => (a.identity as unknown as { privateKey: PrivateKey }).privateKey)
    await node.stop()

    const nodeKey = await storedNodeKey(dataDir)
    const gatewayKey = await storedNodeKey(join(dataDir, 'gateway'))
    expect(peerIdFromPrivateKey(nodeKey).toString()).toBe(peer)
    expect(peerIdFromPrivateKey(gatewayKey).toString()).toBe(gatewayPeer)
    const needles = [nodeKey, gatewayKey, ...agentKeys].flatMap(secrets)
    expect(await files(dataDir)).not.toHaveLength(0)
    expect(await filesHolding(dataDir, needles)).toEqual([])

    node = await createIoaNode({ dataDir, keyStore: { passphrase: PASS }, gateway })
    nodes.push(node)
    expect(node.transport.peerId.toString()).toBe(peer)
    expect(node.gateway!.inner.node.peerId.toString()).toBe(gatewayPeer)
    expect((await node.host(ROBOT)).did).toBe(robot.did)
    expect((await node.host(DRONE)).did).toBe(drone.did)

    // another node reaches it over TCP by the peer id it had before the restart (Noise proves the key)
    const other = await createIoaNode({})
    nodes.push(other)
    const tcp = node.addresses().find(a => a.includes('/tcp/') && !a.includes('/ws'))!
    const conn = await other.transport.dial(multiaddr(`${tcp.split('/p2p/')[0]}/p2p/${peer}`))
    expect(conn.remotePeer.toString()).toBe(peer)
  }, 90_000)

  it('refuses a wrong, short or missing passphrase with a KeyStoreError, and never writes a new identity', async () => {
    const dataDir = await tempDir()
    let node = await createIoaNode({ dataDir, keyStore: { passphrase: PASS } })
    const peer = node.transport.peerId.toString()
    const robot = await node.host(ROBOT)
    await node.stop()

    const wrong = await rejectionOf(createIoaNode({ dataDir, keyStore: { passphrase: 'not the passphrase at all', source: '$IOA_KEY_PASSPHRASE' } })) as KeyStoreError
    expect(wrong.name).toBe('KeyStoreError')
    expect(wrong.code).toBe('WRONG_PASSPHRASE')
    expect(wrong.field).toBe('$IOA_KEY_PASSPHRASE')
    expect(wrong.message).toContain(dataDir)

    const missing = await rejectionOf(createIoaNode({ dataDir })) as KeyStoreError
    expect([missing.name, missing.code]).toEqual(['KeyStoreError', 'PASSPHRASE_REQUIRED'])
    // the insecure mode cannot read an encrypted store either: refused, not a fresh identity
    const insecure = await rejectionOf(createIoaNode({ dataDir, keyStore: { insecurePlaintext: true } })) as KeyStoreError
    expect([insecure.name, insecure.code]).toEqual(['KeyStoreError', 'PASSPHRASE_REQUIRED'])
    const short = await rejectionOf(createIoaNode({ dataDir, keyStore: { passphrase: 'too short' } })) as KeyStoreError
    expect([short.name, short.code]).toEqual(['KeyStoreError', 'PASSPHRASE_TOO_SHORT'])

    // a new data directory is not started without a passphrase either
    const fresh = await rejectionOf(createIoaNode({ dataDir: await tempDir() })) as KeyStoreError
    expect([fresh.name, fresh.code]).toEqual(['KeyStoreError', 'PASSPHRASE_REQUIRED'])

    // the refused starts released the directory and changed nothing
    node = await createIoaNode({ dataDir, keyStore: { passphrase: PASS } })
    nodes.push(node)
    expect(node.transport.peerId.toString()).toBe(peer)
    expect((await node.host(ROBOT)).did).toBe(robot.did)
  }, 90_000)

  it('migrates a data directory of the plaintext layout: same identities, plaintext deleted from the files', async () => {
    const dataDir = await tempDir()
    // the earlier layout, written by the code that wrote it: libp2p's
    // passphrase-less keychain for the peer key, the interconnect's KeyStore
    // (protobuf, unencrypted) for agent keys
    const old = new LevelDatastore(dataDir)
    await old.open()
    const oldNodeKey = await loadOrCreateSelfKey(old)
    const oldRobot = await new KeyStore(old).loadOrCreate(ROBOT.key)
    const oldDrone = await new KeyStore(old).loadOrCreate(DRONE.key)
    await old.close()
    const oldKeys = [oldRobot, oldDrone].map(i => i.privateKey)
    // the agent keys are there in the clear
    expect(await filesHolding(dataDir, oldKeys.flatMap(secrets))).not.toEqual([])

    let node = await createIoaNode({ dataDir, keyStore: { passphrase: PASS } })
    expect(node.keyStore).toEqual({ encrypted: true, migrated: 3, openedIn: expect.any(Number) })
    expect(node.transport.peerId.toString()).toBe(peerIdFromPrivateKey(oldNodeKey).toString())
    expect((await node.host(ROBOT)).did).toBe(oldRobot.did)
    expect((await node.host(DRONE)).did).toBe(publicKeyToDid(oldDrone.privateKey.publicKey))
    await node.stop()

    // the plaintext entries are gone, and so are their bytes
    const ds = new LevelDatastore(dataDir)
    await ds.open()
    const left: string[] = []
    for await (const k of ds.queryKeys({})) {
      if (k.toString().startsWith('/ioa/agent-keys/') || k.toString().startsWith('/pkcs8/') || k.toString().startsWith('/info/')) left.push(k.toString())
    }
    expect(await ds.has(new Key('/ioa/keystore/params'))).toBe(true)
    await ds.close()
    expect(left).toEqual([])
    expect(await filesHolding(dataDir, [oldNodeKey, ...oldKeys].flatMap(secrets))).toEqual([])

    // and the migrated store needs its passphrase from now on
    const missing = await rejectionOf(createIoaNode({ dataDir })) as KeyStoreError
    expect(missing.code).toBe('PASSPHRASE_REQUIRED')
    node = await createIoaNode({ dataDir, keyStore: { passphrase: PASS } })
    nodes.push(node)
    expect(node.keyStore.migrated).toBe(0)
    expect(node.transport.peerId.toString()).toBe(peerIdFromPrivateKey(oldNodeKey).toString())
    expect((await node.host(ROBOT)).did).toBe(oldRobot.did)
  }, 90_000)

  it('runs a data directory without a passphrase only when insecurePlaintext says so, and memory needs none', async () => {
    const dataDir = await tempDir()
    let node = await createIoaNode({ dataDir, keyStore: { insecurePlaintext: true } })
    const peer = node.transport.peerId.toString()
    await node.stop()
    node = await createIoaNode({ dataDir, keyStore: { insecurePlaintext: true } })
    expect(node.transport.peerId.toString()).toBe(peer)
    await node.stop()
    expect((await stat(dataDir)).isDirectory()).toBe(true)

    node = await createIoaNode({})
    nodes.push(node)
    expect(node.keyStore).toEqual({ encrypted: false, openedIn: 0, migrated: 0 })
    expect((await node.host(ROBOT)).did).toMatch(/^did:key:z/)
  }, 60_000)

  it('startFromConfig: the passphrase from keyStore.passphraseFile, $IOA_KEY_PASSPHRASE_FILE or $IOA_KEY_PASSPHRASE; warnings for an exposed file and for plaintext keys', async () => {
    const dir = await tempDir()
    const dataDir = join(dir, 'state')
    const file = join(dir, 'node.pass')
    await writeFile(file, `${PASS}\n`, { mode: 0o644 })
    await chmod(file, 0o644)
    const events: NodeLogEvent[] = []
    const onEvent = (e: NodeLogEvent): void => { events.push(e) }
    let started = await startFromConfig({ dataDir }, { onEvent, env: { IOA_KEY_PASSPHRASE_FILE: file } })
    const peer = started.node.transport.peerId.toString()
    await started.stop()
    expect(events.filter(e => e.event === 'warning').map(e => e.data.text)).toEqual([`the passphrase file ${file} can be read by other users: chmod 600 it`])

    // the same passphrase by value, and by the config's field (file now 0600: no warning)
    events.length = 0
    started = await startFromConfig({ dataDir }, { onEvent, env: { IOA_KEY_PASSPHRASE: PASS } })
    expect(started.node.transport.peerId.toString()).toBe(peer)
    await started.stop()
    await chmod(file, 0o600)
    started = await startFromConfig({ dataDir, keyStore: { passphraseFile: file } }, { onEvent, env: { IOA_KEY_PASSPHRASE: 'ignored: the config names a file' } })
    expect(started.node.transport.peerId.toString()).toBe(peer)
    await started.stop()
    expect(events.filter(e => e.event === 'warning')).toEqual([])

    await writeFile(join(dir, 'empty.pass'), '\n')
    const empty = await rejectionOf(startFromConfig({ dataDir, keyStore: { passphraseFile: join(dir, 'empty.pass') } }, { env: {} })) as ConfigError
    expect([empty.name, empty.field]).toEqual(['ConfigError', 'keyStore.passphraseFile'])
    const missingFile = await rejectionOf(startFromConfig({ dataDir }, { env: { IOA_KEY_PASSPHRASE_FILE: join(dir, 'nope') } })) as ConfigError
    expect([missingFile.name, missingFile.field]).toEqual(['ConfigError', '$IOA_KEY_PASSPHRASE_FILE'])

    started = await startFromConfig({ dataDir: join(dir, 'plain'), keyStore: { insecurePlaintext: true } }, { onEvent, env: {} })
    await started.stop()
    expect(events.filter(e => e.event === 'warning').map(e => e.data.text)).toEqual([expect.stringContaining('stored unencrypted (keyStore.insecurePlaintext)')])
  }, 90_000)

  it('changes the passphrase in one batch: the old one is refused afterwards, the identities stay, no plaintext', async () => {
    const NEW = 'a brand new passphrase for the keys'
    const dataDir = await tempDir()
    let node = await createIoaNode({ dataDir, keyStore: { passphrase: PASS } })
    const peer = node.transport.peerId.toString()
    const robot = await node.host(ROBOT)
    const robotKey = (robot.identity as unknown as { privateKey: PrivateKey }).privateKey
    await node.stop()

    const ds = new LevelDatastore(dataDir)
    await ds.open()
    try {
      const oldParams = Buffer.from(await ds.get(new Key('/ioa/keystore/params'))).toString()
      const short = await rejectionOf(changePassphrase(ds, { passphrase: PASS, newPassphrase: 'short', newSource: '--new-passphrase-file', where: dataDir })) as KeyStoreError
      expect([short.code, short.field]).toEqual(['PASSPHRASE_TOO_SHORT', '--new-passphrase-file'])
      const wrong = await rejectionOf(changePassphrase(ds, { passphrase: 'not the passphrase at all', newPassphrase: NEW, where: dataDir })) as KeyStoreError
      expect(wrong.code).toBe('WRONG_PASSPHRASE')
      expect(await changePassphrase(ds, { passphrase: PASS, newPassphrase: NEW, where: dataDir })).toBe(2)
      // a new salt
      expect(Buffer.from(await ds.get(new Key('/ioa/keystore/params'))).toString()).not.toBe(oldParams)
    } finally {
      await ds.close()
    }
    const plain = new MemoryDatastore()
    const notEncrypted = await rejectionOf(changePassphrase(plain, { passphrase: PASS, newPassphrase: NEW, where: 'memory' })) as KeyStoreError
    expect(notEncrypted.code).toBe('NOT_ENCRYPTED')

    const old = await rejectionOf(createIoaNode({ dataDir, keyStore: { passphrase: PASS } })) as KeyStoreError
    expect(old.code).toBe('WRONG_PASSPHRASE')
    const nodeKey = await storedNodeKey(dataDir, NEW)
    expect(await filesHolding(dataDir, [nodeKey, robotKey].flatMap(secrets))).toEqual([])
    node = await createIoaNode({ dataDir, keyStore: { passphrase: NEW } })
    nodes.push(node)
    expect(node.transport.peerId.toString()).toBe(peer)
    expect((await node.host(ROBOT)).did).toBe(robot.did)
  }, 90_000)

  it('decrypts each key once per start and caches it', async () => {
    const dataDir = await tempDir()
    const ds = new LevelDatastore(dataDir)
    await ds.open()
    try {
      const store = (await openKeyStore(ds, { passphrase: PASS, persistent: true, where: dataDir }))!
      const a = await store.loadOrCreate('robot')
      const [b, c] = await Promise.all([store.loadOrCreate('robot'), store.loadOrCreate('robot')])
      expect(b).toBe(a)
      expect(c).toBe(a)
      expect(await store.agentNames()).toEqual(['robot'])
      const err = await rejectionOf(store.loadOrCreate('bad name!')) as KeyStoreError
      expect([err.name, err.code]).toEqual(['KeyStoreError', 'INVALID_KEY_NAME'])
      const other = await generateKeyPair('Ed25519')
      expect(a.did).not.toBe(publicKeyToDid(other.publicKey))
    } finally {
      await ds.close()
    }
  }, 60_000)
})

interface KeyStoreVectors {
  passphrase: string
  params: { version: 1, salt: string, iterationCount: number, keyLength: number, hash: string }
  dek: string
  entries: Record<string, string>
  nodeSeed: string
  peerId: string
  agent: { name: string, seed: string, did: string }
}

describe('spec/interconnect.md §1.3 key store test vectors', () => {
  const v = readSpecBlock<KeyStoreVectors>('interconnect.md', 'keystore-vectors')

  it('derives the DEK and decrypts the entries by the formulas of the spec alone (node:crypto, no keychain)', () => {
    const dek = pbkdf2Sync(Buffer.from(v.passphrase, 'utf8'), Buffer.from(v.params.salt, 'utf8'), v.params.iterationCount, v.params.keyLength, 'sha512')
    expect(dek.toString('base64').replace(/=+$/, '')).toBe(v.dek)
    const open = (value: string): Buffer => {
      expect(value[0]).toBe('m')
      const bytes = Buffer.from(value.slice(1), 'base64')
      const salt = bytes.subarray(0, 16)
      const nonce = bytes.subarray(16, 28)
      const tag = bytes.subarray(bytes.length - 16)
      const k = pbkdf2Sync(Buffer.from(v.dek, 'utf8'), salt, 32767, 16, 'sha256')
      const d = createDecipheriv('aes-128-gcm', k, nonce)
      d.setAuthTag(tag)
      return Buffer.concat([d.update(bytes.subarray(28, bytes.length - 16)), d.final()])
    }
    // the libp2p protobuf of an Ed25519 key: type 1, then the 64 bytes seed || public key
    const node = open(v.entries['/ioa/keystore/chain/pkcs8/self'])
    expect(toHex(node.subarray(0, 4))).toBe('08011240')
    expect(toHex(node.subarray(4, 36))).toBe(v.nodeSeed)
    const agentEntry = `/ioa/keystore/chain/pkcs8/agent-${Buffer.from(v.agent.name).toString('hex')}`
    expect(toHex(open(v.entries[agentEntry]).subarray(4, 36))).toBe(v.agent.seed)
    expect(v.params).toMatchObject({ iterationCount: KEYSTORE_DEFAULTS.iterationCount, keyLength: KEYSTORE_DEFAULTS.keyLength, hash: KEYSTORE_DEFAULTS.hash })
  })

  it('opens a datastore holding exactly the vector entries: the peer id and the agent did of the seeds', async () => {
    const ds = new MemoryDatastore()
    await ds.put(new Key('/ioa/keystore/params'), Buffer.from(JSON.stringify(v.params)))
    for (const [k, value] of Object.entries(v.entries)) await ds.put(new Key(k), Buffer.from(value, 'utf8'))
    const store = (await openKeyStore(ds, { passphrase: v.passphrase, persistent: true, where: 'the vectors' }))!
    expect(store.nodeKey.publicKey.toString()).toBe(v.peerId)
    expect(toHex(store.nodeKey.raw.subarray(0, 32))).toBe(v.nodeSeed)
    const agent = await store.loadOrCreate(v.agent.name)
    expect(agent.did).toBe(v.agent.did)
    expect(await store.agentNames()).toEqual([v.agent.name])
    const wrong = await rejectionOf(openKeyStore(ds, { passphrase: 'another passphrase of 20+', persistent: true, where: 'the vectors' })) as KeyStoreError
    expect(wrong.code).toBe('WRONG_PASSPHRASE')
  })
})
