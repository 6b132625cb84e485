/**
 * A multi-node test harness: start N transport nodes in one process, wire
 * them into a chosen topology, wait for their DHT routing tables to fill and
 * tear everything down again.
 *
 * It imports the transport layer by its package name (`@ioa/transport`, which
 * the workspace resolves to `packages/transport/dist`), exactly as the higher
 * layers do, so a test of any layer and the harness share one copy of the
 * transport code. Run `npx tsc -b` before the suites that use it.
 *
 * @example
 * ```ts
 * const net = await startNetwork({ size: 20, transport: 'memory', topology: 'random', degree: 3 })
 * try {
 *   await net.waitForRoutingTables(2)
 *   // ...
 * } finally {
 *   await net.stop()
 * }
 * ```
 */
import { createTransportNode } from '@ioa/transport'
import { LOOPBACK, delay, prng } from '../util.js'
import type { TransportNode, TransportNodeInit } from '@ioa/transport'
import type { Connection } from '@libp2p/interface'

export type HarnessTransport = 'tcp' | 'memory'

/**
 * How the nodes are connected when the network starts:
 *
 * - `star`: node 0 is the hub, every other node dials it
 * - `ring`: node i dials nodes i+1 … i+⌊degree/2⌋ (mod size); with the default
 *   degree 2 every node has exactly two neighbours
 * - `random`: a random ring (so the graph is connected) plus random chords
 *   until the average degree is `degree` (default 3)
 * - `full`: every pair of nodes is connected
 */
export type Topology = 'star' | 'ring' | 'random' | 'full'

export interface NetworkOptions {
  /** Number of nodes */
  size: number
  /** @default 'tcp' (on 127.0.0.1) */
  transport?: HarnessTransport
  /** @default 'ring' */
  topology?: Topology
  /** Target number of links per node for `ring` and `random` (default 2 for `ring`, 3 for `random`) */
  degree?: number
  /** Extra init options of node i (merged over the harness defaults) */
  nodeInit?: (i: number) => Partial<TransportNodeInit>
  /** How many nodes start, and how many links are dialled, at the same time (default 10) */
  concurrency?: number
  /** Seed of the random topology, for reproducible graphs (default: random) */
  seed?: number
  /** Abort start-up; started nodes are stopped again */
  signal?: AbortSignal
}

export interface WaitOptions {
  /** @default 30_000 */
  timeout?: number
  /** @default 50 */
  interval?: number
  /**
   * Also wait until every node's first DHT self-query has finished, so no
   * lookup of the test races the nodes' own start-up queries
   *
   * @default true
   */
  selfQuery?: boolean
  signal?: AbortSignal
}

export interface Network extends AsyncDisposable {
  /** The nodes, in creation order */
  readonly nodes: TransportNode[]
  /** The links dialled at start-up (plus those added by `connect`), as [dialler, listener] index pairs */
  readonly edges: Array<[number, number]>
  /** Number of DHT routing table entries of node i */
  dhtPeers(i: number): number
  /**
   * Wait until every node has at least `minPeers` peers in its DHT routing
   * table (and, unless `selfQuery: false`, has finished its first self-query)
   */
  waitForRoutingTables(minPeers: number, options?: WaitOptions): Promise<void>
  /** Whether node i has finished its first DHT self-query */
  selfQueryDone(i: number): boolean
  /** Dial node j from node i */
  connect(i: number, j: number, options?: { signal?: AbortSignal }): Promise<Connection>
  /** Whether nodes i and j currently have an open connection */
  isConnected(i: number, j: number): boolean
  /** Number of hops between nodes i and j in the start-up topology (`Infinity` when unreachable) */
  hops(i: number, j: number): number
  /** Stop every node (in parallel); safe to call more than once */
  stop(): Promise<void>
}

let networkCounter = 0

