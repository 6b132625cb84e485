/**
 * The interconnect service: hosts agents on a transport node, publishes their
 * capabilities in the DHT, serves their signed cards, discovers other agents
 * and routes messages to an agent id.
 */
import { MemoryDatastore } from 'datastore-core'
import { AsyncQueue } from '@ioa/transport'
import { peerIdFromString } from '@libp2p/peer-id'
import { agentCid, assertCapability, capabilityCid, capabilityPrefixes } from './capability.js'
import { InterconnectCaches } from './caches.js'
import { CARD_LIMITS, encodeSignedCard, parseCard, signCard, verifyCard } from './card.js'
import {
  AgentNotHereError, BadRequestError, DuplicateAgentError, ForbiddenError, InterconnectError, NoInboxError,
  NotExportedError, PeerUnreachableError, UnknownAgentError, fromRemote
} from './errors.js'
import { HistoryBook } from './history.js'
import { KeyStore, isDid } from './identity.js'
import { defaultRanker, matchQuery } from './ranking.js'
import type { InterconnectCacheStats } from './caches.js'
import type { AgentCard, Availability, SignedCard, Skill, SkillInit } from './card.js'
import type { AgentHistory, Outcome } from './history.js'
import type { AgentKeyStore, Did, Identity } from './identity.js'
import type { DiscoveryQuery, Ranker } from './ranking.js'
import type { RequestContext, TransportNode } from '@ioa/transport'
import type { AbortOptions, Logger, PeerId } from '@libp2p/interface'
import type { Datastore } from 'interface-datastore'
import type { CID } from 'multiformats/cid'

/** Card protocol: fetch signed cards from a peer */
export const CARD_PROTOCOL = '/ioa/card/1.0.0'
/** Routing protocol: deliver a message to an agent's inbox */
export const ROUTE_PROTOCOL = '/ioa/route/1.0.0'

/** Most bytes of cards one `list` answer carries (below the 1 MiB frame limit) */
export const LIST_BYTE_BUDGET = 786_432

/** Most cards one `list` answer carries */
export const MAX_CARDS_PER_LIST = 256

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
  /** Where this result came from */
  source: 'local' | 'cache' | 'dht'
  /** What this node has seen of the agent, when anything */
  history?: AgentHistory
  score: number
}

export interface DiscoverOptions extends AbortOptions {
  /** Stop after this many results */
  limit?: number
  /** Give up the lookup after this long, in ms (results so far are kept) @default 10_000 */
  timeout?: number
  /** Use cached results when fresh @default true */
  cache?: boolean
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

export interface Interconnect {
  readonly node: TransportNode
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
  /** Serve extra cards (gateways) */
  addCardSource(source: CardSource): void
  /** Take messages for agents not hosted here (gateways) */
  setForwarder(forwarder: Forwarder | undefined): void
  start(): Promise<void>
  stop(): Promise<void>
}

interface Hosted extends HostedAgent {
  card: SignedCard
  init: HostAgentInit
  cids: string[]
}

interface Defaults {
  domain: string
  cardTtl: number
  cacheTtl: number
  publish: boolean
  announceAgentIds: boolean
  announceConcurrency: number
  fetchConcurrency: number
  requestTimeout: number
  clockSkew: number
  maxCachedLookups: number
  maxCachedRoutes: number
  maxCacheBytes: number
  maxResultsPerLookup: number
  maxCardsPerProvider: number
  maxHistory: number
}

/** Errors of a delivery that count against the agent's record */
const FAILURE_CODES = new Set(['TIMEOUT', 'HANDLER_ERROR'])


class DefaultInterconnect implements Interconnect {
  readonly node: TransportNode
  readonly opts: Defaults
  private readonly keys: AgentKeyStore
  private readonly hosted = new Map<Did, Hosted>()
  private readonly hostedByKey = new Map<string, Did>()
  private readonly reserved = new Set<string>()
  private readonly provided = new Map<string, { cid: CID, refs: number }>()
  private readonly announceQueue: Array<{ key: string, cid: CID, attempt: number }> = []
  private announcing = 0
  private retrying = 0
  private announceWaiters: Array<() => void> = []
  private readonly caches: InterconnectCaches
  private readonly discoveryCache: InterconnectCaches['lookups']
  private readonly routeCache: InterconnectCaches['routes']
  private readonly history: HistoryBook
  private readonly log: Logger
  private readonly cardSources: CardSource[] = []
  private readonly ranker: Ranker
  private readonly gateways: string[]
  private readonly private: boolean
  private readonly trustedGateways: Set<string>
  private forwarder?: Forwarder
  private refreshTimer?: ReturnType<typeof setInterval>
  private started = false
  private readonly onAddressChange = (): void => {
    void this.resignAll()
  }

