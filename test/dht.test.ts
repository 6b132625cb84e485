/**
 * Multi-hop Kademlia lookups across a sparse network: a provider P announces
 * a CID, and an asker A that holds no copy of the record and has no
 * connection to P finds P through the DHT (the record comes from peers in
 * between, not only from P), then reaches P at the addresses the DHT returned.
 */
import { CID } from 'multiformats/cid'
import { sha256 } from 'multiformats/hashes/sha2'
import { afterEach, describe, expect, it } from 'vitest'
import { startNetwork } from './harness/index.js'
import type { Network, NetworkOptions } from './harness/index.js'
import type { PeerId } from '@libp2p/interface'

let net: Network | undefined

afterEach(async () => {
  await net?.stop()
  net = undefined
})

interface LookupResult {
  asker: number
  /** `true` when the asker had been reached by P's provide walk and its connection to P was closed */
  hungUp: boolean
  /** peers that P stored its provider record on */
  recordHolders: number
  /** peers that answered A's GET_PROVIDERS with P among the providers */
  recordSources: PeerId[]
  /** distinct peers A sent a query to */
  queried: number
  /** hops between A and P in the start-up topology */
  hops: number
  ms: { provide: number, find: number }
}

/**
 * P (node 0) provides a fresh CID. The asker A is a node that holds no copy
 * of the record and has no connection to P, the farthest such node from P in
 * the start-up topology (at least two hops away). P's provide walk dials many
 * peers, so when it has reached every such node the farthest non-holder is
 * taken and its connection to P is closed. A then looks the CID up with `contentRouting.findProviders`.
 */
async function provideAndFind (network: Network, label: string): Promise<LookupResult> {
  const { nodes } = network
  const P = nodes[0]
  const cid = CID.createV1(0x55, await sha256.digest(new TextEncoder().encode(`${label} ${Date.now()} ${Math.random()}`)))

  const holders = new Set<string>()
  let t = Date.now()
  await P.contentRouting.provide(cid, {
    signal: AbortSignal.timeout(30_000),
    onProgress: (evt: any) => {
      if (evt.type === 'kad-dht:query:peer-response' && evt.detail.messageName === 'ADD_PROVIDER') holders.add(evt.detail.from.toString())
    }
  } as any)
  const provideMs = Date.now() - t
  expect(holders.size, 'P stored its record on other peers').toBeGreaterThan(0)

  const byDistance = nodes
    .map((_, i) => i)
    .filter(i => i !== 0 && !holders.has(nodes[i].peerId.toString()))
    .sort((a, b) => network.hops(b, 0) - network.hops(a, 0))
  expect(byDistance.length, 'some node holds no copy of the record').toBeGreaterThan(0)
  // (a start-up neighbour of P may have lost its connection too: skip those)
  const unconnected = byDistance.filter(i => network.hops(i, 0) >= 2 && nodes[i].getConnections(P.peerId).length === 0)
  const asker = unconnected[0] ?? byDistance[0]
  const A = nodes[asker]
  const hungUp = unconnected.length === 0
  if (hungUp) {
    await A.hangUp(P.peerId)
    await P.hangUp(A.peerId)
  }

  // A has no connection to P before the lookup
  expect(A.getConnections(P.peerId)).toHaveLength(0)
  expect(P.getConnections(A.peerId)).toHaveLength(0)

  const recordSources: PeerId[] = []
  const queried = new Set<string>()
  const found: string[] = []
  let foundAddrs: string[] = []
  t = Date.now()
  // run the lookup to its end (P is the only provider) to see every answer
  for await (const info of A.contentRouting.findProviders(cid, {
    signal: AbortSignal.timeout(30_000),
    onProgress: (evt: any) => {
      if (evt.type === 'kad-dht:query:send-query') queried.add(evt.detail.to.toString())
      if (evt.type === 'kad-dht:query:peer-response' && evt.detail.providers?.some((p: { id: PeerId }) => p.id.equals(P.peerId)) === true) {
        recordSources.push(evt.detail.from)
      }
    }
  } as any)) {
    found.push(info.id.toString())
    if (info.id.equals(P.peerId)) foundAddrs = info.multiaddrs.map(ma => ma.toString())
  }
  const findMs = Date.now() - t

  expect(found).toContain(P.peerId.toString())
  expect(foundAddrs.length, 'the DHT returned addresses of P').toBeGreaterThan(0)
  // the record came from peers in between, not (only) from P itself
  expect(recordSources.some(from => !from.equals(P.peerId) && !from.equals(A.peerId))).toBe(true)
  expect(queried.size).toBeGreaterThan(0)

  // A reaches P at the addresses the DHT gave it
  const conn = await A.dial(P.peerId, { signal: AbortSignal.timeout(10_000) })
  expect(conn.remotePeer.equals(P.peerId)).toBe(true)

  return {
    asker,
    hungUp,
    recordHolders: holders.size,
    recordSources,
    queried: queried.size,
    hops: network.hops(asker, 0),
    ms: { provide: provideMs, find: findMs }
  }
}