/** Run `fn` over `items` with at most `limit` calls in flight; rejects with the first error after all settle */
async function mapLimit<T, R> (items: T[], limit: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length)
  let next = 0
  let failure: { err: unknown } | undefined
  const worker = async (): Promise<void> => {
    while (next < items.length && failure == null) {
      const index = next++
      try {
        results[index] = await fn(items[index], index)
      } catch (err) {
        failure ??= { err }
      }
    }
  }
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, worker))
  if (failure != null) throw failure.err
  return results
}

/** The links of a topology as [dialler, listener] pairs without duplicates */
export function topologyEdges (size: number, topology: Topology, degree?: number, seed = Math.floor(Math.random() * 2 ** 32)): Array<[number, number]> {
  const edges: Array<[number, number]> = []
  const seen = new Set<string>()
  const add = (a: number, b: number): boolean => {
    if (a === b) return false
    const key = a < b ? `${a}:${b}` : `${b}:${a}`
    if (seen.has(key)) return false
    seen.add(key)
    edges.push([a, b])
    return true
  }
  if (size < 2) return edges

  switch (topology) {
    case 'star':
      for (let i = 1; i < size; i++) add(i, 0)
      break
    case 'full':
      for (let i = 0; i < size; i++) {
        for (let j = i + 1; j < size; j++) add(i, j)
      }
      break
    case 'ring': {
      const reach = Math.max(1, Math.floor((degree ?? 2) / 2))
      for (let i = 0; i < size; i++) {
        for (let d = 1; d <= reach; d++) add(i, (i + d) % size)
      }
      break
    }
    case 'random': {
      const rand = prng(seed)
      const order = Array.from({ length: size }, (_, i) => i)
      for (let i = size - 1; i > 0; i--) {
        const j = Math.floor(rand() * (i + 1))
        ;[order[i], order[j]] = [order[j], order[i]]
      }
      for (let i = 0; i < size; i++) add(order[i], order[(i + 1) % size])
      const target = Math.min(Math.ceil(size * (degree ?? 3) / 2), size * (size - 1) / 2)
      let attempts = 0
      while (edges.length < target && attempts++ < target * 100) {
        add(Math.floor(rand() * size), Math.floor(rand() * size))
      }
      break
    }
    default:
      throw new Error(`Unknown topology "${String(topology)}"`)
  }
  return edges
}

/** Number of entries in the DHT routing table of a node (0 when it has none, e.g. it is stopped) */
export function dhtRoutingTableSize (node: TransportNode): number {
  // `routingTable` is on kad-dht's `SingleKadDHT` (what `kadDHT()` creates at
  // run time) but not on the `KadDHT` interface the transport layer exposes
  const dht = node.services.dht as unknown as { routingTable?: { size?: number } }
  const size = dht.routingTable?.size
  if (typeof size === 'number') return size
  // fallback for a DHT without a visible routing table: count connected peers
  return node.getPeers().length
}

/**
 * Start `opts.size` nodes, connect them in `opts.topology` and return the
 * network. Nodes start `opts.concurrency` (10) at a time. When anything fails
 * the nodes started so far are stopped and the error is rethrown.
 */