  constructor (node: TransportNode, init: InterconnectInit = {}) {
    this.node = node
    this.keys = init.keys ?? new KeyStore(init.datastore ?? new MemoryDatastore())
    this.opts = {
      domain: init.domain ?? 'local',
      cardTtl: init.cardTtl ?? 3_600_000,
      cacheTtl: init.cacheTtl ?? 30_000,
      publish: init.publish ?? true,
      announceAgentIds: init.announceAgentIds ?? true,
      announceConcurrency: init.announceConcurrency ?? 8,
      fetchConcurrency: init.fetchConcurrency ?? 8,
      requestTimeout: init.requestTimeout ?? 5_000,
      clockSkew: init.clockSkew ?? 60_000,
      maxCachedLookups: init.maxCachedLookups ?? 256,
      maxCachedRoutes: init.maxCachedRoutes ?? 1_024,
      maxCacheBytes: init.maxCacheBytes ?? 8_388_608,
      maxResultsPerLookup: init.maxResultsPerLookup ?? 256,
      maxCardsPerProvider: init.maxCardsPerProvider ?? 64,
      maxHistory: init.maxHistory ?? 4_096
    }
    for (const key of ['cardTtl', 'cacheTtl', 'fetchConcurrency', 'announceConcurrency', 'requestTimeout', 'clockSkew'] as const) {
      const v = this.opts[key]
      if (!Number.isFinite(v) || v < 0 || (key !== 'cacheTtl' && key !== 'clockSkew' && v === 0)) {
        throw new BadRequestError(`Invalid interconnect option ${key}=${v}`)
      }
    }
    for (const key of ['maxCachedLookups', 'maxCachedRoutes', 'maxCacheBytes', 'maxResultsPerLookup', 'maxHistory'] as const) {
      const v = this.opts[key]
      if (!Number.isInteger(v) || v < 1) throw new BadRequestError(`Invalid interconnect option ${key}=${v}`)
    }
    const perProvider = this.opts.maxCardsPerProvider
    if (!Number.isInteger(perProvider) || perProvider < 1 || perProvider > MAX_CARDS_PER_LIST) {
      throw new BadRequestError(`Invalid interconnect option maxCardsPerProvider=${perProvider} (1-${MAX_CARDS_PER_LIST})`)
    }
    this.log = node.logger.forComponent('ioa:interconnect')
    this.caches = new InterconnectCaches(this.opts)
    this.discoveryCache = this.caches.lookups
    this.routeCache = this.caches.routes
    this.history = new HistoryBook(this.opts.maxHistory)
    this.ranker = init.ranker ?? defaultRanker()
    this.gateways = init.gateways ?? []
    this.private = init.private ?? false
    this.trustedGateways = new Set(init.trustedGateways ?? [])
  }

  get peerId (): PeerId {
    return this.node.peerId
  }

  get domain (): string {
    return this.opts.domain
  }

  async start (): Promise<void> {
    if (this.started) return
    this.started = true
    const m = this.node.services.messaging
    await m.handle(CARD_PROTOCOL, 'list', async (payload, ctx) => this.handleList(payload, ctx))
    await m.handle(CARD_PROTOCOL, 'export', async (payload, ctx) => this.handleExport(payload, ctx))
    await m.handle(ROUTE_PROTOCOL, 'deliver', async (payload, ctx) => this.handleDeliver(payload, ctx))
    this.node.addEventListener('self:peer:update', this.onAddressChange)
    this.refreshTimer = setInterval(() => { void this.resignAll() }, Math.max(1_000, this.opts.cardTtl / 2))
    this.refreshTimer.unref?.()
  }

  async stop (): Promise<void> {
    if (!this.started) return
    this.started = false
    clearInterval(this.refreshTimer)
    this.node.removeEventListener('self:peer:update', this.onAddressChange)
    const m = this.node.services.messaging
    await m.unhandle(CARD_PROTOCOL)
    await m.unhandle(ROUTE_PROTOCOL)
    this.announceQueue.length = 0
    this.retrying = 0
    for (const wake of this.announceWaiters.splice(0)) wake()
    this.caches.clear()
  }

