/**
 * Config files as a user writes them, through the real `ioa` bin (issue 11
 * items 4, 10, 11): every bad value exits 2 naming its field before anything
 * starts; `${NAME}` takes values from the environment and `--trust-root`
 * sets the trusted roots (enforced over TCP); a UTF-8 byte order mark is
 * skipped; `examples/node.json` starts with plain Node.js and serves a task.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { delegate } from '@ioa/collab'
import { createIdentity } from '@ioa/interconnect'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { LOOPBACK, expectErrorCode } from '../../../test/util.js'
import { createIoaNode } from '../src/index.js'
import { errorLineOf, runIoa, startIoa } from './fixtures/run-ioa.js'
import type { IoaRun } from './fixtures/run-ioa.js'
import type { Token } from '@ioa/collab'
import type { Identity } from '@ioa/interconnect'

const ECHO_AGENT = fileURLToPath(new URL('./fixtures/cli/echo-agent.mjs', import.meta.url))
const EXAMPLE = fileURLToPath(new URL('../../../examples/node.json', import.meta.url))

let dir: string
let peer: string

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'ioa-config-cli-'))
  peer = peerIdFromPrivateKey(await generateKeyPair('Ed25519')).toString()
})

afterAll(async () => {
  await rm(dir, { recursive: true, force: true })
})

/** Run `tasks` with at most `n` at once (each is a Node.js process on a loaded machine) */
async function limited<T> (n: number, tasks: Array<() => Promise<T>>): Promise<T[]> {
  const out: T[] = new Array(tasks.length)
  let next = 0
  await Promise.all(Array.from({ length: n }, async () => {
    while (next < tasks.length) {
      const i = next++
      out[i] = await tasks[i]()
    }
  }))
  return out
}

const agent = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({ key: 'a', name: 'A', skills: [{ id: 'demo.echo' }], ...extra })

describe('a bad config exits 2 naming the field', () => {
  it('for each value a user mistypes', async () => {
    const malformedPeer = peer.slice(0, -3)
    const cases: Array<{ what: string, config: unknown, args?: string[], env?: Record<string, string>, field: string, says: string }> = [
      { what: 'an invalid capability id', config: { agents: [agent({ skills: [{ id: 'Travel Hotel!' }] })] }, field: 'agents.0.skills.0.id', says: 'capability' },
      { what: 'two agents with one key', config: { agents: [agent(), agent({ name: 'B' })] }, field: 'agents.1.key', says: 'agents.0' },
      { what: 'maxFrameSize too large', config: { limits: { maxFrameSize: 99_999_999_999 } }, field: 'limits.maxFrameSize', says: '4194304' },
      { what: 'maxFrameSize too small', config: { limits: { maxFrameSize: 10 } }, field: 'limits.maxFrameSize', says: '4096' },
      { what: 'requestTimeout above the timer limit', config: { limits: { requestTimeout: 99_999_999_999 } }, field: 'limits.requestTimeout', says: '2147483647' },
      { what: 'a listen address that is no multiaddr', config: { listen: ['127.0.0.1:4001'] }, field: 'listen.0', says: 'not a multiaddr' },
      { what: 'port 99999', config: { listen: ['/ip4/127.0.0.1/tcp/99999'] }, field: 'listen.0', says: '65535' },
      { what: 'a malformed peer id in bootstrap', config: { bootstrap: [`/ip4/127.0.0.1/tcp/4001/p2p/${malformedPeer}`] }, field: 'bootstrap.0', says: 'peer id' },
      { what: 'a bootstrap address without a peer', config: { bootstrap: ['/ip4/127.0.0.1/tcp/4001'] }, field: 'bootstrap.0', says: '/p2p/' },
      { what: 'a malformed gateway peer id', config: { behindGateways: [{ outer: malformedPeer, inner: peer }] }, field: 'behindGateways.0.outer', says: 'peer id' },
      { what: 'an oversized inputSchema', config: { agents: [agent({ skills: [{ id: 'demo.echo', inputSchema: { description: 'x'.repeat(20_000) } }] })] }, field: 'agents.0.skills.0.inputSchema', says: '16384' },
      { what: 'a missing agent command', config: { agents: [agent({ command: ['./no-such-agent.py'] })] }, field: 'agents.0.command', says: 'does not exist' },
      { what: 'an agent command not in PATH', config: { agents: [agent({ command: ['no-such-ioa-agent-program'] })] }, field: 'agents.0.command', says: 'PATH' },
      { what: 'providerTtl above the timer limit', config: { providerTtl: 2 ** 31 }, field: 'providerTtl', says: '2147483647' },
      {
        what: 'a gateway refresh above the timer limit',
        config: { gateway: { exports: [{ skill: 'demo' }], refreshInterval: 2 ** 32 } },
        field: 'gateway.refreshInterval',
        says: '2147483647'
      },
      { what: 'an unset environment variable', config: { tasks: { roots: ['${IOA_TEST_UNSET_ROOT}'] } }, field: 'tasks.roots.0', says: 'IOA_TEST_UNSET_ROOT' },
      { what: 'a malformed substitution', config: { domain: '${not a name}' }, field: 'domain', says: '${NAME}' },
      { what: 'a trusted root that is no did', config: {}, args: ['--trust-root', 'alice'], field: '--trust-root', says: 'did:key' }
    ]
    const runs: IoaRun[] = await limited(3, cases.map((c, i) => async () => {
      const file = join(dir, `bad-${i}.json`)
      await writeFile(file, JSON.stringify(c.config))
      return runIoa(['start', '--json', '--config', file, ...(c.args ?? [])], { cwd: dir, env: c.env })
    }))
    for (const [i, c] of cases.entries()) {
      const run = runs[i]
      expect(run.code, `${c.what}: ${run.stderr}`).toBe(2)
      expect(run.stdout, c.what).toBe('')
      const line = errorLineOf(run)
      expect(line.field, `${c.what}: ${line.message}`).toBe(c.field)
      expect(line.message, c.what).toContain(c.says)
    }
  }, 600_000)
})

