/**
 * @packageDocumentation
 *
 * `@ioa/transport/internal`: helpers the layers of the stack share, which
 * are not part of the transport's public API (no promise of stability to
 * users; see docs/architecture.md, "Layers and packages").
 *
 * - {@link TokenBuckets}: per-key token buckets for rate limits over many
 *   keys (peers, addresses), with a bound on the keys tracked.
 * - {@link BoundedMap}: a map bounded in entries and total weight, least
 *   recently used first out, counting its evictions (the caches of the
 *   interconnect).
 * - {@link untilRoutingPeers}: wait until the DHT's routing table holds a
 *   peer before a walk (the node does not hold queries back itself; see
 *   dht-warmup.ts).
 */
export { TokenBuckets } from './rate-limit.js'
export { BoundedMap } from './bounded-map.js'
export type { BoundedMapInit } from './bounded-map.js'
export { untilRoutingPeers } from './dht-warmup.js'
export type { RoutingTableSize } from './dht-warmup.js'