export async function startNetwork (opts: NetworkOptions): Promise<Network> {
  const {
    size,
    transport = 'tcp',
    topology = 'ring',
    degree,
    nodeInit,
    concurrency = 10,
    signal
  } = opts
  if (!Number.isInteger(size) || size < 1) {
    throw new RangeError(`size must be a positive integer, got ${String(size)}`)
  }
  if (transport !== 'tcp' && transport !== 'memory') {
    throw new RangeError(`Unknown harness transport "${String(transport)}"`)
  }
  signal?.throwIfAborted()

  const netId = `${process.pid}-${networkCounter++}-${Math.random().toString(36).slice(2, 8)}`
  const defaults = (i: number): TransportNodeInit => transport === 'memory'
    ? { transports: ['memory'], listen: [`/memory/ioa-harness-${netId}-${i}`] }
    : { transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'], allow: LOOPBACK } // many nodes on one host: no inbound rate limit

  const started: TransportNode[] = []
  const nodes: TransportNode[] = new Array(size)
  const selfQueried = new Array<boolean>(size).fill(false)
  const edges: Array<[number, number]> = []
  let stopping: Promise<void> | undefined

  const stopAll = async (): Promise<void> => {
    stopping ??= (async () => {
      const results = await Promise.allSettled(started.map(async n => n.stop()))
      const failed = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected')
      if (failed.length > 0) {
        throw new AggregateError(failed.map(f => f.reason), `${failed.length} node(s) failed to stop`)
      }
    })()
    return stopping
  }

  const connect = async (i: number, j: number, options: { signal?: AbortSignal } = {}): Promise<Connection> => {
    const a = nodes[i]
    const b = nodes[j]
    if (a == null || b == null) throw new RangeError(`No node ${a == null ? i : j}`)
    const conn = await a.dial(b.getMultiaddrs(), { signal: options.signal })
    if (!edges.some(([x, y]) => (x === i && y === j) || (x === j && y === i))) edges.push([i, j])
    return conn
  }

  try {
    await mapLimit(Array.from({ length: size }, (_, i) => i), concurrency, async (i) => {
      signal?.throwIfAborted()
      const init = { ...defaults(i), ...nodeInit?.(i), start: true }
      const node = await createTransportNode(init)
      started.push(node)
      nodes[i] = node
      // libp2p re-dispatches the DHT's internal events on the node. The first
      // self-query waits for a routing table peer, so it cannot finish before
      // this listener is in place (unless nodeInit adds bootstrap peers).
      node.addEventListener('kad-dht:query:self' as any, () => { selfQueried[i] = true }, { once: true })
      return node
    })
    signal?.throwIfAborted()

    const wanted = topologyEdges(size, topology, degree, opts.seed)
    await mapLimit(wanted, concurrency, async ([i, j]) => {
      signal?.throwIfAborted()
      return connect(i, j, { signal })
    })
  } catch (err) {
    await stopAll().catch(() => {})
    throw err
  }

  const network: Network = {
    nodes,
    edges,
    dhtPeers: (i) => dhtRoutingTableSize(nodes[i]),
    async waitForRoutingTables (minPeers, options = {}) {
      const { timeout = 30_000, interval = 50, selfQuery = true } = options
      const waitSignal = options.signal ?? signal
      const deadline = Date.now() + timeout
      for (;;) {
        waitSignal?.throwIfAborted()
        const behind = nodes
          .map((n, i) => ({ i, peers: dhtRoutingTableSize(n), self: selfQueried[i] }))
          .filter(({ peers, self }) => peers < minPeers || (selfQuery && !self))
        if (behind.length === 0) return
        if (Date.now() >= deadline) {
          const detail = behind.slice(0, 10).map(({ i, peers, self }) => `node ${i}: ${peers} peers${self ? '' : ', self-query pending'}`).join('; ')
          throw new Error(`DHT routing tables did not reach ${minPeers} peers within ${timeout} ms (${behind.length} behind; ${detail})`)
        }
        await delay(interval, waitSignal)
      }
    },
    selfQueryDone: (i) => selfQueried[i],
    connect,
    isConnected: (i, j) => nodes[i].getConnections(nodes[j].peerId).some(c => c.status === 'open'),
    hops (i, j) {
      const adj = new Map<number, number[]>()
      for (const [a, b] of edges) {
        adj.set(a, [...(adj.get(a) ?? []), b])
        adj.set(b, [...(adj.get(b) ?? []), a])
      }
      const dist = new Map<number, number>([[i, 0]])
      const queue = [i]
      while (queue.length > 0) {
        const cur = queue.shift() as number
        if (cur === j) return dist.get(cur) as number
        for (const n of adj.get(cur) ?? []) {
          if (!dist.has(n)) {
            dist.set(n, (dist.get(cur) as number) + 1)
            queue.push(n)
          }
        }
      }
      return Infinity
    },
    stop: stopAll,
    [Symbol.asyncDispose]: stopAll
  }
  return network
}