describe('the timer limit through the API', () => {
  it('createIoaNode refuses a providerTtl above 2^31-1 ms (the reprovider would fire every 1 ms)', async () => {
    const err = await expectErrorCode(createIoaNode({ transport: { providerTtl: 2 ** 31 } }), 'INVALID_ARGUMENT')
    expect(err.message).toContain('2147483647')
  })
})

describe('values from the environment and the command line', () => {
  let alice: Identity
  let mallory: Identity

  beforeAll(async () => {
    alice = await createIdentity()
    mallory = await createIdentity()
  })

  it('${NAME} fills string values ($${ is literal), a BOM is skipped, --trust-root decides whose chains the agents accept', async () => {
    const file = join(dir, 'env.json')
    const config = {
      domain: '${IOA_TEST_DOMAIN}',
      listen: ['${IOA_TEST_LISTEN}'],
      limits: { allow: LOOPBACK },
      agents: [{ key: 'echo', name: 'Echo $${NOT_SUBSTITUTED} for ${IOA_TEST_DOMAIN}', module: ECHO_AGENT, skills: [{ id: 'demo.echo' }] }]
    }
    // an editor's UTF-8 byte order mark before the JSON
    await writeFile(file, '\uFEFF' + JSON.stringify(config, null, 2))
    const node = await startIoa(['--config', file, '--trust-root', alice.did], {
      cwd: dir,
      env: { IOA_TEST_DOMAIN: 'env.example', IOA_TEST_LISTEN: '/ip4/127.0.0.1/tcp/0' }
    })
    const client = await createIoaNode({ bootstrap: [node.ready.addresses[0]] })
    try {
      expect(node.ready.domain).toBe('env.example')
      expect(node.ready.addresses[0]).toMatch(/^\/ip4\/127\.0\.0\.1\/tcp\/\d+\/p2p\//)
      expect(node.ready.agents[0].name).toBe('Echo ${NOT_SUBSTITUTED} for env.example')
      const echo = node.ready.agents[0].did
      const guest = await client.host({ key: 'guest', name: 'Guest', skills: [{ id: 'guest' }] })
      const grant = async (root: Identity): Promise<Token[]> => [await delegate(root, { audience: guest.did, capabilities: [{ skill: 'demo.echo' }], expiresAt: Date.now() + 120_000 })]
      const done = await client.tasks.submitAndWait(guest.identity, echo, { skill: 'demo.echo', input: { n: 1 }, proofs: await grant(alice) }, { signal: AbortSignal.timeout(60_000) })
      expect(done.result).toEqual({ echoed: { n: 1 } })
      // a chain rooted elsewhere is refused by the node: the flag's roots are in force
      await expectErrorCode(client.tasks.submitAndWait(guest.identity, echo, { skill: 'demo.echo', input: { n: 2 }, proofs: await grant(mallory) }, { signal: AbortSignal.timeout(60_000) }), 'PRINCIPAL_MISMATCH')
    } finally {
      await client.stop()
      expect(await node.stop()).toBe(0)
    }
  }, 240_000)
})

describe('examples/node.json', () => {
  it('ioa start --config examples/node.json runs its JavaScript agent module with plain Node.js and books a room over TCP', async () => {
    const node = await startIoa(['--config', EXAMPLE], { cwd: dir })
    const client = await createIoaNode({ bootstrap: [node.ready.addresses[0]] })
    try {
      expect(node.ready).toMatchObject({ domain: 'hotels.example', agents: [{ key: 'hotel', kind: 'module', skills: ['travel.hotel.booking'] }] })
      const hotel = node.ready.agents[0].did
      const guest = await client.host({ key: 'guest', name: 'Guest', skills: [{ id: 'guest' }] })
      const proofs = [await delegate(await createIdentity(), { audience: guest.did, capabilities: [{ skill: 'travel.hotel.booking' }], expiresAt: Date.now() + 120_000 })]
      const done = await client.tasks.submitAndWait(guest.identity, hotel, { skill: 'travel.hotel.booking', input: {}, proofs }, { signal: AbortSignal.timeout(60_000) })
      expect(done.result).toEqual({ booked: true, hotel, guest: guest.did, free: 0 })
    } finally {
      await client.stop()
      expect(await node.stop()).toBe(0)
    }
  }, 240_000)
})
