/**
 * The agent gateway: the border router of a domain.
 *
 * A domain keeps its agents on inner nodes that talk only to the domain (their
 * own DHT protocol and a connection gater that refuses outside peers). A
 * gateway is one process with two nodes: `inner` joins the domain network,
 * `outer` joins the public one. The gateway
 *
 * - finds the domain's agents that have exported skills (inner DHT lookups),
 *   asks their hosts for export cards (signed by the agents, listing only the
 *   exported skills and the domain's gateways, with no addresses), and
 *   announces those skills and agent ids on the outer DHT with its outer peer
 *   as the provider;
 * - serves the export cards to outside lookups (a card source of `outer`), so
 *   a skill that is not exported is never seen outside;
 * - forwards outside messages for exported agents over the inner network
 *   after checking the export policy (the invoked skill and the caller's
 *   domain) and the caller's rate (`admit`, which relays of other protocols,
 *   such as the task relay of `@ioa/collab`, call as well).
 *
 * Several gateways of one domain serve the same agents (the agents' cards list
 * all of them), so callers fail over from one to the next.
 */
import { TokenBuckets } from '@ioa/transport/internal'
import { peerIdFromString } from '@libp2p/peer-id'
import { Queue } from '@libp2p/utils'
import { assertCapability, capabilityMatches, capabilityPrefixes } from './capability.js'
import { verifyCard } from './card.js'
import { AgentNotHereError, BadRequestError, NotExportedError, RateLimitedError, fromRemote } from './errors.js'
import { CARD_PROTOCOL, MAX_CARDS_PER_LIST } from './protocols.js'
import type { AgentCard, SignedCard } from './card.js'
import type { ExportRule, Gateway, GatewayCaller, GatewayComponents, GatewayExportedEvent, GatewayInit, GatewayOptions, GatewayStats } from './gateway-types.js'
import type { Did } from './identity.js'
import type { CardQuery, Forwarder, InterconnectService } from './types.js'
import type { IdentifyResult, Logger, PeerId } from '@libp2p/interface'

export type * from './gateway-types.js'

const DOMAIN_NAME = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/

/** Inner lookups and export requests a refresh runs at once */
const REFRESH_CONCURRENCY = 8

/** Most inner peers a `'*'` rule lists directly, and most members waiting for a member refresh */
const MAX_LISTED_PEERS = 64

/** Member refreshes per connecting member: after the delay, 4 and 16 times it */
const MEMBER_REFRESH_FACTORS = [1, 4, 16]

/**
 * An export rule's skill in the token syntax (`'*'`, `a.b.*`) or the older
 * prefix form (`a.b`): the prefix it covers (`'*'` for all), or undefined
 */
function exportPrefix (skill: string): string | undefined {
  if (skill === '*') return '*'
  const name = skill.endsWith('.*') ? skill.slice(0, -2) : skill
  try { assertCapability(name) } catch { return undefined }
  return name
}

function positive (name: string, value: number, min = 1): number {
  if (!Number.isFinite(value) || value < min) {
    throw new BadRequestError(`Invalid gateway option ${name}=${value}`)
  }
  return value
}

/** Run `fn` on every item, `limit` at once; `fn` must not reject */
async function eachLimit<T> (items: T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  const queue = new Queue<void>({ concurrency: limit })
  for (const item of items) void queue.add(async () => { await fn(item) })
  await queue.onIdle()
}

class DefaultGateway implements Gateway {
  readonly domain: string
  private readonly inner: InterconnectService
  private readonly outer: InterconnectService
  private readonly components: GatewayComponents
  private readonly rules: ExportRule[]
  private readonly refreshInterval: number
  private readonly lookupTimeout: number
  private readonly forwardTimeout: number
  private readonly innerCapabilities: string[]
  private readonly limiter: TokenBuckets
  private readonly maxExported: number
  private readonly log: Logger
  private readonly self: string
  /** Export cards by agent id */
  private cards = new Map<Did, SignedCard>()
  /** Capability names announced on the outer DHT */
  private announced = new Set<string>()
  private timer?: ReturnType<typeof setInterval>
  private refreshing?: Promise<void>
  private stopped = false
  private readonly counters = { forwarded: 0, notExported: 0, rateLimited: 0, failed: 0, lastRefresh: 0 }
  private readonly memberRefreshDelay: number
  private readonly exportedListeners = new Set<(event: GatewayExportedEvent) => void>()
  /** Members that connected and wait for a member refresh: their attempts so far */
  private readonly members = new Map<string, { peer: PeerId, attempts: number }>()
  private memberTimer?: ReturnType<typeof setTimeout>
  private readonly onIdentify = (evt: Event): void => {
    const { peerId, protocols } = (evt as CustomEvent<IdentifyResult>).detail
    if (!protocols.includes(CARD_PROTOCOL)) return
    this.memberJoined(peerId)
  }