  // ---- hosting ---------------------------------------------------------

  private async makeCard (identity: Identity, init: HostAgentInit, skills?: SkillInit[], gateways?: string[], hidden = false): Promise<SignedCard> {
    const now = Date.now()
    const gw = gateways ?? this.gateways
    const card = {
      v: 1 as const,
      id: identity.did,
      name: init.name,
      description: init.description ?? '',
      domain: init.domain ?? this.opts.domain,
      version: init.version ?? '1.0.0',
      skills: skills ?? init.skills,
      peer: this.node.peerId.toString(),
      addrs: this.private || hidden ? [] : this.node.getMultiaddrs().slice(0, CARD_LIMITS.maxAddrs).map(a => a.toString()),
      ...(gw.length > 0 ? { gateways: gw } : {}),
      availability: init.availability ?? { mode: 'always' as const },
      issuedAt: now,
      expiresAt: now + this.opts.cardTtl
    }
    return signCard(card, identity)
  }

  async host (init: HostAgentInit, options?: AbortOptions): Promise<HostedAgent> {
    if (this.hostedByKey.has(init.key) || this.reserved.has(init.key)) {
      throw new DuplicateAgentError(`An agent with key "${init.key}" is already hosted`)
    }
    // validate before touching the key store
    for (const s of init.skills ?? []) assertCapability(s.id)
    this.reserved.add(init.key)
    let identity: Identity & { privateKey: unknown }
    let card: SignedCard
    try {
      identity = await this.keys.loadOrCreate(init.key, options)
      if (this.hosted.has(identity.did)) {
        throw new DuplicateAgentError(`Agent ${identity.did} is already hosted`)
      }
      card = await this.makeCard(identity, init)
    } finally {
      this.reserved.delete(init.key)
    }
    const cids: string[] = []
    const names = new Set<string>()
    for (const s of card.card.skills) {
      for (const p of capabilityPrefixes(s.id)) names.add(p)
    }
    const agent: Hosted = { did: identity.did, identity, card, init, cids }
    this.hosted.set(identity.did, agent)
    this.hostedByKey.set(init.key, identity.did)
    this.discoveryCache.clear()

    if (this.opts.publish) {
      for (const name of names) {
        cids.push(`cap:${name}`)
        await this.announce(name)
      }
      if (this.opts.announceAgentIds) {
        cids.push(`agent:${identity.did}`)
        await this.provideKey(`agent:${identity.did}`, await agentCid(identity.did))
      }
    }
    return agent
  }

  async unhost (did: Did): Promise<void> {
    const agent = this.hosted.get(did)
    if (agent == null) {
      throw new UnknownAgentError(`Agent ${did} is not hosted here`)
    }
    this.hosted.delete(did)
    this.hostedByKey.delete(agent.init.key)
    this.discoveryCache.clear()
    for (const key of agent.cids) {
      await this.unprovideKey(key)
    }
  }

  agents (): HostedAgent[] {
    return [...this.hosted.values()]
  }

  private async resignAll (): Promise<void> {
    for (const agent of this.hosted.values()) {
      try {
        agent.card = await this.makeCard(agent.identity, agent.init)
      } catch {
        // keep the previous card; the next refresh tries again
      }
    }
  }

  // ---- DHT announcements ------------------------------------------------

  async announce (capability: string): Promise<void> {
    await this.provideKey(`cap:${capability}`, await capabilityCid(capability))
  }

  async withdraw (capability: string): Promise<void> {
    await this.unprovideKey(`cap:${capability}`)
  }

  async announceAgent (did: Did): Promise<void> {
    if (!isDid(did)) throw new UnknownAgentError(`Not an agent id: ${String(did).slice(0, 80)}`)
    await this.provideKey(`agent:${did}`, await agentCid(did))
  }

  async withdrawAgent (did: Did): Promise<void> {
    await this.unprovideKey(`agent:${did}`)
  }

  private async provideKey (key: string, cid: CID): Promise<void> {
    const entry = this.provided.get(key)
    if (entry != null) {
      entry.refs++
      return
    }
    this.provided.set(key, { cid, refs: 1 })
    this.announceQueue.push({ key, cid, attempt: 0 })
    this.pumpAnnouncements()
  }