function report (label: string, ready: number, r: LookupResult): void {
  console.log(`${label}: ready ${ready} ms, provide ${r.ms.provide} ms (${r.recordHolders} holders), find ${r.ms.find} ms; ` +
    `asker ${r.asker} is ${r.hops} hops from P in the start-up graph${r.hungUp ? ' (connection from the provide walk closed)' : ''}, ` +
    `queried ${r.queried} peers, record from ${r.recordSources.length} peer(s)`)
}

interface LookupCase {
  /** Names the CID that P provides */
  label: string
  /** Names the case in the report */
  title: string
  network: NetworkOptions
  /** How long the routing tables may take to fill */
  readyTimeout: number
  /** Checks of the start-up graph, before the routing tables fill */
  checkGraph?: (network: Network) => void
}

/**
 * Start the network of `c`, wait for its routing tables, run provideAndFind
 * and report it; the asker must be at least two hops from P.
 */
async function lookupAcross (c: LookupCase): Promise<void> {
  const started = Date.now()
  const network = await startNetwork(c.network)
  net = network
  c.checkGraph?.(network)
  await network.waitForRoutingTables(2, { timeout: c.readyTimeout })
  const ready = Date.now() - started

  const result = await provideAndFind(network, c.label)
  report(c.title, ready, result)
  expect(result.hops).toBeGreaterThanOrEqual(2)
}

describe('DHT lookups across a sparse network', () => {
  it('finds a provider over several hops among 50 memory nodes', async () => {
    await lookupAcross({
      label: 'memory-50',
      title: 'memory, 50 nodes',
      // the bare DHT is under test: no gossipsub beside it on 50 nodes in one process
      network: { size: 50, transport: 'memory', topology: 'random', degree: 3, seed: 50, nodeInit: () => ({ pubsub: false }) },
      readyTimeout: 40_000,
      checkGraph: (network) => {
        // the start-up graph is sparse: 75 links among 50 nodes, nobody near k = 20
        const degrees = new Array<number>(50).fill(0)
        for (const [a, b] of network.edges) { degrees[a]++; degrees[b]++ }
        expect(network.edges).toHaveLength(75)
        expect(Math.max(...degrees)).toBeLessThan(10)
      }
    })
  }, 90_000)

  it('finds a provider over TCP among 20 nodes', async () => {
    await lookupAcross({
      label: 'tcp-20',
      title: 'tcp, 20 nodes',
      // k = 20 with 20 nodes would let every lookup reach every peer; a small
      // bucket keeps the routing tables partial so the lookup has to hop
      network: { size: 20, transport: 'tcp', topology: 'ring', nodeInit: () => ({ dhtKBucketSize: 4 }) },
      readyTimeout: 30_000
    })
  }, 60_000)
})