  constructor (components: GatewayComponents, init: GatewayOptions) {
    const { inner, outer } = components
    if (inner == null || outer == null || inner === outer || inner.peerId.equals(outer.peerId)) {
      throw new BadRequestError('A gateway needs two interconnects on two different nodes (inner and outer)')
    }
    if (typeof init.domain !== 'string' || init.domain.length > 253 || !DOMAIN_NAME.test(init.domain)) {
      throw new BadRequestError(`Invalid gateway domain "${String(init.domain).slice(0, 80)}"`)
    }
    const field = init.field ?? 'exports'
    if (!Array.isArray(init.exports)) throw new BadRequestError(`${field} must be a list of export rules`)
    const rules: ExportRule[] = []
    for (const [i, rule] of init.exports.entries()) {
      if (rule == null || typeof rule.skill !== 'string') throw new BadRequestError(`${field}[${i}].skill is missing: an export rule needs a skill`)
      const prefix = exportPrefix(rule.skill)
      if (prefix == null) {
        throw new BadRequestError(`${field}[${i}].skill "${rule.skill.slice(0, 80)}" must be '*', a capability name followed by '.*' (as in tokens), or a capability name`)
      }
      if (rule.domains != null && (!Array.isArray(rule.domains) || !rule.domains.every(d => d === '*' || (typeof d === 'string' && DOMAIN_NAME.test(d))))) {
        throw new BadRequestError(`${field}[${i}].domains of "${rule.skill}" must be domain names or '*'`)
      }
      rules.push({ skill: prefix, ...(rule.domains != null ? { domains: [...rule.domains] } : {}) })
    }
    for (const c of init.innerCapabilities ?? []) {
      try { assertCapability(c) } catch { throw new BadRequestError(`innerCapabilities entry "${String(c).slice(0, 80)}" is not a capability name`) }
    }
    const rate = init.rateLimit ?? { requests: 50, per: 1000 }
    this.domain = init.domain
    this.components = components
    this.inner = inner
    this.outer = outer
    this.rules = rules
    this.refreshInterval = positive('refreshInterval', init.refreshInterval ?? 30_000, 100)
    this.memberRefreshDelay = positive('memberRefreshDelay', init.memberRefreshDelay ?? 250, 0)
    if (init.onExported != null) this.exportedListeners.add(init.onExported)
    this.lookupTimeout = positive('innerLookupTimeout', init.innerLookupTimeout ?? 5_000)
    this.forwardTimeout = positive('forwardTimeout', init.forwardTimeout ?? 10_000)
    this.innerCapabilities = [...(init.innerCapabilities ?? [])]
    this.limiter = new TokenBuckets(
      positive('rateLimit.requests', rate.requests),
      positive('rateLimit.per', rate.per),
      positive('maxCallers', init.maxCallers ?? 10_000)
    )
    this.maxExported = positive('maxExportedAgents', init.maxExportedAgents ?? 4_096)
    this.log = components.logger.forComponent(init.logPrefix ?? 'ioa:interconnect:gateway')
    this.self = this.outer.peerId.toString()
  }

  async start (): Promise<void> {
    this.outer.addCardSource(async (query) => this.serveCards(query))
    this.outer.setForwarder(this.forward)
    if (this.memberRefreshDelay > 0) this.components.innerEvents?.addEventListener('peer:identify', this.onIdentify)
    await this.refresh()
    if (this.stopped) return
    this.timer = setInterval(() => {
      this.refresh().catch((err: any) => { this.log.error('refresh of the exported agents failed: %s', err?.message ?? err) })
    }, this.refreshInterval)
    this.timer.unref?.()
  }

  async stop (): Promise<void> {
    if (this.stopped) return
    this.stopped = true
    clearInterval(this.timer)
    clearTimeout(this.memberTimer)
    this.members.clear()
    this.components.innerEvents?.removeEventListener('peer:identify', this.onIdentify)
    this.outer.setForwarder(undefined)
    // a failing refresh is reported by whoever started it
    await this.refreshing?.catch((err: any) => { this.log.trace('refresh ended while stopping: %s', err?.message ?? err) })
    const cards = this.cards
    this.cards = new Map()
    await this.apply(new Map(), cards)
  }