  /**
   * Announcing walks the DHT, so a node hosting thousands of agents announces
   * through a small pool of workers; a failed announcement (for example while
   * the routing table is still empty) is retried later with backoff
   */
  private pumpAnnouncements (): void {
    while (this.announcing < this.opts.announceConcurrency && this.announceQueue.length > 0) {
      const job = this.announceQueue.shift()!
      if (this.provided.get(job.key)?.cid !== job.cid) {
        this.wakeAnnounceWaiters()
        continue
      }
      this.announcing++
      void this.node.contentRouting.provide(job.cid, { signal: AbortSignal.timeout(30_000) })
        .then(() => true, () => false)
        .then((ok) => {
          this.announcing--
          if (!ok && job.attempt < 20 && this.started && this.provided.get(job.key)?.cid === job.cid) {
            this.retrying++
            const retry = setTimeout(() => {
              if (!this.started) return
              this.retrying--
              this.announceQueue.push({ ...job, attempt: job.attempt + 1 })
              this.pumpAnnouncements()
            }, Math.min(10_000, 250 * 2 ** job.attempt))
            retry.unref?.()
          }
          if (this.started) this.pumpAnnouncements()
          this.wakeAnnounceWaiters()
        })
    }
  }

  async announced (options: AbortOptions = {}): Promise<void> {
    while (this.announceQueue.length > 0 || this.announcing > 0 || this.retrying > 0) {
      options.signal?.throwIfAborted()
      await new Promise<void>((resolve, reject) => {
        const onAbort = (): void => { reject(options.signal?.reason) }
        options.signal?.addEventListener('abort', onAbort, { once: true })
        this.announceWaiters.push(() => {
          options.signal?.removeEventListener('abort', onAbort)
          resolve()
        })
      })
    }
  }

  private wakeAnnounceWaiters (): void {
    if (this.announcing === 0 && this.announceQueue.length === 0 && this.retrying === 0) {
      for (const wake of this.announceWaiters.splice(0)) wake()
    }
  }

  private async unprovideKey (key: string): Promise<void> {
    const entry = this.provided.get(key)
    if (entry == null) return
    entry.refs--
    if (entry.refs > 0) return
    this.provided.delete(key)
    try {
      await this.node.services.dht.cancelReprovide(entry.cid)
    } catch {
      // nothing to cancel
    }
  }

  // ---- card protocol ----------------------------------------------------

  private async handleList (payload: unknown, ctx: RequestContext): Promise<{ cards: SignedCard[] }> {
    const query = parseCardQuery(payload)
    const limit = Math.min(query.limit ?? 64, MAX_CARDS_PER_LIST)
    const out: SignedCard[] = []
    const wanted = query.agents != null ? new Set(query.agents) : undefined
    let bytes = 0
    // stop before the answer outgrows one frame
    const add = (c: SignedCard): boolean => {
      const size = encodeSignedCard(c).byteLength
      if (out.length >= limit || bytes + size > LIST_BYTE_BUDGET) return false
      bytes += size
      out.push(c)
      return true
    }
    for (const agent of this.hosted.values()) {
      if (wanted != null && !wanted.has(agent.did)) continue
      if (query.prefix != null && !agent.card.card.skills.some(s => s.id === query.prefix || s.id.startsWith(query.prefix + '.'))) continue
      if (!add(agent.card)) return { cards: out }
    }
    for (const source of this.cardSources) {
      for (const c of await source(query, ctx.peer.toString())) {
        if (!add(c)) return { cards: out }
      }
    }
    return { cards: out }
  }

