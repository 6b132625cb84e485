/**
 * A newcomer's first steps over TCP on 127.0.0.1 (issue 11 item 15): what
 * a node can do right after `createIoaNode({ bootstrap })` returns.
 */
import { execFile } from 'node:child_process'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { afterEach, describe, expect, it } from 'vitest'
import { multiaddr } from '@multiformats/multiaddr'
import { createIoaNode } from '../src/index.js'
import { until } from '../../../test/util.js'
import type { IoaNode } from '../src/index.js'

const nodes: IoaNode[] = []
afterEach(async () => {
  for (const n of nodes.splice(0).reverse()) await n.stop()
})

const TRANSPORT = { transports: ['tcp' as const] }
const PROTOCOL = '/ioa/test-cold/1.0.0'

describe('cold start over TCP', () => {
  it('a request to the bootstrap peer by its peer id, right after start, is answered (it hung in peer routing until its timeout)', async () => {
    const first = await createIoaNode({ transport: TRANSPORT })
    nodes.push(first)
    await first.transport.services.messaging.handle(PROTOCOL, 'echo', (payload) => payload)

    const newcomer = await createIoaNode({ transport: TRANSPORT, bootstrap: [first.addresses()[0]] })
    nodes.push(newcomer)
    // no wait for the bootstrap connection: the peer id alone
    const answer = await newcomer.transport.services.messaging.request(first.transport.peerId, PROTOCOL, 'echo', { hello: 'cold' }, { timeout: 20_000 })
    expect(answer).toEqual({ hello: 'cold' })
  })

  it('a node with no data directory or datastore starts without loading the key loader and keychain, LevelDB or the external-agent supervisor, with a fresh identity each time', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ioa-cold-'))
    try {
      const log = join(dir, 'loaded.txt')
      // a module hook in a fresh process notes every module it loads
      const hook = `import { appendFileSync } from 'node:fs'; export async function load (url, context, next) { appendFileSync(${JSON.stringify(log)}, url + '\\n'); return next(url, context) }`
      const script = [
        "import { register } from 'node:module'",
        `register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(hook)}))`,
        "const { createIoaNode } = await import('@ioa/node')",
        "const a = await createIoaNode({ transport: { transports: ['tcp'] } })",
        "const b = await createIoaNode({ transport: { transports: ['tcp'] } })",
        'process.stdout.write(JSON.stringify([a.transport.peerId.toString(), b.transport.peerId.toString()]))',
        'await a.stop(); await b.stop()'
      ].join('\n')
      const root = fileURLToPath(new URL('../../../', import.meta.url))
      const { stdout } = await promisify(execFile)(process.execPath, ['--import', join(root, 'scripts/polyfill.js'), '--input-type=module', '-e', script], { cwd: root, timeout: 60_000 })
      const [a, b] = JSON.parse(stdout) as string[]
      expect(a).not.toBe(b)
      const loaded = await readFile(log, 'utf8')
      // the stack itself was loaded (the hook saw it: from the stack bundle, or module by module without one), its key loader not
      expect(loaded).toMatch(/node_modules\/libp2p\/|transport\/dist\/bundle\/core\.js/)
      expect(loaded).not.toMatch(/node_modules\/@libp2p\/(config|keychain)\/|transport\/dist\/bundle\/config\.js/)
      // LevelDB is for a data directory, the process supervisor for an external agent
      expect(loaded).not.toMatch(/node_modules\/(datastore-level|level|classic-level|abstract-level)\//)
      expect(loaded).not.toMatch(/packages\/node\/dist\/src\/agents\/process\.js/)
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })

  it('holds its first DHT self-query while its first discovery runs, though the discovery has not walked the DHT yet', async () => {
    const host = await createIoaNode({ transport: TRANSPORT })
    nodes.push(host)
    await host.host({ key: 'cold-echo', name: 'Cold echo', skills: [{ id: 'cold.test.echo' }], handlers: { 'cold.test.echo': (input) => input } })
    // no bootstrap peer: the self-query falls due at once, before the routing table has a peer
    const newcomer = await createIoaNode({ transport: { ...TRANSPORT, selfQueryDelay: 0, selfQueryHold: 60_000 } })
    nodes.push(newcomer)
    type Internals = { routingTable: { size: number }, querySelf: { peerRouting: { getClosestPeers: (key: Uint8Array, options?: { isSelfQuery?: boolean }) => AsyncGenerator<unknown> } } }
    const dht = newcomer.transport.services.dht as unknown as Internals
    let selfWalks = 0
    const walk = dht.querySelf.peerRouting.getClosestPeers.bind(dht.querySelf.peerRouting)
    dht.querySelf.peerRouting.getClosestPeers = (key, options) => {
      if (options?.isSelfQuery === true) selfWalks++
      return walk(key, options)
    }
    // a discovery that stays open after its first agent (it asks its peer's index, then would walk)
    const lookup = newcomer.interconnect.discover({ capability: 'cold.test.echo' }, { limit: 2, timeout: 30_000 })[Symbol.asyncIterator]()
    const first = lookup.next()
    await newcomer.transport.dial(multiaddr(host.addresses()[0]))
    expect((await first).value?.card.name).toBe('Cold echo')
    await until(() => dht.routingTable.size > 0, { interval: 25, timeout: 20_000, what: 'a routing table peer' })
    expect(selfWalks).toBe(0)
    // the discovery ends: the self-query runs
    await lookup.return?.(undefined)
    await until(() => selfWalks > 0, { interval: 25, timeout: 20_000, what: 'the held self-query to run' })
  })

  it('a node given a datastore keeps its identity in it across restarts', async () => {
    const { MemoryDatastore } = await import('datastore-core')
    const datastore = new MemoryDatastore()
    const first = await createIoaNode({ transport: TRANSPORT, datastore })
    const id = first.transport.peerId.toString()
    await first.stop()
    const again = await createIoaNode({ transport: TRANSPORT, datastore })
    nodes.push(again)
    expect(again.transport.peerId.toString()).toBe(id)
  })
})
