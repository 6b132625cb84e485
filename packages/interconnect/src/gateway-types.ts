/**
 * The public types of the agent gateway (`gateway.ts`): export rules, rate
 * limits, options, components, stats and the gateway's interface.
 */
import type { SignedCard } from './card.js'
import type { Did } from './identity.js'
import type { Interconnect, InterconnectService } from './types.js'
import type { Messaging } from '@ioa/transport'
import type { ComponentLogger, PeerId } from '@libp2p/interface'

/** Which skills a gateway exports, and to whom */
export interface ExportRule {
  /**
   * What is exported, in the syntax of delegation tokens: `'*'` for every
   * skill, `travel.hotel.*` for `travel.hotel` and every skill below it. A
   * name without `.*` (`travel.hotel`) is read as the same prefix, as before
   * (an export rule never names one skill only).
   */
  skill: string
  /**
   * Domains whose agents may invoke these skills; `'*'` in the list allows any
   * caller, including one that sent no card
   *
   * @default any domain (the rule does not look at the caller)
   */
  domains?: string[]
}

export interface GatewayRateLimit {
  /** Requests a caller may make per period (also the burst size) */
  requests: number
  /** The period, in ms */
  per: number
}

/**
 * What a gateway uses (`createGateway` slices it from two interconnects on
 * transport nodes)
 */
export interface GatewayComponents {
  /** The interconnect of the node in the domain network */
  inner: InterconnectService
  /** The interconnect of the node in the public network */
  outer: InterconnectService
  /** The inner node's connected peers (listed directly for `'*'` rules) */
  innerConnections: { getPeers(): PeerId[] }
  /** The inner node's messaging (export requests to the agents' hosts) */
  innerMessaging: Pick<Messaging, 'request'>
  /**
   * The inner node's events: a peer that connects and speaks the card
   * protocol (`peer:identify`) starts a refresh (see `memberRefreshDelay`)
   */
  innerEvents?: Pick<EventTarget, 'addEventListener' | 'removeEventListener'>
  logger: ComponentLogger
}

/** The gateway's set of exported agents changed (after a refresh) */
export interface GatewayExportedEvent {
  type: 'exported'
  /** Every agent exported now */
  agents: Did[]
  /** Agents exported by this refresh that were not before */
  added: Did[]
  /** Agents no longer exported */
  removed: Did[]
  /** When the refresh finished, ms since the epoch */
  at: number
}

export interface GatewayInit extends GatewayOptions {
  /** The interconnect of the node in the domain network */
  inner: Interconnect
  /** The interconnect of the node in the public network */
  outer: Interconnect
}

/** A gateway's options (everything of `GatewayInit` but its interconnects) */
export interface GatewayOptions {
  /** The domain this gateway serves; only agents whose cards name it are exported */
  domain: string
  /** What is exported; nothing is exported unless a rule covers it */
  exports: ExportRule[]
  /**
   * How many forwarded requests each caller (libp2p peer) may make (a token
   * bucket per caller)
   *
   * @default { requests: 50, per: 1000 }
   */
  rateLimit?: GatewayRateLimit
  /**
   * How often the gateway looks for the domain's agents and renews their
   * export cards and announcements, in ms
   *
   * @default 30_000
   */
  refreshInterval?: number
  /**
   * Timeout of one inner lookup (an inner DHT walk or an export request), in ms
   *
   * @default 5_000
   */
  innerLookupTimeout?: number
  /**
   * Per-hop timeout of a message forwarded over the inner network, in ms
   *
   * @default 10_000
   */
  forwardTimeout?: number
  /**
   * Capability prefixes looked up in the domain for `'*'` rules (a DHT lookup
   * needs a name); agents of inner peers the gateway is connected to are
   * listed as well
   *
   * @default []
   */
  innerCapabilities?: string[]
  /**
   * Most callers whose rate is tracked at once; the least recently seen are
   * forgotten beyond this
   *
   * @default 10_000
   */
  maxCallers?: number
  /**
   * Most agents exported at once; agents found beyond this are not exported
   * (and logged)
   *
   * @default 4_096
   */
  maxExportedAgents?: number
  /**
   * After a domain member connects to the inner node (a peer that speaks the
   * card protocol), refresh after this delay, listing that peer's cards
   * directly as well, and again after 4 and 16 times it while the member has
   * no exported agent (agents it hosts and announces just after connecting),
   * in ms; 0 waits for the periodic refresh only. Members waiting for such a
   * refresh are bounded (64 at once; more wait for the periodic refresh).
   *
   * @default 250
   */
  memberRefreshDelay?: number
  /**
   * Called with an `exported` event whenever a refresh changes the set of
   * exported agents (the first export included)
   *
   * @default undefined
   */
  onExported?: (event: GatewayExportedEvent) => void
  /**
   * The name of the export rules in error messages (`gateway.exports` in a
   * node config)
   *
   * @default 'exports'
   */
  field?: string
  /**
   * Log component of the gateway
   *
   * @default 'ioa:interconnect:gateway'
   */
  logPrefix?: string
}

export interface GatewayStats {
  /** Messages forwarded to inner agents and answered */
  forwarded: number
  /** Calls refused by `admit` (route messages and calls of other relays): not exported or rate-limited */
  refused: number
  /** Refused because the export policy does not allow them */
  notExported: number
  /** Refused because the caller exceeded its rate */
  rateLimited: number
  /** Forwarded messages that failed in the domain */
  failed: number
  /** Agents currently exported */
  exportedAgents: number
  /** When the last refresh finished (ms since the epoch), 0 before the first */
  lastRefresh: number
}

/** Who asks a gateway to pass a call on */
export interface GatewayCaller {
  /** The calling libp2p peer (authenticated by the connection); its rate is charged */
  peer: string
  /**
   * The caller's domain, from a card that verified and is bound to `peer`;
   * undefined for a caller without one (only rules open to every domain
   * admit it)
   */
  domain?: string
}

export interface Gateway {
  readonly domain: string
  /** The export cards served outside now */
  exported(): SignedCard[]
  /** Is the agent exported by this gateway now (it has an export card)? */
  isExportedAgent(did: Did): boolean
  /**
   * The export policy and rate check of one call from outside to an exported
   * agent, counted in `stats()`. Throws `NotExportedError` when the agent is
   * not exported, the skill is absent or not offered on its export card, or
   * no rule exports it to the caller's domain; `RateLimitedError` when the
   * calling peer is over its rate (a token is taken otherwise). Route
   * messages go through it; other relays (tasks) call it before passing a
   * call on.
   */
  admit(to: Did, skill: string | undefined, caller: GatewayCaller): void
  /** Look for the domain's agents now and renew export cards and announcements */
  refresh(): Promise<void>
  /** Listen for `exported` events (see `GatewayOptions.onExported`); returns a function that removes the listener */
  onExported(listener: (event: GatewayExportedEvent) => void): () => void
  stats(): GatewayStats
  /** Stop serving and forwarding and withdraw the announcements (the nodes are left running) */
  stop(): Promise<void>
}

