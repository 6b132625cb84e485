/**
 * The public types of the interconnect service: its options, what it hosts,
 * what discovery returns and the service's interface.
 */
import type { Availability, AgentCard, SignedCard, Skill, SkillInit } from './card.js'
import type { InterconnectCacheStats } from './caches.js'
import type { AgentHistory, Outcome } from './history.js'
import type { AgentKeyStore, Did, Identity } from './identity.js'
import type { GossipView } from './gossip/channel.js'
import type { GossipInit } from './gossip/options.js'
import type { DiscoveryQuery, Ranker } from './ranking.js'
import type { RequestContext, TransportNode } from '@ioa/transport'
import type { AbortOptions, PeerId } from '@libp2p/interface'
import type { Datastore } from 'interface-datastore'

export interface InterconnectInit {
  /**
   * Where agent keys are kept (use the node's persistent datastore so agent ids
   * survive restarts)
   *
   * @default an in-memory datastore
   */
  datastore?: Datastore

  /**
   * Where agent keys are kept instead of `datastore` (e.g. an encrypted key
   * store)
   *
   * @default a `KeyStore` on `datastore` (unencrypted)
   */
  keys?: AgentKeyStore

  /**
   * Domain (organisation) of agents hosted here, unless an agent names its own
   *
   * @default 'local'
   */
  domain?: string

  /**
   * How long a signed card is valid, in ms; cards are re-signed at half-life
   *
   * @default 3_600_000
   */
  cardTtl?: number

  /**
   * How long discovery results and resolved routes are cached, in ms
   *
   * @default 30_000
   */
  cacheTtl?: number

  /**
   * Announce hosted agents (their ids and capabilities) in the DHT
   *
   * @default true
   */
  publish?: boolean

  /**
   * Announce each hosted agent's id in the DHT (needed to `send` to an agent
   * by id from nodes that did not discover it by capability)
   *
   * @default true
   */
  announceAgentIds?: boolean

  /**
   * DHT announcements (each a walk of the DHT) running at once
   *
   * @default 8
   */
  announceConcurrency?: number

  /**
   * Outer peer ids of this domain's gateways. Hosted agents' cards list them,
   * so that the gateways may serve the cards and forward to the agents.
   *
   * @default []
   */
  gateways?: string[]

  /**
   * The agents of this node are reachable only through gateways: their cards
   * carry no addresses
   *
   * @default false
   */
  private?: boolean

  /**
   * Peers (gateways' inner nodes) allowed to ask this node for export cards
   *
   * @default []
   */
  trustedGateways?: string[]

  /**
   * Scoring of discovery results
   *
   * @default defaultRanker()
   */
  ranker?: Ranker

  /**
   * Card fetches a lookup runs at once
   *
   * @default 8
   */
  fetchConcurrency?: number

  /**
   * Times one lookup asks one provider for its cards, 1-10: a fetch that
   * broke before an answer (timed out, stream reset) or whose dial timed
   * out is tried again after a short pause (100 ms, doubling), within the
   * lookup's timeout; a refusal, a malformed answer or a refused dial is not
   * (spec `interconnect.md` 7)
   *
   * @default 3
   */
  fetchAttempts?: number

  /**
   * Timeout of one card fetch or delivery hop, in ms
   *
   * @default 5_000
   */
  requestTimeout?: number

  /**
   * Clock skew allowed when checking card validity, in ms: a card issued
   * later than now plus this, or expired earlier than now minus this, is
   * refused (`CARD_EXPIRED`)
   *
   * @default 60_000
   */
  clockSkew?: number

  /**
   * Most capabilities whose lookup results are cached at once; the least
   * recently used are dropped first
   *
   * @default 256
   */
  maxCachedLookups?: number

  /**
   * Most agent ids whose resolved route is cached at once; the least
   * recently used are dropped first
   *
   * @default 1_024
   */
  maxCachedRoutes?: number

  /**
   * Most bytes of cards (their signing bytes) held by the lookup cache, and
   * separately by the route cache
   *
   * @default 8_388_608
   */
  maxCacheBytes?: number