  onExported (listener: (event: GatewayExportedEvent) => void): () => void {
    this.exportedListeners.add(listener)
    return () => { this.exportedListeners.delete(listener) }
  }

  exported (): SignedCard[] {
    return [...this.cards.values()]
  }

  stats (): GatewayStats {
    const { forwarded, notExported, rateLimited, failed, lastRefresh } = this.counters
    return { forwarded, refused: notExported + rateLimited, notExported, rateLimited, failed, exportedAgents: this.cards.size, lastRefresh }
  }

  // ---- policy -----------------------------------------------------------

  /** Is the skill covered by some rule (for any caller)? */
  private isExported (skill: string): boolean {
    return this.rules.some(r => r.skill === '*' || capabilityMatches(r.skill, skill))
  }

  /** Is the skill covered by a rule that allows a caller of this domain? */
  private allows (skill: string, callerDomain: string | undefined): boolean {
    return this.rules.some(r => {
      if (r.skill !== '*' && !capabilityMatches(r.skill, skill)) return false
      if (r.domains == null || r.domains.includes('*')) return true
      return callerDomain != null && r.domains.includes(callerDomain)
    })
  }

  // ---- serving cards ------------------------------------------------------

  private serveCards (query: CardQuery): SignedCard[] {
    if (this.stopped) return []
    const now = Date.now()
    const limit = Math.min(query.limit ?? MAX_CARDS_PER_LIST, MAX_CARDS_PER_LIST)
    const wanted = query.agents != null ? new Set(query.agents) : undefined
    const out: SignedCard[] = []
    for (const signed of this.cards.values()) {
      if (out.length >= limit) break
      const card = signed.card
      if (card.expiresAt <= now) continue
      if (wanted != null && !wanted.has(card.id)) continue
      if (query.prefix != null && !card.skills.some(s => capabilityMatches(query.prefix as string, s.id))) continue
      out.push(signed)
    }
    return out
  }

  // ---- admission ----------------------------------------------------------

  isExportedAgent (did: Did): boolean {
    return !this.stopped && this.cards.has(did)
  }

  admit (to: Did, skill: string | undefined, caller: GatewayCaller): void {
    try {
      this.check(to, skill, caller)
    } catch (err: any) {
      this.log('refused a call from %s to %s (skill %s): %s', caller.peer, String(to).slice(0, 80), skill, err?.message)
      throw err
    }
  }

  private check (to: Did, skill: string | undefined, caller: GatewayCaller): void {
    const signed = this.stopped ? undefined : this.cards.get(to)
    if (signed == null) {
      this.counters.notExported++
      throw new NotExportedError(`Agent ${String(to).slice(0, 80)} is not exported by this gateway`)
    }
    if (typeof skill !== 'string') {
      this.counters.notExported++
      throw new NotExportedError('A call through a gateway must name the skill it invokes')
    }
    const callerDomain = caller.domain
    const offered = signed.card.skills.some(s => capabilityMatches(s.id, skill))
    if (!offered || !this.allows(skill, callerDomain)) {
      this.counters.notExported++
      throw new NotExportedError(`Skill ${skill.slice(0, 80)} of ${to} is not exported to ${callerDomain != null ? `domain ${callerDomain}` : 'callers without a card'}`)
    }
    if (!this.limiter.take(caller.peer)) {
      this.counters.rateLimited++
      throw new RateLimitedError(`Peer ${caller.peer} exceeded the gateway's rate limit`)
    }
  }

  // ---- forwarding ---------------------------------------------------------

  private readonly forward: Forwarder = async (msg, ctx) => {
    // an agent this gateway does not export: decline (AGENT_NOT_HERE)
    if (!this.isExportedAgent(msg.to)) return undefined
    // the caller: its peer is authenticated by the connection; its domain comes
    // from its card, which the interconnect verified and bound to that peer
    this.admit(msg.to, msg.skill, { peer: msg.peer, domain: msg.fromCard?.domain })
    const skill = msg.skill as string
    try {
      const body = await this.inner.send(msg.to, msg.body, { skill, timeout: this.forwardTimeout, signal: ctx.signal })
      this.counters.forwarded++
      return { body: body ?? null }
    } catch (err: any) {
      this.counters.failed++
      this.log('forwarding to %s failed in the domain: %s %s', msg.to, err?.code, err?.message)
      throw err
    }
  }

  // ---- refresh ------------------------------------------------------------

  async refresh (): Promise<void> {
    if (this.stopped) return
    this.refreshing ??= this.doRefresh().finally(() => { this.refreshing = undefined })
    return this.refreshing
  }

  // ---- member refreshes ---------------------------------------------------

