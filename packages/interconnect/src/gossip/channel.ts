/**
 * The gossip channel of discovery (spec `interconnect.md` 12): capability
 * snapshots on the domain's pubsub topic beside the DHT records. It
 * subscribes to the topic, checks every message in the topic validator
 * (signed, within the bounds, not stale, not a replay) and keeps the
 * accepted ones in the bounded `CapabilityIndex`, which lookups read
 * (`peers`). The `GossipPublisher` publishes this node's own snapshots.
 *
 * The validator both checks a message and stores it: gossipsub runs it once
 * per message (duplicates are dropped before), and an accepted snapshot is
 * the one the index must hold, so the payload is decoded only once.
 */
import { TokenBuckets } from '@ioa/transport/internal'
import { pushable } from 'it-pushable'
import { CAPS_INDEX_PROTOCOL } from '../protocols.js'
import { CapabilityIndex } from './cap-index.js'
import { IndexQuery } from './index-query.js'
import { GossipPublisher } from './publisher.js'
import { entryOf } from './signed-entry.js'
import { decodeSnapshot, gossipTopic } from './snapshot.js'
import type { CapabilityIndexStats } from './cap-index.js'
import type { GossipDefaults } from './options.js'
import type { IndexAnswer } from './index-query.js'
import type { InterconnectComponents, PubSub, PubSubMessage, PubSubVerdict } from '../components.js'
import type { AbortOptions, Logger, PeerId } from '@libp2p/interface'

export interface GossipChannelInit {
  pubsub: PubSub
  /** Index queries (section 12.6) are asked and answered through it */
  messaging: InterconnectComponents['messaging']
  /** Time an index query may take, in ms */
  requestTimeout: number
  peerId: PeerId
  domain: string
  opts: GossipDefaults
  log: Logger
  /** The capabilities this node announces now */
  caps(): string[]
  /** The addresses this node lists in its snapshots */
  addrs(): string[]
  /** The announcers of these names changed (drop cached lookups of them) */
  onChange(names: Iterable<string>): void
  /**
   * Connected peers whose identify lists the index query's protocol, asked
   * while no peer of the topic is known (section 12.6); with `events`, whose
   * `peer:identify` wakes a lookup waiting for a peer to ask
   */
  identified?: InterconnectComponents['identified']
  events?: InterconnectComponents['events']
}

/** What the gossip channel has seen (`Interconnect.gossip.stats()`) */
export interface GossipStats extends CapabilityIndexStats {
  /** The domain topic */
  topic: string
  /** Snapshots this node published */
  published: number
  /** Snapshots accepted into the index */
  accepted: number
  /** Snapshots ignored: not newer than the one held, a replay, or this node's own */
  ignored: number
  /** Snapshots ignored because their announcer exceeded `maxSnapshotsPerMinute` */
  limited: number
  /** Snapshots rejected by the validator, by error code */
  rejected: Record<string, number>
  /** Index queries this node answered (section 12.6) */
  queriesServed: number
  /** Index answers this node refused (a bad signature, too large, not what was asked) */
  answersRefused: number
}

/** Read access to the gossip index (`Interconnect.gossip`) */
export interface GossipView {
  /** Counters and sizes */
  stats(): GossipStats
  /** Peers whose current snapshot announces `capability` or a name below it */
  announcers(capability: string): string[]
  /** The addresses `peer` listed in its current snapshot (empty when none or unknown) */
  addresses(peer: string): string[]
  /**
   * Ask `peer` for its index entries of `capability` (section 12.6), verify
   * them and take them into this node's index; resolves with the announcers
   * (and `peer` itself when it announces the capability). Throws a typed
   * error for a hostile answer (`INVALID_SIGNATURE`, `SNAPSHOT_TOO_LARGE`,
   * `SNAPSHOT_NOT_REQUESTED`, `INVALID_SNAPSHOT`, `BAD_REQUEST`) or a refusal (`RATE_LIMITED`)
   */
  ask(peer: PeerId, capability: string, options?: AbortOptions): Promise<string[]>
}

export class GossipChannel implements GossipView {
  readonly topic: string
  /** Longest wait of a lookup's DHT walk for the index query's candidates, ms */
  readonly queryHold: number
  private readonly init: GossipChannelInit
  private readonly log: Logger
  private readonly index: CapabilityIndex
  private readonly publisher: GossipPublisher
  private readonly query: IndexQuery
  private readonly self: string
  private accepted = 0
  private ignored = 0
  private limited = 0
  private readonly budgets: TokenBuckets
  private readonly rejected: Record<string, number> = {}
  private pruneTimer?: ReturnType<typeof setInterval>
  private readonly validate = (_from: PeerId, message: PubSubMessage): PubSubVerdict => this.receive(message)
  private readonly onSubscriptionChange = (evt: CustomEvent<{ peerId: PeerId, subscriptions: Array<{ topic: string, subscribe: boolean }> }>): void => {
    // a neighbour that leaves the topic may still be reachable through others:
    // only its withdrawal or the ttl takes it out of the index
    if (evt.detail.subscriptions.some(s => s.topic === this.topic && s.subscribe)) {
      this.publisher.peerSubscribed()
      for (const wake of this.waiting) wake()
      this.waiting.clear()
    }
  }