  /**
   * Most results one lookup keeps for the cache (the best scored are kept)
   *
   * @default 256
   */
  maxResultsPerLookup?: number

  /**
   * Most cards a lookup takes from one serving peer (the `limit` of its
   * `list` request; cards beyond it are ignored)
   *
   * @default 64
   */
  maxCardsPerProvider?: number

  /**
   * Most agents whose record (answered and failed calls, smoothed round
   * trip) is kept for ranking; the least recently seen are forgotten first
   *
   * @default 4_096
   */
  maxHistory?: number

  /**
   * Announce this node's capabilities over pubsub and merge the announcements
   * of other nodes into lookups (spec section 12): the domain topic
   * `/ioa/caps/1/<domain>` of the node's gossipsub service. `false` turns it
   * off (the DHT alone, as before); without a pubsub service it is off.
   *
   * @default {} (on when the node has a pubsub service)
   */
  gossip?: false | GossipInit

  /**
   * Prefix of the log components (`<logPrefix>:directory`, `:announce`,
   * `:lookup`, `:route`, `:cards`)
   *
   * @default 'ioa:interconnect'
   */
  logPrefix?: string
}

/** A message delivered to an agent's inbox */
export interface InboundMessage {
  /** The addressed agent */
  to: Did
  /** The sending agent, when it identified itself with a card that verified */
  from?: Did
  /** The sending agent's verified card */
  fromCard?: AgentCard
  /** The capability the sender invokes, if it named one */
  skill?: string
  body: unknown
  /** The libp2p peer the message came from (authenticated by the connection) */
  peer: string
  signal: AbortSignal
}

export type InboxHandler = (message: InboundMessage) => unknown

export interface HostAgentInit {
  /** Name of the agent's key in the key store; the same name gives the same id after a restart */
  key: string
  name: string
  description?: string
  /** @default the interconnect's domain */
  domain?: string
  version?: string
  skills: SkillInit[]
  availability?: Availability
  /** Receives messages routed to this agent */
  inbox?: InboxHandler
}

export interface HostedAgent {
  readonly did: Did
  readonly identity: Identity
  /** The current signed card */
  readonly card: SignedCard
}

export interface DiscoveredAgent {
  card: AgentCard
  signed: SignedCard
  /** Skills that matched the query */
  skills: Skill[]
  /** The peer that served the card (the host, or a gateway) */
  peer: string
  /** Round-trip time of the card fetch, in ms */
  latency?: number
  alive: boolean
  local: boolean
  /** Where this result came from (`gossip`: its peer announced the capability over gossip, or a peer's index named it, spec 12.6) */
  source: 'local' | 'cache' | 'dht' | 'gossip'
  /** What this node has seen of the agent, when anything */
  history?: AgentHistory
  score: number
}

export interface DiscoverOptions extends AbortOptions {
  /**
   * Stop after this many results. For `discoverAll`: return at most this
   * many, best first; a lookup that holds this many once the gossip
   * channel's candidates are fetched (the index, or a newcomer's index
   * query, spec section 12.6) ends there without waiting for the DHT walk
   */
  limit?: number
  /** Give up the lookup after this long, in ms (results so far are kept) @default 10_000 */
  timeout?: number
  /** Use cached results when fresh @default true */
  cache?: boolean
  /** Walk the capability's DHT record (`false`: gossip announcers only; the results are not cached) @default true */
  dht?: boolean
  /** Fetch from the capability's gossip announcers (`false`: DHT only; the results are not cached) @default true */
  gossip?: boolean
  /**
   * `discoverAll` only: look up again (without the cache, pausing 100 ms,
   * then twice as long each time up to 2 s) until at least `atLeast` agents
   * are found or `timeout` ms have passed, then return what was found (no
   * polling loop in the caller)
   *
   * @default undefined (one lookup)
   */
  wait?: DiscoverWait
}

/** How long `discoverAll` waits for enough agents (`DiscoverOptions.wait`) */
export interface DiscoverWait {
  /** Agents to wait for (1-1,000) */
  atLeast: number
  /** Longest wait, in ms (1-600,000) */
  timeout: number
}