  /** A domain member connected: refresh soon, listing its cards directly */
  private memberJoined (peer: PeerId): void {
    if (this.stopped) return
    const id = peer.toString()
    if (!this.members.has(id)) {
      if (this.members.size >= MAX_LISTED_PEERS) {
        this.log.trace('member %p waits for the periodic refresh: %d members wait already', peer, this.members.size)
        return
      }
      this.members.set(id, { peer, attempts: 0 })
    }
    this.scheduleMemberRefresh()
  }

  /** One timer for every waiting member: the earliest attempt due */
  private scheduleMemberRefresh (): void {
    if (this.stopped || this.memberTimer != null || this.members.size === 0) return
    const next = Math.min(...[...this.members.values()].map(m => MEMBER_REFRESH_FACTORS[m.attempts]))
    this.memberTimer = setTimeout(() => {
      this.memberTimer = undefined
      this.refresh().catch((err: any) => { this.log.error('member refresh of the exported agents failed: %s', err?.message ?? err) })
    }, this.memberRefreshDelay * next)
    this.memberTimer.unref?.()
  }

  /** After a refresh: members with an exported agent, or out of attempts, stop waiting */
  private settleMembers (listed: Set<string>): void {
    const exportedPeers = new Set([...this.cards.values()].map(c => c.card.peer))
    for (const [id, m] of this.members) {
      if (!listed.has(id)) continue
      m.attempts++
      if (exportedPeers.has(id) || m.attempts >= MEMBER_REFRESH_FACTORS.length) this.members.delete(id)
    }
    this.scheduleMemberRefresh()
  }

  private async doRefresh (): Promise<void> {
    const members = [...this.members.values()].map(m => m.peer)
    const listed = new Set(members.map(p => p.toString()))
    const found = await this.findInnerAgents(members)
    // agents exported before but not found now: ask their hosts again, so a
    // lookup that missed them does not withdraw them
    for (const [did, signed] of this.cards) {
      if (!found.has(did) && found.size < this.maxExported) found.set(did, signed.card)
    }
    const next = new Map<Did, SignedCard>()
    await eachLimit([...found.values()], REFRESH_CONCURRENCY, async (card) => {
      try {
        const signed = await this.requestExport(card)
        if (signed != null) next.set(card.id, signed)
      } catch (err: any) {
        // not exported this round (the next refresh asks again)
        this.log('no export card for %s: %s %s', card.id, err?.code, err?.message)
      }
    })
    if (this.stopped) return
    const previous = this.cards
    this.cards = next
    await this.apply(next, previous)
    this.counters.lastRefresh = Date.now()
    this.log('refresh: %d agents exported (%d found)', next.size, found.size)
    this.emitExported(next, previous)
    this.settleMembers(listed)
  }

  private emitExported (next: Map<Did, SignedCard>, previous: Map<Did, SignedCard>): void {
    const added = [...next.keys()].filter(did => !previous.has(did))
    const removed = [...previous.keys()].filter(did => !next.has(did))
    if (added.length === 0 && removed.length === 0) return
    const event: GatewayExportedEvent = { type: 'exported', agents: [...next.keys()], added, removed, at: this.counters.lastRefresh }
    for (const listener of this.exportedListeners) {
      try {
        listener(event)
      } catch (err: any) {
        this.log.error('an exported listener failed: %s', err?.message ?? err)
      }
    }
  }

  /** Inner cards of this domain's agents that have at least one exported skill */
  private async findInnerAgents (members: PeerId[]): Promise<Map<Did, AgentCard>> {
    const found = new Map<Did, AgentCard>()
    const self = this.inner.peerId.toString()
    const add = (card: AgentCard): void => {
      if (card.domain !== this.domain || card.peer === self) return
      if (!card.skills.some(s => this.isExported(s.id))) return
      const known = found.get(card.id)
      if (known == null && found.size >= this.maxExported) {
        this.log('not exporting %s: already %d agents (maxExportedAgents)', card.id, this.maxExported)
        return
      }
      if (known == null || known.issuedAt < card.issuedAt) found.set(card.id, card)
    }

    const wildcard = this.rules.some(r => r.skill === '*')
    const names = new Set(this.rules.filter(r => r.skill !== '*').map(r => r.skill))
    if (wildcard) {
      for (const c of this.innerCapabilities) names.add(c)
    }
    await eachLimit([...names], REFRESH_CONCURRENCY, async (capability) => {
      try {
        for (const r of await this.inner.discoverAll({ capability }, { timeout: this.lookupTimeout, cache: false })) {
          if (!r.local) add(r.card)
        }
      } catch (err: any) {
        // this lookup failed; the others still count
        this.log('inner lookup of %s failed: %s', capability, err?.message ?? err)
      }
    })
    // members that just connected are listed directly (their announcements
    // may not be in the DHT yet); with a '*' rule every connected peer is
    const peers = wildcard ? this.components.innerConnections.getPeers().slice(0, MAX_LISTED_PEERS) : []
    for (const m of members) if (!peers.some(p => p.equals(m))) peers.push(m)
    await eachLimit(peers, REFRESH_CONCURRENCY, async (peer) => {
      try {
        for (const signed of await this.inner.fetchCards(peer, {}, { timeout: this.lookupTimeout })) add(signed.card)
      } catch (err: any) {
        // a peer without the card protocol, or unreachable
        this.log.trace('inner peer %p lists no cards: %s', peer, err?.message ?? err)
      }
    })
    return found
  }