  private async handleExport (payload: unknown, ctx: RequestContext): Promise<{ card: SignedCard }> {
    if (!this.trustedGateways.has(ctx.peer.toString())) {
      throw new ForbiddenError('Only this domain\'s gateways may request export cards')
    }
    if (payload == null || typeof payload !== 'object' || Array.isArray(payload)) throw new BadRequestError('export needs { agent, skills, gateways }')
    const { agent: did, skills, gateways, ...rest } = payload as Record<string, unknown>
    if (Object.keys(rest).length > 0) throw new BadRequestError(`Unknown fields: ${Object.keys(rest).join(', ')}`)
    if (typeof did !== 'string' || !Array.isArray(skills) || !Array.isArray(gateways) ||
      skills.length > CARD_LIMITS.maxSkills || gateways.length === 0 || gateways.length > CARD_LIMITS.maxGateways ||
      !skills.every(s => typeof s === 'string') || !gateways.every(isCanonicalPeerId)) {
      throw new BadRequestError(`export needs { agent, skills: string[], gateways: 1-${CARD_LIMITS.maxGateways} peer ids }`)
    }
    const agent = this.hosted.get(did)
    if (agent == null) throw new AgentNotHereError(`Agent ${did} is not hosted here`)
    const chosen = agent.init.skills.filter(s => skills.includes(s.id))
    if (chosen.length === 0) throw new NotExportedError('None of the requested skills belong to the agent')
    return { card: await this.makeCard(agent.identity, agent.init, chosen, gateways as string[], true) }
  }

  addCardSource (source: CardSource): void {
    this.cardSources.push(source)
  }

  setForwarder (forwarder: Forwarder | undefined): void {
    this.forwarder = forwarder
  }

  async fetchCards (peer: PeerId | string, query: CardQuery, options: AbortOptions & { timeout?: number } = {}): Promise<SignedCard[]> {
    const peerId = typeof peer === 'string' ? peerIdFromString(peer) : peer
    const answer = await this.node.services.messaging.request<{ cards?: unknown }>(peerId, CARD_PROTOCOL, 'list', query, {
      signal: options.signal,
      timeout: options.timeout ?? this.opts.requestTimeout
    }).catch((err: unknown) => { throw fromRemote(err) })
    if (answer == null || typeof answer !== 'object' || !Array.isArray(answer.cards) || answer.cards.length > MAX_CARDS_PER_LIST) {
      throw new BadRequestError(`Peer ${peerId.toString()} sent a malformed card list`)
    }
    const out: SignedCard[] = []
    // a peer that sends more than was asked for gets only what was asked for verified
    const max = Math.min(query.limit ?? MAX_CARDS_PER_LIST, MAX_CARDS_PER_LIST)
    if (answer.cards.length > max) {
      this.log('peer %p sent %d cards, %d asked for: the rest are ignored', peerId, answer.cards.length, max)
    }
    for (const raw of answer.cards.slice(0, max)) {
      try {
        out.push(await verifyCard(raw, { servedBy: peerId.toString(), clockSkew: this.opts.clockSkew }))
      } catch (err: any) {
        // a card that does not verify is dropped, never returned
        this.log('dropped a card from %p: %s %s', peerId, err?.code ?? err?.name, err?.message)
      }
    }
    return out
  }

  observe (did: Did, outcome: Outcome): void {
    if (!isDid(did) || this.hosted.has(did)) return
    this.history.record(did, outcome)
  }

  historyOf (did: Did): AgentHistory | undefined {
    return this.history.get(did)
  }

  cacheStats (): InterconnectCacheStats {
    return this.caches.stats(this.history.size)
  }

  // ---- discovery --------------------------------------------------------

  private rank (c: Omit<DiscoveredAgent, 'score' | 'history'>, query: DiscoveryQuery, now: number): DiscoveredAgent {
    const history = c.local ? undefined : this.history.get(c.card.id)
    const candidate = history != null ? { ...c, history } : c
    return { ...candidate, score: this.ranker.score(candidate, query, now) }
  }