export interface SendOptions extends AbortOptions {
  /** A hosted agent sending the message; its signed card goes with it */
  from?: Did
  /** The capability being invoked (gateways check it against their export policy) */
  skill?: string
  /** Per-hop timeout in ms @default the interconnect's requestTimeout */
  timeout?: number
}

export interface CardQuery {
  prefix?: string
  agents?: Did[]
  limit?: number
}

/** Supplies extra cards to serve (a gateway serves its domain's exported cards) */
export type CardSource = (query: CardQuery, caller: string) => SignedCard[] | Promise<SignedCard[]>

/**
 * Handles a message for an agent not hosted here (a gateway forwards it).
 * Return `undefined` to decline.
 */
export type Forwarder = (message: Omit<InboundMessage, 'signal'> & { card?: SignedCard }, context: RequestContext) => Promise<{ body: unknown } | undefined>

/**
 * The interconnect service, as made from narrow components
 * (`interconnectFromComponents`)
 */
export interface InterconnectService {
  readonly peerId: PeerId
  readonly domain: string
  /** Host an agent: load or create its key, sign its card, publish its capabilities */
  host(init: HostAgentInit, options?: AbortOptions): Promise<HostedAgent>
  /** Stop hosting an agent */
  unhost(did: Did): Promise<void>
  /** Agents hosted here */
  agents(): HostedAgent[]
  /** Find agents by capability: results stream as they are verified */
  discover(query: DiscoveryQuery, options?: DiscoverOptions): AsyncGenerator<DiscoveredAgent, void, undefined>
  /** Find agents by capability and return them best first */
  discoverAll(query: DiscoveryQuery, options?: DiscoverOptions): Promise<DiscoveredAgent[]>
  /** Find an agent's verified card and the peers that serve it */
  resolve(did: Did, options?: DiscoverOptions): Promise<{ signed: SignedCard, peers: string[] }>
  /** Fetch and verify cards from one peer */
  fetchCards(peer: PeerId | string, query: CardQuery, options?: AbortOptions & { timeout?: number }): Promise<SignedCard[]>
  /** Deliver a message to an agent's inbox, wherever it is hosted, and return its answer */
  send<T = unknown>(to: Did, body: unknown, options?: SendOptions): Promise<T>
  /** Is the agent's peer reachable now? Measures the round trip with ping */
  ping(peer: PeerId | string, options?: AbortOptions): Promise<number>
  /** Announce this peer as a provider of a capability (reference-counted) */
  announce(capability: string): Promise<void>
  /**
   * Resolve once every pending DHT announcement has been attempted (the
   * background queue is empty); failed ones are still retried later
   */
  announced(options?: AbortOptions): Promise<void>
  /** Withdraw one announcement of a capability */
  withdraw(capability: string): Promise<void>
  /** Announce this peer as a provider of an agent id, so `resolve` finds it (gateways; reference-counted) */
  announceAgent(did: Did): Promise<void>
  /** Withdraw one announcement of an agent id */
  withdrawAgent(did: Did): Promise<void>
  /**
   * Report how a call to an agent went (the layers above report finished
   * tasks); `send` reports its own deliveries. The default ranker prefers
   * agents with a good record.
   */
  observe(did: Did, outcome: Outcome): void
  /** What this node has seen of an agent */
  historyOf(did: Did): AgentHistory | undefined
  /** How full the bounded caches are */
  cacheStats(): InterconnectCacheStats
  /** The gossip index of capability announcements, when gossip is on (spec section 12) */
  readonly gossip?: GossipView
  /** Serve extra cards (gateways) */
  addCardSource(source: CardSource): void
  /** Take messages for agents not hosted here (gateways) */
  setForwarder(forwarder: Forwarder | undefined): void
  start(): Promise<void>
  stop(): Promise<void>
}

/** The interconnect service on a transport node (`createInterconnect`) */
export interface Interconnect extends InterconnectService {
  /** The transport node it runs on */
  readonly node: TransportNode
}