  /** Ask an agent's host for its export card and check it */
  private async requestExport (card: AgentCard): Promise<SignedCard | undefined> {
    const skills = card.skills.filter(s => this.isExported(s.id)).map(s => s.id)
    const gateways = card.gateways ?? []
    // the agent's card must list this gateway, or outside peers would not accept it from us
    if (skills.length === 0 || !gateways.includes(this.self)) {
      this.log('not exporting %s: %s', card.id, skills.length === 0 ? 'no exported skill' : 'its card does not list this gateway')
      return undefined
    }
    const answer = await this.components.innerMessaging.request<{ card?: unknown }>(
      peerIdFromString(card.peer), CARD_PROTOCOL, 'export',
      { agent: card.id, skills, gateways },
      { timeout: this.lookupTimeout }
    ).catch((err: unknown) => { throw fromRemote(err) })
    const signed = await verifyCard(answer?.card, { servedBy: this.self })
    const c = signed.card
    if (c.id !== card.id || c.peer !== card.peer || c.domain !== this.domain) {
      throw new AgentNotHereError(`Export card of ${card.id} does not match the agent`)
    }
    if (c.addrs.length > 0 || !c.skills.every(s => skills.includes(s.id))) {
      throw new NotExportedError(`Export card of ${card.id} reveals more than was exported`)
    }
    return signed
  }

  /** Announce what `next` exports and withdraw what only `previous` did */
  private async apply (next: Map<Did, SignedCard>, previous: Map<Did, SignedCard>): Promise<void> {
    const names = new Set<string>()
    if (!this.stopped) {
      for (const signed of next.values()) {
        for (const s of signed.card.skills) {
          for (const p of capabilityPrefixes(s.id)) names.add(p)
        }
      }
    }
    const tasks: Array<Promise<void>> = []
    for (const name of names) {
      if (!this.announced.has(name)) tasks.push(this.outer.announce(name))
    }
    for (const name of this.announced) {
      if (!names.has(name)) tasks.push(this.outer.withdraw(name))
    }
    this.announced = names
    for (const did of next.keys()) {
      if (!previous.has(did)) tasks.push(this.outer.announceAgent(did))
    }
    for (const did of previous.keys()) {
      if (!next.has(did)) tasks.push(this.outer.withdrawAgent(did))
    }
    for (const r of await Promise.allSettled(tasks)) {
      // a failed announcement is retried by the outer interconnect; a failure here is only reported
      if (r.status === 'rejected') this.log.error('updating the outer announcements failed: %s', r.reason?.message ?? r.reason)
    }
  }
}

/**
 * Start a gateway between a domain's inner network and the public network:
 * it looks for the domain's exported agents at once (and every
 * `refreshInterval`), serves their export cards on `outer` and forwards
 * messages for them over `inner`. Uses `outer`'s card source and forwarder.
 */
export async function createGateway (init: GatewayInit): Promise<Gateway> {
  const { inner, outer, ...options } = init
  if (inner == null || outer == null) {
    throw new BadRequestError('A gateway needs two interconnects on two different nodes (inner and outer)')
  }
  return gatewayFromComponents({
    inner,
    outer,
    innerConnections: inner.node,
    innerMessaging: inner.node.services.messaging,
    innerEvents: inner.node as unknown as GatewayComponents['innerEvents'],
    logger: outer.node.logger
  }, options)
}

/** Start a gateway on narrow components (see `createGateway`) */
export async function gatewayFromComponents (components: GatewayComponents, options: GatewayOptions): Promise<Gateway> {
  const gateway = new DefaultGateway(components, options)
  await gateway.start()
  return gateway
}