  async * discover (query: DiscoveryQuery, options: DiscoverOptions = {}): AsyncGenerator<DiscoveredAgent, void, undefined> {
    assertCapability(query.capability)
    const limit = options.limit ?? Infinity
    const seen = new Set<string>()
    let count = 0
    const now = Date.now()

    for (const agent of this.hosted.values()) {
      const skills = matchQuery(agent.card.card, query)
      if (skills.length === 0) continue
      seen.add(agent.did)
      yield this.rank({ card: agent.card.card, signed: agent.card, skills, peer: this.node.peerId.toString(), alive: true, local: true, source: 'local', latency: 0 }, query, now)
      if (++count >= limit) return
    }

    const cacheKey = query.capability
    let cached = this.discoveryCache.get(cacheKey)
    if (cached != null && now - cached.at >= this.opts.cacheTtl) {
      this.discoveryCache.delete(cacheKey)
      cached = undefined
    }
    if (options.cache !== false && cached != null && now - cached.at < this.opts.cacheTtl) {
      for (const r of cached.results) {
        if (seen.has(r.card.id) || r.card.expiresAt < now) continue
        const skills = matchQuery(r.card, query)
        if (skills.length === 0) continue
        seen.add(r.card.id)
        const { history: _, score: __, ...rest } = r
        yield this.rank({ ...rest, skills, source: 'cache' }, query, now)
        if (++count >= limit) return
      }
      return
    }

    const controller = new AbortController()
    const timeout = setTimeout(() => { controller.abort() }, options.timeout ?? 10_000)
    const onAbort = (): void => { controller.abort() }
    options.signal?.addEventListener('abort', onAbort, { once: true })
    const signal = controller.signal

    const out = new AsyncQueue<DiscoveredAgent>()
    const collected: DiscoveredAgent[] = []
    const self = this.node.peerId.toString()

    const walk = (async () => {
      const cid = await capabilityCid(query.capability)
      const tasks = new Set<Promise<void>>()
      const fetched = new Set<string>()
      try {
        for await (const provider of this.node.contentRouting.findProviders(cid, { signal })) {
          const id = provider.id.toString()
          if (id === self || fetched.has(id)) continue
          fetched.add(id)
          if (provider.multiaddrs.length > 0) {
            await this.node.peerStore.merge(provider.id, { multiaddrs: provider.multiaddrs }).catch(() => {})
          }
          while (tasks.size >= this.opts.fetchConcurrency) {
            await Promise.race(tasks)
          }
          const task = (async () => {
            const started = performance.now()
            try {
              const cards = await this.fetchCards(provider.id, { prefix: query.capability, limit: this.opts.maxCardsPerProvider }, { signal })
              const latency = performance.now() - started
              const at = Date.now()
              for (const signed of cards) {
                const all = matchQuery(signed.card, { capability: query.capability })
                if (all.length === 0) continue
                const result = this.rank({ card: signed.card, signed, skills: all, peer: id, latency, alive: true, local: false, source: 'dht' }, { capability: query.capability }, at)
                this.caches.collect(collected, result)
                const skills = matchQuery(signed.card, query)
                if (skills.length > 0) out.push(this.rank({ ...result, skills }, query, at))
              }
            } catch (err: any) {
              // unreachable or misbehaving provider: skip it
              this.log('lookup of %s skips provider %s: %s', query.capability, id, err?.message ?? err)
            }
          })()
          tasks.add(task)
          void task.finally(() => tasks.delete(task))
        }
      } catch {
        // the walk was aborted or ran out of peers: keep what was found
      }
      await Promise.all(tasks)
    })()
    void walk.finally(() => { out.close() })

    let complete = false
    try {
      for await (const r of out) {
        if (seen.has(r.card.id)) continue
        seen.add(r.card.id)
        yield r
        if (++count >= limit) return
      }
      complete = !signal.aborted || options.signal?.aborted !== true
    } finally {
      clearTimeout(timeout)
      options.signal?.removeEventListener('abort', onAbort)
      controller.abort()
      if (complete && collected.length > 0) {
        this.caches.trim(collected)
        if (!this.discoveryCache.set(cacheKey, { at: Date.now(), results: collected })) {
          this.log('results of the lookup of %s are larger than the cache (%d bytes): not cached', cacheKey, this.opts.maxCacheBytes)
        }
      }
    }
  }

  async discoverAll (query: DiscoveryQuery, options: DiscoverOptions = {}): Promise<DiscoveredAgent[]> {
    const results: DiscoveredAgent[] = []
    for await (const r of this.discover(query, { ...options, limit: undefined })) {
      results.push(r)
    }
    results.sort((a, b) => b.score - a.score)
    return options.limit != null ? results.slice(0, options.limit) : results
  }

  // ---- routing ----------------------------------------------------------

