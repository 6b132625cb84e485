/**
 * The interconnect service: hosts agents on a node, publishes their
 * capabilities in the DHT, serves their signed cards, discovers other agents
 * and routes messages to an agent id. This file wires the parts together:
 *
 * - `directory.ts`: hosted agents and their cards; `announcer.ts`: the DHT records
 * - `card-protocol.ts`: the card protocol (server and client)
 * - `discovery.ts`: lookups by capability
 * - `routing.ts`: resolving agent ids and delivering messages
 *
 * It runs on narrow components (`InterconnectComponents`);
 * `createInterconnect(node)` slices a transport node.
 */
import { MemoryDatastore } from 'datastore-core'
import { Announcer } from './announcer.js'
import { InterconnectCaches } from './caches.js'
import { CardProtocol } from './card-protocol.js'
import { parseCard } from './card.js'
import { componentsFromNode } from './components.js'
import { Directory } from './directory.js'
import { Discovery } from './discovery.js'
import { GossipChannel } from './gossip/channel.js'
import { HistoryBook } from './history.js'
import { KeyStore, isDid } from './identity.js'
import { resolveOptions } from './options.js'
import { defaultRanker } from './ranking.js'
import { Router } from './routing.js'
import type { InterconnectCacheStats } from './caches.js'
import type { SignedCard } from './card.js'
import type { InterconnectComponents } from './components.js'
import type { GossipView } from './gossip/channel.js'
import type { AgentHistory, Outcome } from './history.js'
import type { Did } from './identity.js'
import type { Defaults } from './options.js'
import type { DiscoveryQuery } from './ranking.js'
import type {
  CardQuery, CardSource, DiscoveredAgent, DiscoverOptions, Forwarder, HostAgentInit, HostedAgent, Interconnect,
  InterconnectInit, InterconnectService, SendOptions
} from './types.js'
import type { TransportNode } from '@ioa/transport'
import type { AbortOptions, Logger, PeerId } from '@libp2p/interface'

// what this file exported before it was split (tests and tools import it)
export { CARD_PROTOCOL, ROUTE_PROTOCOL, LIST_BYTE_BUDGET, MAX_CARDS_PER_LIST } from './protocols.js'
export type * from './types.js'

class DefaultInterconnect implements InterconnectService {
  readonly opts: Defaults
  private readonly components: InterconnectComponents
  private readonly log: Logger
  private readonly announcer: Announcer
  private readonly directory: Directory
  private readonly cards: CardProtocol
  private readonly discovery: Discovery
  private readonly router: Router
  private readonly caches: InterconnectCaches
  private readonly history: HistoryBook
  private readonly gossipChannel?: GossipChannel
  /** Capabilities announced with `announce` (reference counts), also sent over gossip */
  private readonly announcedCaps = new Map<string, number>()
  private refreshTimer?: ReturnType<typeof setInterval>
  private started = false
  private readonly onAddressChange = (): void => {
    this.log('addresses changed: re-signing cards')
    void this.directory.resignAll()
    this.gossipChannel?.changed()
  }

  constructor (components: InterconnectComponents, init: InterconnectInit = {}) {
    this.components = components
    this.opts = resolveOptions(init)
    const prefix = this.opts.logPrefix
    const logger = components.logger
    this.log = logger.forComponent(prefix)
    this.caches = new InterconnectCaches(this.opts)
    this.history = new HistoryBook(this.opts.maxHistory)
    this.announcer = new Announcer(components, logger.forComponent(`${prefix}:announce`), this.opts.announceConcurrency)
    this.directory = new Directory({
      components,
      keys: init.keys ?? new KeyStore(init.datastore ?? new MemoryDatastore()),
      opts: this.opts,
      announcer: this.announcer,
      log: logger.forComponent(`${prefix}:directory`),
      gateways: init.gateways ?? [],
      private: init.private ?? false,
      onChange: () => {
        this.caches.lookups.clear()
        this.gossipChannel?.changed()
      }
    })
    this.cards = new CardProtocol({
      components,
      directory: this.directory,
      opts: this.opts,
      log: logger.forComponent(`${prefix}:cards`),
      trustedGateways: new Set(init.trustedGateways ?? [])
    })
    this.gossipChannel = this.makeGossip(components, `${prefix}:gossip`, init.private ?? false)
    const parts = { components, directory: this.directory, cards: this.cards, caches: this.caches, history: this.history, opts: this.opts }
    this.discovery = new Discovery({ ...parts, ranker: init.ranker ?? defaultRanker(), log: logger.forComponent(`${prefix}:discovery`), gossip: this.gossipChannel })
    this.router = new Router({ ...parts, log: logger.forComponent(`${prefix}:route`) })
  }