  /** Lookups waiting for a first peer to ask (of the topic, or identified as serving the index query) */
  private readonly waiting = new Set<() => void>()
  private readonly onIdentify = (evt: CustomEvent<{ protocols?: string[] }>): void => {
    if (this.waiting.size === 0 || evt.detail?.protocols?.includes(CAPS_INDEX_PROTOCOL) !== true) return
    for (const wake of this.waiting) wake()
    this.waiting.clear()
  }

  constructor (init: GossipChannelInit) {
    this.init = init
    this.log = init.log
    this.topic = gossipTopic(init.domain)
    this.queryHold = init.opts.queryHold
    this.self = init.peerId.toString()
    this.index = new CapabilityIndex({
      maxAnnouncers: init.opts.maxAnnouncers,
      maxNames: init.opts.maxIndexedNames,
      maxTtl: init.opts.maxTtl,
      onChange: names => { init.onChange(names) }
    })
    this.budgets = new TokenBuckets(init.opts.maxSnapshotsPerMinute, 60_000, init.opts.maxAnnouncers)
    this.publisher = new GossipPublisher({ pubsub: init.pubsub, topic: this.topic, opts: init.opts, log: init.log, caps: init.caps, addrs: init.addrs })
    this.query = new IndexQuery({ messaging: init.messaging, index: this.index, topic: this.topic, opts: init.opts, log: init.log, caps: init.caps, timeout: init.requestTimeout })
  }

  async start (): Promise<void> {
    await this.query.start()
    const { pubsub } = this.init
    pubsub.topicValidators.set(this.topic, this.validate)
    pubsub.addEventListener('subscription-change', this.onSubscriptionChange)
    if (this.init.identified != null) this.init.events?.addEventListener('peer:identify', this.onIdentify as EventListener)
    pubsub.subscribe(this.topic)
    this.publisher.start()
    this.pruneTimer = setInterval(() => { this.index.prune() }, Math.max(1_000, Math.min(this.init.opts.maxTtl, this.init.opts.interval)))
    this.pruneTimer.unref?.()
    this.log('gossip on %s', this.topic)
  }

  async stop (): Promise<void> {
    clearInterval(this.pruneTimer)
    for (const wake of this.waiting) wake()
    this.waiting.clear()
    await this.query.stop()
    await this.publisher.stop()
    const { pubsub } = this.init
    pubsub.removeEventListener('subscription-change', this.onSubscriptionChange)
    this.init.events?.removeEventListener('peer:identify', this.onIdentify as EventListener)
    if (pubsub.topicValidators.get(this.topic) === this.validate) pubsub.topicValidators.delete(this.topic)
    try {
      pubsub.unsubscribe(this.topic)
    } catch (err: any) {
      // a stopped pubsub has no subscriptions left to drop
      this.log.trace('could not unsubscribe from %s: %s', this.topic, err?.message ?? err)
    }
    this.index.clear()
  }

  /** The announced set changed */
  changed (): void {
    this.publisher.changed()
  }

  announcers (capability: string): string[] {
    return this.index.peers(capability)
  }

  addresses (peer: string): string[] {
    return this.index.addresses(peer)
  }

  stats (): GossipStats {
    return {
      topic: this.topic,
      ...this.index.stats(),
      published: this.publisher.published,
      accepted: this.accepted,
      ignored: this.ignored,
      limited: this.limited,
      rejected: { ...this.rejected },
      queriesServed: this.query.served,
      answersRefused: this.query.refused
    }
  }

  async ask (peer: PeerId, capability: string, options?: AbortOptions): Promise<string[]> {
    return this.take(peer, await this.query.ask(peer, capability, options))
  }

  /** Take a verified index answer of `from` into the index (as gossip would have brought it); the candidates it names */
  private take (from: PeerId, answer: IndexAnswer): string[] {
    const now = Date.now()
    const out: string[] = []
    for (const { peer, snapshot, entry } of answer.entries) {
      const id = peer.toString()
      if (id === this.self) continue
      // a snapshot older than the one held leaves the index as it is; the announcer is a candidate either way
      if (this.index.apply(id, snapshot, now, entry) === 'stored') this.accepted++
      out.push(id)
    }
    const responder = from.toString()
    if (answer.self && responder !== this.self && !out.includes(responder)) out.push(responder)
    return out
  }