  async resolve (did: Did, options: DiscoverOptions = {}): Promise<{ signed: SignedCard, peers: string[] }> {
    if (!isDid(did)) throw new UnknownAgentError(`Not an agent id: ${String(did).slice(0, 80)}`)
    const local = this.hosted.get(did)
    if (local != null) return { signed: local.card, peers: [this.node.peerId.toString()] }
    const cached = this.routeCache.get(did)
    if (options.cache !== false && cached != null && Date.now() - cached.at < this.opts.cacheTtl && cached.signed.card.expiresAt > Date.now()) {
      return { signed: cached.signed, peers: cached.peers }
    }

    const signal = options.signal != null
      ? AbortSignal.any([options.signal, AbortSignal.timeout(options.timeout ?? 10_000)])
      : AbortSignal.timeout(options.timeout ?? 10_000)
    const cid = await agentCid(did)
    let best: SignedCard | undefined
    const peers: string[] = []
    try {
      for await (const provider of this.node.contentRouting.findProviders(cid, { signal })) {
        const id = provider.id.toString()
        if (id === this.node.peerId.toString() || peers.includes(id)) continue
        if (provider.multiaddrs.length > 0) {
          await this.node.peerStore.merge(provider.id, { multiaddrs: provider.multiaddrs }).catch(() => {})
        }
        try {
          const cards = await this.fetchCards(provider.id, { agents: [did], limit: 1 }, { signal })
          const card = cards.find(c => c.card.id === did)
          if (card == null) continue
          peers.push(id)
          if (best == null || card.card.issuedAt > best.card.issuedAt) best = card
          // the host itself answered: no need to look further
          if (card.card.peer === id) break
        } catch {
          // try the next provider
        }
      }
    } catch {
      // lookup ended (timeout or no more peers)
    }
    if (best == null) {
      throw new UnknownAgentError(`No peer serves a valid card for ${did}`)
    }
    // the hosting peer first, then gateways
    peers.sort((a, b) => (a === best.card.peer ? -1 : 0) - (b === best.card.peer ? -1 : 0))
    this.routeCache.set(did, { at: Date.now(), signed: best, peers })
    return { signed: best, peers }
  }

  async send<T = unknown> (to: Did, body: unknown, options: SendOptions = {}): Promise<T> {
    let fromCard: SignedCard | undefined
    if (options.from != null) {
      const sender = this.hosted.get(options.from)
      if (sender == null) throw new UnknownAgentError(`Sender ${options.from} is not hosted here`)
      fromCard = sender.card
    }
    if (options.skill != null) assertCapability(options.skill)

    const local = this.hosted.get(to)
    if (local != null) {
      const inbox = local.init.inbox
      if (inbox == null) throw new NoInboxError(`Agent ${to} has no inbox`)
      return await inbox({
        to,
        from: options.from,
        fromCard: fromCard?.card,
        skill: options.skill,
        body,
        peer: this.node.peerId.toString(),
        signal: options.signal ?? new AbortController().signal
      }) as T
    }

    const payload: Record<string, unknown> = { to, body: body ?? null }
    if (options.from != null) payload.from = options.from
    if (fromCard != null) payload.card = fromCard
    if (options.skill != null) payload.skill = options.skill

    let lastError: Error | undefined
    for (let round = 0; round < 2; round++) {
      const route = await this.resolve(to, { signal: options.signal, cache: round === 0 })
      for (const peer of route.peers) {
        const started = performance.now()
        try {
          const answer = await this.node.services.messaging.request<{ body: unknown }>(peerIdFromString(peer), ROUTE_PROTOCOL, 'deliver', payload, {
            signal: options.signal,
            timeout: options.timeout ?? this.opts.requestTimeout
          })
          this.history.record(to, { ok: true, rtt: performance.now() - started })
          return (answer as { body: T }).body
        } catch (e: any) {
          const err = fromRemote(e) as any
          lastError = err
          if (err?.code === AgentNotHereError.code) {
            this.routeCache.delete(to)
            break
          }
          if (['DIAL_FAILED', 'STREAM_CLOSED', 'PROTOCOL_NOT_SUPPORTED'].includes(err?.code)) {
            continue
          }
          // the agent did not answer in time, or its handler failed: a bad
          // mark for ranking (a call the caller aborted is not the agent's fault)
          if (options.signal?.aborted !== true && FAILURE_CODES.has(err?.code)) {
            this.history.record(to, { ok: false })
          }
          throw err
        }
      }
      this.routeCache.delete(to)
    }
    if ((lastError as InterconnectError | undefined)?.code === AgentNotHereError.code) {
      throw lastError
    }
    if (lastError != null) this.history.record(to, { ok: false })
    throw new PeerUnreachableError(`No peer serving ${to} could be reached${lastError != null ? `: ${lastError.message}` : ''}`, { cause: lastError })
  }

