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
 * - {@link EncodedPayload}: a messaging payload already encoded as
 *   DAG-CBOR, framed as it is (a requester that encoded the parts of a
 *   request once, for a hash or a signature, does not encode them again).
 * - {@link lookupStarted}: a lookup of the node runs (the first DHT
 *   self-query waits for it; spec/transport.md 1, joining).
 */
export { TokenBuckets } from './rate-limit.js'
export { lookupStarted } from './dht-start.js'
export { BoundedMap } from './bounded-map.js'
export type { BoundedMapInit } from './bounded-map.js'
export { EncodedPayload } from './codec.js'
