/**
 * Routing to an agent id (spec `interconnect.md` 8): resolve the agent's
 * card and the peers that serve it (its host, then its gateways) through its
 * DHT record, deliver a message over the route protocol with failover, and
 * the route protocol's `deliver` handler.
 */
import { peerIdFromString } from '@libp2p/peer-id'
import { countsAgainstAgent, mayTryAnotherPeer } from '@ioa/transport'
import { anySignal } from 'any-signal'
import delay from 'delay'
import { agentCid, assertCapability } from './capability.js'
import { verifyCard } from './card.js'
import { rememberAddresses, LOOKUP_TIMEOUT } from './discovery.js'
import { AgentNotHereError, BadRequestError, NoInboxError, PeerUnreachableError, UnknownAgentError, fromRemote } from './errors.js'
import { isDid } from './identity.js'
import { ROUTE_PROTOCOL } from './protocols.js'
import type { InterconnectCaches } from './caches.js'
import type { CardProtocol } from './card-protocol.js'
import type { SignedCard } from './card.js'
import type { InterconnectComponents } from './components.js'
import type { Directory } from './directory.js'
import type { InterconnectError } from './errors.js'
import type { HistoryBook } from './history.js'
import type { Did } from './identity.js'
import type { Defaults } from './options.js'
import type { DiscoverOptions, Forwarder, SendOptions } from './types.js'
import type { RequestContext } from '@ioa/transport'

/** Walks of a resolve that finds no provider; the pause before walk n is n × WALK_PAUSE ms */
const WALKS = 3
const WALK_PAUSE = 200
import type { AbortOptions, Logger, PeerId } from '@libp2p/interface'

/** The interconnect reads the transport's retry table without the collaboration layer's codes */
const AS_INTERCONNECT = { reader: 'interconnect' } as const

export interface RouterInit {
  components: Pick<InterconnectComponents, 'peerId' | 'contentRouting' | 'peerStore' | 'messaging' | 'ping'>
  directory: Directory
  cards: CardProtocol
  caches: InterconnectCaches
  history: HistoryBook
  opts: Defaults
  log: Logger
}

export class Router {
  private readonly init: RouterInit
  private readonly log: Logger
  private forwarder?: Forwarder

  constructor (init: RouterInit) {
    this.init = init
    this.log = init.log
  }

  async start (): Promise<void> {
    await this.init.components.messaging.handle(ROUTE_PROTOCOL, 'deliver', async (payload, ctx) => this.handleDeliver(payload, ctx))
  }

  async stop (): Promise<void> {
    await this.init.components.messaging.unhandle(ROUTE_PROTOCOL)
  }

  setForwarder (forwarder: Forwarder | undefined): void {
    this.forwarder = forwarder
  }

  async resolve (did: Did, options: DiscoverOptions = {}): Promise<{ signed: SignedCard, peers: string[] }> {
    if (!isDid(did)) throw new UnknownAgentError(`Not an agent id: ${String(did).slice(0, 80)}`)
    const { components, caches, opts } = this.init
    const self = components.peerId.toString()
    const local = this.init.directory.get(did)
    if (local != null) return { signed: local.card, peers: [self] }
    const cached = caches.routes.get(did)
    if (options.cache !== false && cached != null && Date.now() - cached.at < opts.cacheTtl && cached.signed.card.expiresAt > Date.now()) {
      return { signed: cached.signed, peers: cached.peers }
    }

    const signal = anySignal([options.signal, AbortSignal.timeout(options.timeout ?? LOOKUP_TIMEOUT)])
    const cid = await agentCid(did)
    let best: SignedCard | undefined
    const peers: string[] = []
    try {
      // a walk that finds no provider is tried again, twice, after short pauses: an agent
      // hosted a moment ago may not be in the DHT yet (its announcement is still walking)
      for (let walk = 0; best == null && walk < WALKS && !signal.aborted; walk++) {
        try {
          if (walk > 0) await delay(WALK_PAUSE * walk, { signal })
          best = await this.walk(did, cid, self, peers, signal)
        } catch (err: any) {
          // lookup ended (timeout or no more peers): keep what was found
          this.log.trace('walk %d for %s ended: %s', walk + 1, did, err?.message ?? err)
        }
      }
    } finally {
      signal.clear()
    }
    if (best == null) {
      this.log('could not resolve %s: no peer serves a valid card', did)
      throw new UnknownAgentError(`No peer serves a valid card for ${did}`)
    }
    // the hosting peer first, then gateways
    peers.sort((a, b) => (a === best.card.peer ? -1 : 0) - (b === best.card.peer ? -1 : 0))
    caches.routes.set(did, { at: Date.now(), signed: best, peers })
    return { signed: best, peers }
  }