  private async handleDeliver (payload: unknown, ctx: RequestContext): Promise<{ body: unknown }> {
    if (payload == null || typeof payload !== 'object' || Array.isArray(payload)) {
      throw new BadRequestError('deliver needs a map')
    }
    const { to, from, skill, body, card, ...rest } = payload as Record<string, unknown>
    if (Object.keys(rest).length > 0) throw new BadRequestError(`Unknown fields: ${Object.keys(rest).join(', ')}`)
    if (!isDid(to)) throw new BadRequestError('deliver.to must be a did:key')
    if (from != null && !isDid(from)) throw new BadRequestError('deliver.from must be a did:key')
    if (skill != null) {
      try { assertCapability(skill) } catch { throw new BadRequestError('deliver.skill is not a capability name') }
    }

    let fromCard: SignedCard | undefined
    if (card != null) {
      // the sender's card must verify and be bound to the peer it came from
      fromCard = await verifyCard(card, { servedBy: ctx.peer.toString(), clockSkew: this.opts.clockSkew })
      if (from !== fromCard.card.id) throw new BadRequestError('deliver.card is not the card of deliver.from')
    }

    const agent = this.hosted.get(to)
    if (agent == null) {
      const forwarded = await this.forwarder?.({
        to,
        from: fromCard != null ? from as string : undefined,
        fromCard: fromCard?.card,
        card: fromCard,
        skill: skill as string | undefined,
        body,
        peer: ctx.peer.toString()
      }, ctx)
      if (forwarded != null) return forwarded
      throw new AgentNotHereError(`Agent ${to} is not hosted on ${this.node.peerId.toString()}`)
    }
    if (agent.init.inbox == null) throw new NoInboxError(`Agent ${to} has no inbox`)
    const result = await agent.init.inbox({
      to,
      from: fromCard != null ? from as string : undefined,
      fromCard: fromCard?.card,
      skill: skill as string | undefined,
      body,
      peer: ctx.peer.toString(),
      signal: ctx.signal
    })
    return { body: result ?? null }
  }

  async ping (peer: PeerId | string, options: AbortOptions = {}): Promise<number> {
    const peerId = typeof peer === 'string' ? peerIdFromString(peer) : peer
    try {
      return await this.node.services.ping.ping(peerId, { signal: options.signal ?? AbortSignal.timeout(this.opts.requestTimeout) })
    } catch (err: any) {
      throw new PeerUnreachableError(`Peer ${peerId.toString()} did not answer ping: ${err?.message ?? err}`, { cause: err })
    }
  }
}

function isCanonicalPeerId (value: unknown): boolean {
  if (typeof value !== 'string') return false
  try {
    return peerIdFromString(value).toString() === value
  } catch {
    return false
  }
}

function parseCardQuery (payload: unknown): CardQuery {
  if (payload == null) return {}
  if (typeof payload !== 'object' || Array.isArray(payload)) throw new BadRequestError('list needs a map')
  const { prefix, agents, limit, ...rest } = payload as Record<string, unknown>
  if (Object.keys(rest).length > 0) throw new BadRequestError(`Unknown fields: ${Object.keys(rest).join(', ')}`)
  const q: CardQuery = {}
  if (prefix != null) {
    try { assertCapability(prefix) } catch { throw new BadRequestError('list.prefix is not a capability name') }
    q.prefix = prefix
  }
  if (agents != null) {
    if (!Array.isArray(agents) || agents.length > MAX_CARDS_PER_LIST || !agents.every(a => typeof a === 'string')) {
      throw new BadRequestError(`list.agents must be at most ${MAX_CARDS_PER_LIST} strings`)
    }
    q.agents = agents
  }
  if (limit != null) {
    if (typeof limit !== 'number' || !Number.isInteger(limit) || limit < 1) throw new BadRequestError('list.limit must be a positive integer')
    q.limit = limit
  }
  return q
}

/**
 * Create the interconnect layer on a transport node and start it
 */
export async function createInterconnect (node: TransportNode, init: InterconnectInit = {}): Promise<Interconnect> {
  // validate the card fields that come from init early
  if (init.domain != null) {
    parseCard({ v: 1, id: 'did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK', name: 'x', domain: init.domain, skills: [{ id: 'x' }], peer: node.peerId.toString(), issuedAt: 0, expiresAt: 1 })
  }
  const ic = new DefaultInterconnect(node, init)
  await ic.start()
  return ic
}

export { InterconnectError }
