/**
 * Protocol ids and wire bounds of the interconnect (spec `interconnect.md`)
 */

/** Card protocol: fetch signed cards from a peer */
export const CARD_PROTOCOL = '/ioa/card/1.0.0'
/** Routing protocol: deliver a message to an agent's inbox */
export const ROUTE_PROTOCOL = '/ioa/route/1.0.0'

/** Most bytes of cards one `list` answer carries (below the 1 MiB frame limit) */
export const LIST_BYTE_BUDGET = 786_432

/** Most cards one `list` answer carries */
export const MAX_CARDS_PER_LIST = 256

/** Index query: ask a peer for its gossip index entries of one capability (spec section 12.6) */
export const CAPS_INDEX_PROTOCOL = '/ioa/caps-index/1.0.0'