  /** One DHT walk for the providers of an agent id: the newest valid card, its serving peers added to `peers` */
  private async walk (did: Did, cid: Awaited<ReturnType<typeof agentCid>>, self: string, peers: string[], signal: AbortSignal): Promise<SignedCard | undefined> {
    const { components } = this.init
    let best: SignedCard | undefined
    for await (const provider of components.contentRouting.findProviders(cid, { signal })) {
      const id = provider.id.toString()
      if (id === self || peers.includes(id)) continue
      await rememberAddresses(components.peerStore, provider, this.log)
      try {
        const cards = await this.init.cards.fetchCards(provider.id, { agents: [did], limit: 1 }, { signal })
        const card = cards.find(c => c.card.id === did)
        if (card == null) {
          this.log('provider %s of %s serves no valid card of it', id, did)
          continue
        }
        peers.push(id)
        if (best == null || card.card.issuedAt > best.card.issuedAt) best = card
        // the host itself answered: no need to look further
        if (card.card.peer === id) break
      } catch (err: any) {
        // try the next provider
        this.log('resolving %s skips provider %s: %s', did, id, err?.message ?? err)
      }
    }
    return best
  }

  async send<T = unknown> (to: Did, body: unknown, options: SendOptions = {}): Promise<T> {
    const { directory, history, caches, components } = this.init
    let fromCard: SignedCard | undefined
    if (options.from != null) {
      const sender = directory.get(options.from)
      if (sender == null) throw new UnknownAgentError(`Sender ${options.from} is not hosted here`)
      fromCard = sender.card
    }
    if (options.skill != null) assertCapability(options.skill)

    const local = directory.get(to)
    if (local != null) {
      const inbox = local.init.inbox
      if (inbox == null) throw new NoInboxError(`Agent ${to} has no inbox`)
      return await inbox({
        to,
        from: options.from,
        fromCard: fromCard?.card,
        skill: options.skill,
        body,
        peer: components.peerId.toString(),
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
          const answer = await components.messaging.request<{ body: unknown }>(peerIdFromString(peer), ROUTE_PROTOCOL, 'deliver', payload, {
            signal: options.signal,
            timeout: options.timeout ?? this.init.opts.requestTimeout
          })
          history.record(to, { ok: true, rtt: performance.now() - started })
          return (answer as { body: T }).body
        } catch (e: any) {
          const err = fromRemote(e) as any
          lastError = err
          if (err?.code === AgentNotHereError.code) {
            this.log('delivery to %s: peer %s does not host it (round %d)', to, peer, round)
            caches.routes.delete(to)
            break
          }
          if (mayTryAnotherPeer(err, AS_INTERCONNECT)) {
            this.log('delivery to %s: peer %s unreachable (%s), trying the next', to, peer, err?.code)
            continue
          }
          // the agent did not answer in time, or its handler failed: a bad
          // mark for ranking (a call the caller aborted is not the agent's fault)
          if (options.signal?.aborted !== true && countsAgainstAgent(err, { ...AS_INTERCONNECT, reachedOnly: true })) {
            history.record(to, { ok: false })
          }
          this.log('delivery to %s through %s failed: %s %s', to, peer, err?.code, err?.message)
          throw err
        }
      }
      caches.routes.delete(to)
    }
    if ((lastError as InterconnectError | undefined)?.code === AgentNotHereError.code) {
      throw lastError
    }
    if (lastError != null) history.record(to, { ok: false })
    this.log('delivery to %s failed: no serving peer could be reached', to)
    throw new PeerUnreachableError(`No peer serving ${to} could be reached${lastError != null ? `: ${lastError.message}` : ''}`, { cause: lastError })
  }

  private async handleDeliver (payload: unknown, ctx: RequestContext): Promise<{ body: unknown }> {
    try {
      return await this.deliver(payload, ctx)
    } catch (err: any) {
      this.log('deliver from %p refused or failed: %s %s', ctx.peer, err?.code, err?.message)
      throw err
    }
  }

  private async deliver (payload: unknown, ctx: RequestContext): Promise<{ body: unknown }> {
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
      fromCard = await verifyCard(card, { servedBy: ctx.peer.toString(), clockSkew: this.init.opts.clockSkew })
      if (from !== fromCard.card.id) throw new BadRequestError('deliver.card is not the card of deliver.from')
    }

    const agent = this.init.directory.get(to)
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
      throw new AgentNotHereError(`Agent ${to} is not hosted on ${this.init.components.peerId.toString()}`)
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
      return await this.init.components.ping.ping(peerId, { signal: options.signal ?? AbortSignal.timeout(this.init.opts.requestTimeout) })
    } catch (err: any) {
      this.log('ping of %p failed: %s', peerId, err?.message ?? err)
      throw new PeerUnreachableError(`Peer ${peerId.toString()} did not answer ping: ${err?.message ?? err}`, { cause: err })
    }
  }
}