  /** The gossip channel, unless it is off or the node has no pubsub service */
  private makeGossip (components: InterconnectComponents, component: string, hidden: boolean): GossipChannel | undefined {
    const opts = this.opts.gossip
    if (opts === false) return undefined
    const log = components.logger.forComponent(component)
    if (components.pubsub == null) {
      log('no pubsub service on this node: capabilities are announced in the DHT only')
      return undefined
    }
    return new GossipChannel({
      pubsub: components.pubsub,
      messaging: components.messaging,
      requestTimeout: this.opts.requestTimeout,
      peerId: components.peerId,
      domain: this.opts.domain,
      opts,
      log,
      caps: () => this.gossipCaps(),
      // as on the cards: none for a node reachable only through its gateways
      addrs: () => hidden ? [] : components.addresses.getMultiaddrs().map(a => a.toString()),
      // a cached lookup of a name whose announcers changed would hide them
      onChange: names => { for (const n of names) this.caches.lookups.delete(n) },
      identified: components.identified,
      events: components.events
    })
  }

  /** What this node announces over gossip: its hosted agents' capabilities and those given to `announce` */
  private gossipCaps (): string[] {
    const caps = new Set(this.announcedCaps.keys())
    if (this.opts.publish) {
      for (const agent of this.directory.hosted.values()) {
        for (const skill of agent.card.card.skills) caps.add(skill.id)
      }
    }
    return [...caps].sort()
  }

  get gossip (): GossipView | undefined {
    return this.gossipChannel
  }

  get peerId (): PeerId {
    return this.components.peerId
  }

  get domain (): string {
    return this.opts.domain
  }

  async start (): Promise<void> {
    if (this.started) return
    this.started = true
    this.announcer.start()
    await this.cards.start()
    await this.router.start()
    await this.gossipChannel?.start()
    this.components.events.addEventListener('self:peer:update', this.onAddressChange)
    this.refreshTimer = setInterval(() => { void this.directory.resignAll() }, Math.max(1_000, this.opts.cardTtl / 2))
    this.refreshTimer.unref?.()
    this.log('started on %p (domain %s)', this.components.peerId, this.opts.domain)
  }

  async stop (): Promise<void> {
    if (!this.started) return
    this.started = false
    clearInterval(this.refreshTimer)
    this.components.events.removeEventListener('self:peer:update', this.onAddressChange)
    // the withdrawal goes out while the card protocol still answers
    await this.gossipChannel?.stop()
    await this.cards.stop()
    await this.router.stop()
    this.announcer.stop()
    this.caches.clear()
    this.log('stopped')
  }

  // ---- hosting and DHT records -------------------------------------------

  async host (init: HostAgentInit, options?: AbortOptions): Promise<HostedAgent> {
    return this.directory.host(init, options)
  }

  async unhost (did: Did): Promise<void> {
    await this.directory.unhost(did)
  }

  agents (): HostedAgent[] {
    return this.directory.agents()
  }

  async announce (capability: string): Promise<void> {
    await this.directory.announce(capability)
    this.announcedCaps.set(capability, (this.announcedCaps.get(capability) ?? 0) + 1)
    this.gossipChannel?.changed()
  }

