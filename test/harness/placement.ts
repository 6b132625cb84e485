/**
 * Where DHT provider records are, and what a lookup does (issue 14: "find
 * out where records are lost").
 *
 * - `recordPlacement(nodes, cid)`: which nodes hold a provider record of
 *   `cid`, for which providers, and how many of them are among the `k` (20)
 *   peers XOR-closest to the CID, computed from every node's peer id the way
 *   Kademlia does (SHA-256 of the peer id's multihash and of the CID's
 *   multihash).
 * - `traceLookup(node, cid)`: one bare kad-dht `findProviders` walk, event by
 *   event: the peers queried, in order, with their rank by distance; which
 *   answered, which answered with a provider, which failed (and why), and why
 *   the walk stopped.
 *
 * The provider store is read through kad-dht internals (`providers` on
 * `SingleKadDHT`, checked against @libp2p/kad-dht 16.4.5): its public
 * surface has no "what do you store" call, and asking each node over the
 * network (GET_PROVIDERS) would count what it forwards, not what it stores.
 */
import { sha256 } from 'multiformats/hashes/sha2'
import type { TransportNode } from '@ioa/transport'
import type { PeerId } from '@libp2p/interface'
import type { CID } from 'multiformats/cid'

/** The Kademlia id of some bytes: their SHA-256 digest */
export async function kadId (bytes: Uint8Array): Promise<Uint8Array> {
  return (await sha256.digest(bytes)).digest
}

/** kad-dht's provider store of a node (internal; see the top of this file) */
function providerStore (node: TransportNode): { getProviders(cid: CID): Promise<PeerId[]> } {
  const store = (node.services.dht as unknown as { providers?: { getProviders?: unknown } }).providers
  if (store == null || typeof store.getProviders !== 'function') {
    throw new Error('kad-dht has no provider store where expected (@libp2p/kad-dht 16.4.5: `providers` on the DHT service)')
  }
  return store as { getProviders(cid: CID): Promise<PeerId[]> }
}

/** Indices of `nodes` sorted by the XOR distance of their peer id to `cid`, closest first */
export async function byDistance (nodes: TransportNode[], cid: CID): Promise<number[]> {
  const target = await kadId(cid.multihash.bytes)
  const ids = await Promise.all(nodes.map(async n => kadId(n.peerId.toMultihash().bytes)))
  return nodes.map((_, i) => i).sort((a, b) => compareDistance(ids[a], ids[b], target))
}

/** Negative when `a` is XOR-closer to `target` than `b`, positive when farther, 0 when equal */
export function compareDistance (a: Uint8Array, b: Uint8Array, target: Uint8Array): number {
  for (let i = 0; i < target.length; i++) {
    const d = (a[i] ^ target[i]) - (b[i] ^ target[i])
    if (d !== 0) return d
  }
  return 0
}

export interface RecordHolder {
  /** Index of the node in `nodes` */
  index: number
  peer: string
  /** 0-based rank of the node by distance to the CID among all nodes */
  rank: number
  /** Providers whose record this node stores (other than itself) */
  providers: string[]
}

export interface Placement {
  cid: string
  /** The `k` nodes closest to the CID, as indices, closest first */
  closest: number[]
  /** Nodes storing a record of the CID for some other peer */
  holders: RecordHolder[]
  /** Number of holders among the `k` closest */
  holdersAmongClosest: number
  /** For each provider: how many nodes store its record, and how many of those are among the `k` closest */
  perProvider: Map<string, { holders: number, amongClosest: number }>
}

/**
 * Which nodes store a provider record of `cid`. A provider's own entry (kad-dht
 * adds one for itself when it provides) is not counted as a placement.
 */
export async function recordPlacement (nodes: TransportNode[], cid: CID, options: { k?: number } = {}): Promise<Placement> {
  const k = options.k ?? 20
  const order = await byDistance(nodes, cid)
  const rank = new Map(order.map((index, r) => [index, r]))
  const closest = order.slice(0, k)
  const holders: RecordHolder[] = []
  const perProvider = new Map<string, { holders: number, amongClosest: number }>()
  await Promise.all(nodes.map(async (node, index) => {
    const self = node.peerId.toString()
    const providers = (await providerStore(node).getProviders(cid)).map(p => p.toString()).filter(p => p !== self)
    if (providers.length === 0) return
    const r = rank.get(index) ?? Infinity
    holders.push({ index, peer: self, rank: r, providers })
    for (const p of providers) {
      const entry = perProvider.get(p) ?? { holders: 0, amongClosest: 0 }
      entry.holders++
      if (r < k) entry.amongClosest++
      perProvider.set(p, entry)
    }
  }))
  holders.sort((a, b) => a.rank - b.rank)
  return { cid: cid.toString(), closest, holders, holdersAmongClosest: holders.filter(h => h.rank < k).length, perProvider }
}

export interface QueriedPeer {
  peer: string
  /** Rank by distance to the CID among `nodes` (`-1` when the peer is not one of them) */
  rank: number
  /** Disjoint path the query ran on */
  path: number
  /** ms since the lookup started */
  sentAt: number
  outcome: 'response' | 'error' | 'pending'
  /** Providers the peer answered with */
  providers: string[]
  /** Closer peers the peer answered with */
  closer: number
  error?: string
}

export type StopReason = 'paths-ended' | 'enough-providers' | 'aborted' | 'error'

