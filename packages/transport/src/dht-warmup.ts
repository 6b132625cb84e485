/**
 * The DHT's first second (spec/transport.md 1, joining). kad-dht holds every query
 * back until its first self-query has finished: on a fresh node that is the
 * time to dial the ~20 peers closest to itself, a third of a second on
 * loopback, spent idle by the lookup a newcomer wants first. The node is
 * configured with `allowQueryWithZeroPeers` instead (no query waits for the
 * self-query), and two pieces here keep what the wait gave:
 *
 * - `untilRoutingPeers`: a query waits until the routing table holds one peer
 *   (a walk from an empty table ends at once with nothing), bounded;
 * - `warmRoutingTable`: the self-query that fills the routing table runs as
 *   soon as the first peer is in it, beside the first lookups instead of
 *   before them.
 */
import { anySignal } from 'any-signal'
import delay from 'delay'
import type { AbortOptions, ComponentLogger, PeerId } from '@libp2p/interface'

/** What these helpers read of a DHT's routing table */
export interface RoutingTableSize {
  readonly size: number
}

/** How often an empty routing table is looked at, ms */
const POLL = 10

/**
 * Wait until `table` holds a peer, `timeout` ms pass or the signal aborts
 * (then the caller's walk goes on with what the table holds). Resolves with
 * whether the table has a peer.
 *
 * @param timeout - most ms to wait (default 5000)
 */
export async function untilRoutingPeers (table: RoutingTableSize | undefined, options: AbortOptions & { timeout?: number } = {}): Promise<boolean> {
  if (table == null || table.size > 0) return true
  const until = Date.now() + (options.timeout ?? 5_000)
  while (table.size === 0 && Date.now() < until) {
    if (options.signal?.aborted === true) return false
    try {
      await delay(POLL, { signal: options.signal })
    } catch {
      return table.size > 0
    }
  }
  return table.size > 0
}

export interface WarmupComponents {
  peerId: PeerId
  logger: ComponentLogger
  dht: {
    routingTable: RoutingTableSize
    getClosestPeers(key: Uint8Array, options?: AbortOptions): AsyncIterable<unknown>
  }
}

/**
 * Once the routing table holds its first peer, walk to the peers closest to
 * this node (kad-dht's self-query, which fills the table); at most
 * `timeout` ms, ended early by the signal (the node stops). Never rejects.
 */
export async function warmRoutingTable (components: WarmupComponents, options: AbortOptions & { timeout?: number } = {}): Promise<void> {
  const log = components.logger.forComponent('ioa:transport:dht')
  const timeout = options.timeout ?? 30_000
  const started = Date.now()
  const signal = options.signal
  if (!await untilRoutingPeers(components.dht.routingTable, { signal, timeout })) return
  try {
    let peers = 0
    const walk = anySignal([AbortSignal.timeout(Math.max(1, timeout - (Date.now() - started))), signal])
    try {
      for await (const event of components.dht.getClosestPeers(components.peerId.toMultihash().bytes, { signal: walk })) {
        if ((event as { name?: string }).name === 'FINAL_PEER') peers++
      }
    } finally {
      walk.clear()
    }
    log('first self-lookup found %d peers in %d ms; routing table holds %d', peers, Date.now() - started, components.dht.routingTable.size)
  } catch (err: any) {
    if (signal?.aborted === true) return
    log('first self-lookup ended early: %s', err?.message ?? err)
  }
}