  /**
   * The candidates of a lookup of `capability` whose index has none: the
   * answers of up to `queryPeers` peers of the topic or, while none is
   * known, of connected peers that serve the index query (waiting up to
   * `queryWait` for a first one), as each arrives; a failed or refused
   * answer is logged and skipped
   */
  async * candidates (capability: string, signal: AbortSignal): AsyncGenerator<string[], void, undefined> {
    const { opts } = this.init
    if (opts.queryPeers === 0) return
    let peers = await this.askable()
    if (peers.length === 0 && opts.queryWait > 0) {
      await this.topicPeer(signal)
      peers = await this.askable()
    }
    if (peers.length === 0 || signal.aborted) return
    const out = pushable<string[]>({ objectMode: true })
    const asks = peers.slice(0, opts.queryPeers).map(async peer => {
      try {
        out.push(await this.ask(peer, capability, { signal }))
      } catch (err: any) {
        // refused answers were logged with their reason; a peer that does not speak the query (an older node) is skipped
        this.log.trace('index query of %s to %p failed: %s %s', capability, peer, err?.code, err?.message ?? err)
      }
    })
    void Promise.all(asks).finally(() => out.end())
    yield * out
  }

  /**
   * The peers a lookup asks: those of the topic or, while none is known,
   * the connected peers whose identify lists the index query's protocol. A
   * newcomer's bootstrap peer is one of the second long before its topic
   * subscription arrives (gossipsub sends it only after identify, over a
   * stream of its own): about 70 ms of a cold start. A peer of another
   * domain answers with entries signed for its own topic, which the
   * asker's checks refuse (check 4).
   */
  private async askable (): Promise<PeerId[]> {
    const subscribers = this.init.pubsub.getSubscribers(this.topic)
    if (subscribers.length > 0 || this.init.identified == null) return subscribers
    try {
      return (await this.init.identified.peers(CAPS_INDEX_PROTOCOL)).filter(p => !p.equals(this.init.peerId))
    } catch (err: any) {
      // a peer that left while its record was read: the topic's peers are awaited instead
      this.log('could not list the identified peers to ask: %s', err?.message ?? err)
      return []
    }
  }

  /** Wait for a first peer to ask (of the topic, or identified), at most `queryWait` ms or until `signal` aborts */
  private async topicPeer (signal: AbortSignal): Promise<void> {
    await new Promise<void>(resolve => {
      const done = (): void => {
        clearTimeout(timer)
        signal.removeEventListener('abort', done)
        this.waiting.delete(done)
        resolve()
      }
      const timer = setTimeout(done, this.init.opts.queryWait)
      signal.addEventListener('abort', done, { once: true })
      this.waiting.add(done)
    })
  }

  /** Check a message of the topic and, when accepted, store it */
  private receive (message: PubSubMessage): PubSubVerdict {
    if (message.type !== 'signed') {
      return this.reject('UNSIGNED', 'unsigned message')
    }
    const from = message.from.toString()
    if (from === this.self) {
      this.ignored++
      return 'ignore'
    }
    // before any parsing; ignored, not rejected: the peer that relayed it is not to blame
    if (!this.budgets.take(from)) {
      if (this.limited++ % 100 === 0) this.log('ignored snapshots of %s: more than %d a minute (%d so far)', from, this.init.opts.maxSnapshotsPerMinute, this.limited)
      return 'ignore'
    }
    let snapshot
    try {
      snapshot = decodeSnapshot(message.data, { maxBytes: this.init.opts.maxMessageBytes, maxCapabilities: this.init.opts.maxCapabilities })
    } catch (err: any) {
      return this.reject(err?.code ?? 'INVALID_SNAPSHOT', `from ${from}: ${err?.message ?? err}`)
    }
    const now = Date.now()
    if (snapshot.seq + Math.min(snapshot.ttl, this.init.opts.maxTtl) + this.init.opts.clockSkew < now) {
      this.ignored++
      this.log('ignored an expired snapshot of %s (seq %d, ttl %d): a replay or a slow path', from, snapshot.seq, snapshot.ttl)
      return 'ignore'
    }
    if (this.index.apply(from, snapshot, now, entryOf(message)) === 'stale') {
      this.ignored++
      this.log.trace('ignored snapshot seq %d of %s: not newer than the one held', snapshot.seq, from)
      return 'ignore'
    }
    this.accepted++
    this.log.trace('snapshot seq %d of %s: %d capabilities%s', snapshot.seq, from, snapshot.caps.length, snapshot.hello === true ? ' (hello)' : '')
    if (snapshot.hello === true) this.publisher.heardHello()
    return 'accept'
  }

  private reject (code: string, reason: string): PubSubVerdict {
    this.rejected[code] = (this.rejected[code] ?? 0) + 1
    this.log('rejected a snapshot on %s (%s): %s', this.topic, code, reason)
    return 'reject'
  }
}