export interface LookupTrace {
  /** Queries in the order they were sent */
  queried: QueriedPeer[]
  /** Providers found, in the order they were found */
  providers: string[]
  /** Why the walk ended: all paths ran out of closer peers, kad-dht found its `k` providers, the signal aborted, or it threw */
  stopped: StopReason
  error?: string
  /** Paths that ended (each path ends when it has no closer peer left to ask) */
  pathsEnded: number
  /** Queries that failed, by error name */
  errors: Record<string, number>
  ms: number
}

/** Ranks of the peers of `nodes` by distance to `cid` */
async function ranks (nodes: TransportNode[], cid: CID): Promise<Map<string, number>> {
  const order = nodes.length > 0 ? await byDistance(nodes, cid) : []
  return new Map(order.map((index, r) => [nodes[index].peerId.toString(), r]))
}

/** Folds kad-dht query events into the queries they describe */
class Tracer {
  readonly queried: QueriedPeer[] = []
  readonly providers: string[] = []
  readonly errors: Record<string, number> = {}
  pathsEnded = 0
  private readonly open = new Map<string, QueriedPeer>()
  private readonly started = performance.now()

  constructor (private readonly rankOf: Map<string, number>) {}

  get ms (): number { return performance.now() - this.started }

  /** Take one event; `type` narrows the queries to one message type (e.g. 'FIND_NODE') */
  add (event: any, type?: string): void {
    const key = String(event.to ?? event.from)
    switch (event.name) {
      case 'SEND_QUERY': {
        if (type != null && event.messageName !== type) return
        const q: QueriedPeer = { peer: key, rank: this.rankOf.get(key) ?? -1, path: event.path?.index ?? -1, sentAt: this.ms, outcome: 'pending', providers: [], closer: 0 }
        this.queried.push(q)
        this.open.set(key, q)
        return
      }
      case 'PEER_RESPONSE': {
        if (type != null && event.messageName !== type) return
        const q = this.open.get(key)
        if (q == null) return
        q.outcome = 'response'
        q.providers = (event.providers ?? []).map((p: { id: PeerId }) => p.id.toString())
        q.closer = event.closer?.length ?? 0
        return
      }
      case 'QUERY_ERROR': {
        const name = String(event.error?.name ?? 'Error')
        this.errors[name] = (this.errors[name] ?? 0) + 1
        const q = this.open.get(key)
        if (q != null && q.outcome === 'pending') {
          q.outcome = 'error'
          q.error = `${name}: ${String(event.error?.message ?? '')}`
        }
        return
      }
      case 'PROVIDER':
        for (const p of event.providers as Array<{ id: PeerId }>) this.providers.push(p.id.toString())
        return
      case 'PATH_ENDED':
        this.pathsEnded++
    }
  }
}

/** Run one bare kad-dht `findProviders` of `cid` from `node` and record what it did */
export async function traceLookup (node: TransportNode, cid: CID, nodes: TransportNode[] = [], options: { signal?: AbortSignal, k?: number } = {}): Promise<LookupTrace> {
  const k = options.k ?? 20
  const tracer = new Tracer(await ranks(nodes, cid))
  let stopped: StopReason = 'paths-ended'
  let error: string | undefined
  const signal = options.signal ?? AbortSignal.timeout(30_000)
  try {
    for await (const event of node.services.dht.findProviders(cid, { signal })) tracer.add(event)
    if (tracer.providers.length >= k) stopped = 'enough-providers'
  } catch (err: any) {
    stopped = signal.aborted ? 'aborted' : 'error'
    error = String(err?.message ?? err)
  }
  const { queried, providers, pathsEnded, errors } = tracer
  return { queried, providers, stopped, error, pathsEnded, errors, ms: tracer.ms }
}

export interface ProvideTrace {
  /** FIND_NODE queries of the walk, in the order they were sent */
  queried: QueriedPeer[]
  /** Peers the walk ended on (kad-dht's FINAL_PEER events), as ranks by distance (`-1`: not in `nodes`) */
  finalPeers: number[]
  /** Ranks of the peers that accepted the ADD_PROVIDER message */
  accepted: number[]
  errors: Record<string, number>
  error?: string
  ms: number
}

/** Run one bare kad-dht `provide` of `cid` from `node` and record what its walk did */
export async function traceProvide (node: TransportNode, cid: CID, nodes: TransportNode[] = [], options: { signal?: AbortSignal } = {}): Promise<ProvideTrace> {
  const rankOf = await ranks(nodes, cid)
  const tracer = new Tracer(rankOf)
  const finalPeers: number[] = []
  const accepted: number[] = []
  let error: string | undefined
  try {
    for await (const event of node.services.dht.provide(cid, { signal: options.signal ?? AbortSignal.timeout(30_000) }) as AsyncIterable<any>) {
      tracer.add(event, 'FIND_NODE')
      if (event.name === 'FINAL_PEER') finalPeers.push(rankOf.get(event.peer.id.toString()) ?? -1)
      if (event.name === 'PEER_RESPONSE' && event.messageName === 'ADD_PROVIDER') accepted.push(rankOf.get(event.from.toString()) ?? -1)
    }
  } catch (err: any) {
    error = `${String(err?.name)}: ${String(err?.message ?? err)}`
  }
  return { queried: tracer.queried, finalPeers, accepted, errors: tracer.errors, error, ms: tracer.ms }
}
