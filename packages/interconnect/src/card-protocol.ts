/**
 * The card protocol (`/ioa/card/1.0.0`, spec `interconnect.md` 5): the
 * `list` and `export` handlers that serve hosted agents' signed cards, and
 * the client that fetches and verifies a peer's cards.
 */
import { peerIdFromString } from '@libp2p/peer-id'
import { assertCapability } from './capability.js'
import { CARD_LIMITS, encodeSignedCard, verifyCard } from './card.js'
import { AgentNotHereError, BadRequestError, ForbiddenError, NotExportedError, fromRemote } from './errors.js'
import { CARD_PROTOCOL, LIST_BYTE_BUDGET, MAX_CARDS_PER_LIST } from './protocols.js'
import type { SignedCard } from './card.js'
import type { InterconnectComponents } from './components.js'
import type { Directory } from './directory.js'
import type { Defaults } from './options.js'
import type { CardQuery, CardSource } from './types.js'
import type { RequestContext } from '@ioa/transport'
import type { AbortOptions, Counter, CounterGroup, Logger, PeerId } from '@libp2p/interface'

export interface CardProtocolInit {
  components: Pick<InterconnectComponents, 'messaging' | 'metrics'>
  directory: Directory
  opts: Defaults
  log: Logger
  /** Peers (gateways' inner nodes) allowed to ask for export cards */
  trustedGateways: Set<string>
}

export class CardProtocol {
  private readonly init: CardProtocolInit
  private readonly log: Logger
  private readonly sources: CardSource[] = []
  /** Cards fetched from peers that verified, and those dropped by reason (their error code), when the node has metrics */
  private readonly verified?: Counter
  private readonly rejected?: CounterGroup

  constructor (init: CardProtocolInit) {
    this.init = init
    this.log = init.log
    this.verified = init.components.metrics?.registerCounter('ioa_cards_verified_total', { help: 'Agent cards fetched from peers that verified' })
    this.rejected = init.components.metrics?.registerCounterGroup('ioa_cards_rejected_total', { label: 'reason', help: 'Agent cards fetched from peers that did not verify, by error code' })
  }

  async start (): Promise<void> {
    const m = this.init.components.messaging
    await m.handle(CARD_PROTOCOL, 'list', async (payload, ctx) => this.handleList(payload, ctx))
    await m.handle(CARD_PROTOCOL, 'export', async (payload, ctx) => this.handleExport(payload, ctx))
  }

  async stop (): Promise<void> {
    await this.init.components.messaging.unhandle(CARD_PROTOCOL)
  }

  addSource (source: CardSource): void {
    this.sources.push(source)
  }

  // ---- server -------------------------------------------------------------

  private async handleList (payload: unknown, ctx: RequestContext): Promise<{ cards: SignedCard[] }> {
    const query = this.refusing(ctx, 'list', () => parseCardQuery(payload))
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
    const answer = (): { cards: SignedCard[] } => {
      if (this.log.enabled) this.log.trace('list from %p (prefix %s): %d cards, %d bytes', ctx.peer, query.prefix, out.length, bytes)
      return { cards: out }
    }
    for (const agent of this.init.directory.hosted.values()) {
      if (wanted != null && !wanted.has(agent.did)) continue
      if (query.prefix != null && !agent.card.card.skills.some(s => s.id === query.prefix || s.id.startsWith(query.prefix + '.'))) continue
      if (!add(agent.card)) return answer()
    }
    for (const source of this.sources) {
      for (const c of await source(query, ctx.peer.toString())) {
        if (!add(c)) return answer()
      }
    }
    return answer()
  }

  private async handleExport (payload: unknown, ctx: RequestContext): Promise<{ card: SignedCard }> {
    const { did, skills, gateways } = this.refusing(ctx, 'export', () => {
      if (!this.init.trustedGateways.has(ctx.peer.toString())) {
        throw new ForbiddenError('Only this domain\'s gateways may request export cards')
      }
      return parseExportRequest(payload)
    })
    const agent = this.init.directory.get(did)
    if (agent == null) {
      this.log('refused export of %s to %p: not hosted here', did, ctx.peer)
      throw new AgentNotHereError(`Agent ${did} is not hosted here`)
    }
    const chosen = agent.init.skills.filter(s => skills.includes(s.id))
    if (chosen.length === 0) {
      this.log('refused export of %s to %p: none of the requested skills are the agent\'s', did, ctx.peer)
      throw new NotExportedError('None of the requested skills belong to the agent')
    }
    this.log('export card of %s (%d skills) for gateway %p', did, chosen.length, ctx.peer)
    return { card: await this.init.directory.makeCard(agent.identity, agent.init, chosen, gateways, true) }
  }

  /** Run a request check; a refusal gets a debug line saying why */
  private refusing<T> (ctx: RequestContext, method: string, check: () => T): T {
    try {
      return check()
    } catch (err: any) {
      this.log('refused %s from %p: %s %s', method, ctx.peer, err?.code, err?.message)
      throw err
    }
  }

  // ---- client -------------------------------------------------------------

  async fetchCards (peer: PeerId | string, query: CardQuery, options: AbortOptions & { timeout?: number } = {}): Promise<SignedCard[]> {
    const peerId = typeof peer === 'string' ? peerIdFromString(peer) : peer
    const answer = await this.init.components.messaging.request<{ cards?: unknown }>(peerId, CARD_PROTOCOL, 'list', query, {
      signal: options.signal,
      timeout: options.timeout ?? this.init.opts.requestTimeout
    }).catch((err: unknown) => { throw fromRemote(err) })
    if (answer == null || typeof answer !== 'object' || !Array.isArray(answer.cards) || answer.cards.length > MAX_CARDS_PER_LIST) {
      this.log('peer %p sent a malformed card list', peerId)
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
        out.push(await verifyCard(raw, { servedBy: peerId.toString(), clockSkew: this.init.opts.clockSkew }))
        this.verified?.increment()
      } catch (err: any) {
        // a card that does not verify is dropped, never returned
        this.log('dropped a card from %p: %s %s', peerId, err?.code ?? err?.name, err?.message)
        this.rejected?.increment({ [/^[A-Z][A-Z0-9_]{0,63}$/.test(err?.code) ? err.code : 'other']: true })
      }
    }
    return out
  }
}

function isCanonicalPeerId (value: unknown): boolean {
  if (typeof value !== 'string') return false
  try {
    return peerIdFromString(value).toString() === value
  } catch {
    // not a peer id at all: refused like a non-canonical one
    return false
  }
}

/** Check the payload of a `list` request */
export function parseCardQuery (payload: unknown): CardQuery {
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

/** Check the payload of an `export` request */
function parseExportRequest (payload: unknown): { did: string, skills: string[], gateways: string[] } {
  if (payload == null || typeof payload !== 'object' || Array.isArray(payload)) throw new BadRequestError('export needs { agent, skills, gateways }')
  const { agent: did, skills, gateways, ...rest } = payload as Record<string, unknown>
  if (Object.keys(rest).length > 0) throw new BadRequestError(`Unknown fields: ${Object.keys(rest).join(', ')}`)
  if (typeof did !== 'string' || !Array.isArray(skills) || !Array.isArray(gateways) ||
    skills.length > CARD_LIMITS.maxSkills || gateways.length === 0 || gateways.length > CARD_LIMITS.maxGateways ||
    !skills.every(s => typeof s === 'string') || !gateways.every(isCanonicalPeerId)) {
    throw new BadRequestError(`export needs { agent, skills: string[], gateways: 1-${CARD_LIMITS.maxGateways} peer ids }`)
  }
  return { did, skills: skills as string[], gateways: gateways as string[] }
}