  async withdraw (capability: string): Promise<void> {
    await this.directory.withdraw(capability)
    const n = this.announcedCaps.get(capability) ?? 0
    if (n <= 1) this.announcedCaps.delete(capability)
    else this.announcedCaps.set(capability, n - 1)
    this.gossipChannel?.changed()
  }

  async announceAgent (did: Did): Promise<void> {
    await this.directory.announceAgent(did)
  }

  async withdrawAgent (did: Did): Promise<void> {
    await this.directory.withdrawAgent(did)
  }

  async announced (options: AbortOptions = {}): Promise<void> {
    await this.announcer.announced(options)
  }

  // ---- cards ----------------------------------------------------------------

  addCardSource (source: CardSource): void {
    this.cards.addSource(source)
  }

  async fetchCards (peer: PeerId | string, query: CardQuery, options: AbortOptions & { timeout?: number } = {}): Promise<SignedCard[]> {
    return this.cards.fetchCards(peer, query, options)
  }

  // ---- discovery and ranking --------------------------------------------------

  discover (query: DiscoveryQuery, options: DiscoverOptions = {}): AsyncGenerator<DiscoveredAgent, void, undefined> {
    return this.discovery.discover(query, options)
  }

  async discoverAll (query: DiscoveryQuery, options: DiscoverOptions = {}): Promise<DiscoveredAgent[]> {
    return this.discovery.discoverAll(query, options)
  }

  observe (did: Did, outcome: Outcome): void {
    if (!isDid(did) || this.directory.has(did)) return
    this.history.record(did, outcome)
  }

  historyOf (did: Did): AgentHistory | undefined {
    return this.history.get(did)
  }

  cacheStats (): InterconnectCacheStats {
    return this.caches.stats(this.history.size)
  }

  // ---- routing --------------------------------------------------------------

  setForwarder (forwarder: Forwarder | undefined): void {
    this.router.setForwarder(forwarder)
  }

  async resolve (did: Did, options: DiscoverOptions = {}): Promise<{ signed: SignedCard, peers: string[] }> {
    return this.router.resolve(did, options)
  }

  async send<T = unknown> (to: Did, body: unknown, options: SendOptions = {}): Promise<T> {
    return this.router.send<T>(to, body, options)
  }

  async ping (peer: PeerId | string, options: AbortOptions = {}): Promise<number> {
    return this.router.ping(peer, options)
  }
}

/** The interconnect on a transport node: it also exposes the node */
class NodeInterconnect extends DefaultInterconnect implements Interconnect {
  readonly node: TransportNode

  constructor (node: TransportNode, init: InterconnectInit) {
    super(componentsFromNode(node), init)
    this.node = node
  }
}

/** Check the card fields that come from init early (before any agent is hosted) */
function checkInit (peerId: PeerId, init: InterconnectInit): void {
  if (init.domain != null) {
    parseCard({ v: 1, id: 'did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK', name: 'x', domain: init.domain, skills: [{ id: 'x' }], peer: peerId.toString(), issuedAt: 0, expiresAt: 1 })
  }
}

/**
 * Create the interconnect layer on narrow components (stubs in tests, or
 * another host than a transport node) and start it
 */
export async function interconnectFromComponents (components: InterconnectComponents, init: InterconnectInit = {}): Promise<InterconnectService> {
  checkInit(components.peerId, init)
  const ic = new DefaultInterconnect(components, init)
  await ic.start()
  return ic
}

/**
 * Create the interconnect layer on a transport node and start it
 */
export async function createInterconnect (node: TransportNode, init: InterconnectInit = {}): Promise<Interconnect> {
  checkInit(node.peerId, init)
  const ic = new NodeInterconnect(node, init)
  await ic.start()
  return ic
}

export { InterconnectError } from './errors.js'
