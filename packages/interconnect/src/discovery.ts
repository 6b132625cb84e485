/**
 * Discovery by capability (spec `interconnect.md` 7): hosted agents first,
 * then fresh cached results, else a walk of the capability's DHT record whose
 * providers' cards are fetched (a few at once), verified, ranked and streamed
 * as they come. Every card a provider serves also fills the route cache, so
 * that routing to a discovered agent needs no second walk.
 */
import { DialFailedError, retryFacts } from '@ioa/transport'
import { peerIdFromString } from '@libp2p/peer-id'
import { Queue } from '@libp2p/utils'
import { multiaddr } from '@multiformats/multiaddr'
import { anySignal } from 'any-signal'
import { pushable } from 'it-pushable'
import { assertCapability, capabilityCid } from './capability.js'
import { matchQuery } from './ranking.js'
import type { InterconnectCaches } from './caches.js'
import type { SignedCard } from './card.js'
import type { CardProtocol } from './card-protocol.js'
import type { InterconnectComponents } from './components.js'
import type { Directory } from './directory.js'
import type { HistoryBook } from './history.js'
import type { Defaults } from './options.js'
import type { DiscoveryQuery, Ranker } from './ranking.js'
import type { DiscoveredAgent, DiscoverOptions, DiscoverWait } from './types.js'
import type { Logger, PeerId, PeerInfo } from '@libp2p/interface'

/** Default time a lookup may take, in ms */
export const LOOKUP_TIMEOUT = 10_000

/** Pause before the second card fetch from one provider, ms; twice as long before each later one */
const FETCH_RETRY_PAUSE = 100

/**
 * Whether a failed card fetch may pass when asked again: the exchange broke
 * before an answer (it timed out, the stream was reset), or the dial ran out
 * of time, as a loaded peer's do. A refusal, a malformed answer or a dial
 * that failed otherwise (refused: a peer that is gone; no address) would
 * fail the same way again.
 */
function fetchMayPassAgain (err: unknown): boolean {
  if (retryFacts(err, { reader: 'interconnect' }).reached === 'maybe') return true
  return (err as { code?: unknown } | null)?.code === DialFailedError.code && timedOut((err as Error).cause)
}

/**
 * A dial that ran out of time rather than being refused: libp2p's
 * `TimeoutError`, the reason of an `AbortSignal.timeout`, or the abort of a
 * dial this one joined (libp2p shares one dial to a peer between callers,
 * and the fetch's own signal had not fired, or messaging would have said
 * so), alone or for every address tried
 */
function timedOut (cause: unknown): boolean {
  if (cause instanceof AggregateError) return cause.errors.length > 0 && cause.errors.every(timedOut)
  const { name, message } = (cause ?? {}) as { name?: unknown, message?: unknown }
  return name === 'TimeoutError' || name === 'AbortError' || (typeof message === 'string' && /\btime(d)? ?out\b/i.test(message))
}

/** How a lookup's walk ended, for the decision to cache its results */
interface WalkEnd {
  /** the lookup's deadline (or the caller's abort) came before the walk and its fetches ended */
  cut: boolean
  /** providers skipped after a fetch that broke before an answer, on every attempt */
  lost: number
}

/** Bounds of `DiscoverOptions.wait` and the pauses between its lookups, ms */
const WAIT_MAX_AGENTS = 1_000
const WAIT_MAX_TIMEOUT = 600_000
const WAIT_FIRST_PAUSE = 100
const WAIT_MAX_PAUSE = 2_000

function checkWait (wait: DiscoverWait): void {
  if (wait == null || typeof wait !== 'object') throw new RangeError('wait must be { atLeast, timeout }')
  if (!Number.isInteger(wait.atLeast) || wait.atLeast < 1 || wait.atLeast > WAIT_MAX_AGENTS) throw new RangeError(`wait.atLeast must be an integer 1-${WAIT_MAX_AGENTS}`)
  if (!Number.isFinite(wait.timeout) || wait.timeout <= 0 || wait.timeout > WAIT_MAX_TIMEOUT) throw new RangeError(`wait.timeout must be 1-${WAIT_MAX_TIMEOUT} ms`)
}

/** Wait `ms`, or until `signal` aborts (then throw its reason) */
async function sleep (ms: number, signal?: AbortSignal): Promise<void> {
  signal?.throwIfAborted()
  await new Promise<void>((resolve, reject) => {
    const onAbort = (): void => { clearTimeout(timer); reject(signal?.reason) }
    const timer = setTimeout(() => { signal?.removeEventListener('abort', onAbort); resolve() }, Math.max(0, ms))
    signal?.addEventListener('abort', onAbort, { once: true })
  })
}

/**
 * Keep the addresses a DHT provider record carries, so the card fetch can dial
 * the provider; a failure only costs that dial its shortcut
 */
export async function rememberAddresses (peerStore: InterconnectComponents['peerStore'], provider: PeerInfo, log: Logger): Promise<void> {
  if (provider.multiaddrs.length === 0) return
  try {
    await peerStore.merge(provider.id, { multiaddrs: provider.multiaddrs })
  } catch (err: any) {
    log.trace('could not keep the addresses of provider %p: %s', provider.id, err?.message ?? err)
  }
}

export interface DiscoveryInit {
  components: Pick<InterconnectComponents, 'peerId' | 'contentRouting' | 'peerStore' | 'lookups'>
  directory: Directory
  cards: CardProtocol
  caches: InterconnectCaches
  history: HistoryBook
  ranker: Ranker
  opts: Defaults
  log: Logger
  /** The gossip index: peers that announced a capability (spec section 12.5) */
  gossip?: {
    announcers(capability: string): string[]
    addresses(peer: string): string[]
    /** The index query's candidates, for a lookup whose index has none (section 12.6) */
    candidates?(capability: string, signal: AbortSignal): AsyncIterable<string[]>
    /** Longest wait of the DHT walk for the index query's candidates to be fetched, ms */
    queryHold?: number
  }
}

export class Discovery {
  private readonly init: DiscoveryInit
  private readonly log: Logger

  constructor (init: DiscoveryInit) {
    this.init = init
    this.log = init.log
  }

  private rank (c: Omit<DiscoveredAgent, 'score' | 'history'>, query: DiscoveryQuery, now: number): DiscoveredAgent {
    const history = c.local ? undefined : this.init.history.get(c.card.id)
    const candidate = history != null ? { ...c, history } : c
    return { ...candidate, score: this.init.ranker.score(candidate, query, now) }
  }

  async * discover (query: DiscoveryQuery, options: DiscoverOptions = {}): AsyncGenerator<DiscoveredAgent, void, undefined> {
    yield * this.lookup(query, options)
  }

  /** `discover`, telling `onIndexDone` once the gossip channel's candidates (index and index query) are all fetched */
  private async * lookup (query: DiscoveryQuery, options: DiscoverOptions, onIndexDone?: () => void): AsyncGenerator<DiscoveredAgent, void, undefined> {
    assertCapability(query.capability)
    const { opts, caches } = this.init
    const limit = options.limit ?? Infinity
    const seen = new Set<string>()
    let count = 0
    const now = Date.now()
    const self = this.init.components.peerId.toString()

    for (const agent of this.init.directory.hosted.values()) {
      const skills = matchQuery(agent.card.card, query)
      if (skills.length === 0) continue
      seen.add(agent.did)
      yield this.rank({ card: agent.card.card, signed: agent.card, skills, peer: self, alive: true, local: true, source: 'local', latency: 0 }, query, now)
      if (++count >= limit) return
    }

    const cacheKey = query.capability
    let cached = caches.lookups.get(cacheKey)
    if (cached != null && now - cached.at >= opts.cacheTtl) {
      caches.lookups.delete(cacheKey)
      cached = undefined
    }
    if (options.cache !== false && cached != null && now - cached.at < opts.cacheTtl) {
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

    // the lookup ends on the caller's abort, its timeout, or when the caller stops reading;
    // meanwhile the node's first DHT self-query waits (spec/transport.md 1, joining)
    const running = this.init.components.lookups?.started()
    const stopped = new AbortController()
    const signal = anySignal([stopped.signal, options.signal, AbortSignal.timeout(options.timeout ?? LOOKUP_TIMEOUT)])
    const out = pushable<DiscoveredAgent>({ objectMode: true })
    const collected: DiscoveredAgent[] = []
    const end: WalkEnd = { cut: false, lost: 0 }

    void this.walk(query, signal, out, collected, options, end, onIndexDone)
      .catch((err: any) => { this.log.error('lookup of %s failed: %s', query.capability, err?.message ?? err) })
      .finally(() => { out.end() })

    let complete = false
    let found = 0
    try {
      for await (const r of out) {
        if (seen.has(r.card.id)) continue
        seen.add(r.card.id)
        found++
        yield r
        if (++count >= limit) return
      }
      // a lookup with a channel turned off saw only part of the network, and
      // one cut short by its deadline, or that lost a provider to a fetch that
      // broke, is not the whole answer: neither is cached (the next lookup walks again)
      complete = !end.cut && end.lost === 0 && options.dht !== false && options.gossip !== false
      if (end.cut || end.lost > 0) this.log('lookup of %s was cut short (%s): its %d result(s) are not cached', query.capability, end.cut ? 'deadline' : `${end.lost} provider(s) did not answer`, collected.length)
      if (found === 0) this.log('lookup of %s found no agents%s', query.capability, signal.aborted ? ' before it timed out' : '')
    } finally {
      running?.()
      stopped.abort()
      signal.clear()
      if (complete && collected.length > 0) {
        caches.trim(collected)
        if (!caches.lookups.set(cacheKey, { at: Date.now(), results: collected })) {
          this.log('results of the lookup of %s are larger than the cache (%d bytes): not cached', cacheKey, opts.maxCacheBytes)
        }
      }
    }
  }

  /**
   * Fetch the cards of the capability's gossip announcers (known at once)
   * and, beside them, walk its DHT record and fetch what the other
   * providers serve
   */
  private async walk (query: DiscoveryQuery, signal: AbortSignal, out: { push(r: DiscoveredAgent): unknown }, collected: DiscoveredAgent[], options: DiscoverOptions, end: WalkEnd, onIndexDone?: () => void): Promise<void> {
    const { components, opts } = this.init
    const self = components.peerId.toString()
    const cid = await capabilityCid(query.capability)
    const fetches = new Queue<void>({ concurrency: opts.fetchConcurrency })
    const fetched = new Set<string>()
    const fetch = async (provider: PeerId, source: 'gossip' | 'dht'): Promise<void> => {
      const id = provider.toString()
      for (let attempt = 1; ; attempt++) {
        const started = performance.now()
        try {
          const cards = await this.init.cards.fetchCards(provider, { prefix: query.capability, limit: opts.maxCardsPerProvider }, { signal })
          this.take(query, id, source, cards, performance.now() - started, out, collected)
          return
        } catch (err: any) {
          const again = fetchMayPassAgain(err)
          // a provider that did not answer in time (a loaded peer) is asked again, within the lookup's time
          if (again && attempt < opts.fetchAttempts && !signal.aborted) {
            this.log('lookup of %s asks provider %s again (attempt %d of %d failed: %s)', query.capability, id, attempt, opts.fetchAttempts, err?.message ?? err)
            try {
              await sleep(FETCH_RETRY_PAUSE * 2 ** (attempt - 1), signal)
              continue
            } catch {
              // the lookup's deadline came during the pause: the provider is lost to it
            }
          }
          if (again || signal.aborted) end.lost++
          // unreachable, misbehaving or silent provider: skip it
          this.log('lookup of %s skips provider %s after %d attempt(s): %s %s (cause %s)', query.capability, id, attempt, err?.code, err?.message ?? err, err?.cause?.name)
          return
        }
      }
    }
    const gossipFetches: Array<Promise<void>> = []
    const enqueue = async (peer: PeerId, source: 'gossip' | 'dht'): Promise<void> => {
      await fetches.onSizeLessThan(opts.fetchConcurrency)
      // `fetch` never rejects
      const job = fetches.add(async () => { await fetch(peer, source) })
      if (source === 'gossip') gossipFetches.push(job)
    }
    // gossip announcers are known at once: they are queued first, and the
    // DHT walk runs beside them (each peer is fetched once, by either)
    const gossip = this.init.gossip
    const fromIndex = async (ids: Iterable<string>): Promise<number> => {
      let queued = 0
      for (const id of ids) {
        if (id === self || fetched.has(id) || gossip == null) continue
        fetched.add(id)
        const peer = peerIdFromString(id)
        // the snapshot's addresses spare the fetch a DHT walk for the peer
        const addrs = gossip.addresses(id)
        if (addrs.length > 0) await rememberAddresses(components.peerStore, { id: peer, multiaddrs: addrs.map(a => multiaddr(a)) }, this.log)
        await enqueue(peer, 'gossip')
        queued++
      }
      return queued
    }
    const useGossip = options.gossip !== false && gossip != null
    const indexed = useGossip ? gossip.announcers(query.capability).filter(id => id !== self) : []
    // an index without an announcer (a newcomer's): ask the peers of the topic (section 12.6),
    // and let the DHT walk wait for their candidates (not for the index's: it runs beside those)
    const asking = useGossip && indexed.length === 0 && gossip.candidates != null
    let releaseDht = (): void => {}
    const dhtHeld = new Promise<void>(resolve => { releaseDht = resolve })
    const fromGossip = (async () => {
      if (!useGossip) return
      await fromIndex(indexed)
      if (asking) {
        for await (const ids of gossip.candidates?.(query.capability, signal) ?? []) {
          const n = await fromIndex(ids)
          this.log('lookup of %s: the index query named %d candidate(s), %d new', query.capability, ids.length, n)
        }
      }
    })().catch((err: any) => {
      // the DHT's providers are still fetched
      this.log.error('lookup of %s could not queue its gossip announcers: %s', query.capability, err?.message ?? err)
    }).then(async () => {
      await Promise.all(gossipFetches)
      releaseDht()
      onIndexDone?.()
    })
    if (options.dht !== false && asking) await this.hold(dhtHeld, gossip?.queryHold ?? 0, signal)
    if (options.dht !== false && !signal.aborted) {
      try {
        for await (const provider of components.contentRouting.findProviders(cid, { signal })) {
          const id = provider.id.toString()
          if (id === self || fetched.has(id)) continue
          fetched.add(id)
          await rememberAddresses(components.peerStore, provider, this.log)
          await enqueue(provider.id, 'dht')
        }
      } catch (err: any) {
        // the walk was aborted or ran out of peers: keep what was found
        this.log.trace('walk for %s ended: %s', query.capability, err?.message ?? err)
      }
    }
    await fromGossip
    await fetches.onIdle()
    end.cut = signal.aborted
    if (this.log.enabled) this.log('lookup of %s: the walk found %d provider(s) (%s)%s', query.capability, fetched.size, [...fetched].join(', '), end.cut ? ', cut short' : '')
  }

  /** Wait for `released`, at most `ms` or until `signal` aborts */
  private async hold (released: Promise<void>, ms: number, signal: AbortSignal): Promise<void> {
    if (ms <= 0 || signal.aborted) return
    let done = (): void => {}
    const timeout = new Promise<void>(resolve => { done = resolve })
    const timer = setTimeout(done, ms)
    signal.addEventListener('abort', done, { once: true })
    try {
      await Promise.race([released, timeout])
    } finally {
      clearTimeout(timer)
      signal.removeEventListener('abort', done)
    }
  }

  /** Verify-time work on the cards one provider served: route cache, lookup cache, results */
  private take (query: DiscoveryQuery, id: string, source: 'gossip' | 'dht', cards: SignedCard[], latency: number, out: { push(r: DiscoveredAgent): unknown }, collected: DiscoveredAgent[]): void {
    const { caches } = this.init
    const at = Date.now()
    for (const signed of cards) {
      const all = matchQuery(signed.card, { capability: query.capability })
      if (all.length === 0) continue
      // a verified card from this provider is a route to its agent
      caches.addRoute(signed, id, at)
      const result = this.rank({ card: signed.card, signed, skills: all, peer: id, latency, alive: true, local: false, source }, { capability: query.capability }, at)
      caches.collect(collected, result)
      const skills = matchQuery(signed.card, query)
      if (skills.length > 0) out.push(this.rank({ ...result, skills }, query, at))
    }
  }

  /**
   * Every agent a lookup finds, best first. With `limit` or `wait.atLeast`,
   * a lookup that holds that many once the gossip channel's candidates are
   * all fetched ends there instead of waiting for the DHT walk (the first
   * verified cards win: a newcomer's answer in one round trip to its
   * bootstrap peer); otherwise, or while fewer are found, the walk runs on.
   */
  async discoverAll (query: DiscoveryQuery, options: DiscoverOptions = {}): Promise<DiscoveredAgent[]> {
    const { wait, ...once } = options
    const found = new Map<string, DiscoveredAgent>()
    const need = wait?.atLeast ?? options.limit
    const lookup = async (o: DiscoverOptions): Promise<void> => {
      const enough = new AbortController()
      let indexDone = false
      const check = (): void => {
        if (need != null && indexDone && found.size >= need && !enough.signal.aborted) {
          this.log('lookup of %s ends with %d agent(s) once the gossip candidates are fetched: the DHT walk is not waited for', query.capability, found.size)
          enough.abort()
        }
      }
      const signal = anySignal([enough.signal, o.signal])
      try {
        for await (const r of this.lookup(query, { ...o, limit: undefined, signal }, () => { indexDone = true; check() })) {
          found.set(r.card.id, r)
          check()
          if (enough.signal.aborted) break
        }
      } finally {
        signal.clear()
      }
    }
    if (wait == null) {
      await lookup(once)
    } else {
      checkWait(wait)
      const end = Date.now() + wait.timeout
      await lookup({ ...once, timeout: Math.min(once.timeout ?? LOOKUP_TIMEOUT, wait.timeout) })
      let pause = WAIT_FIRST_PAUSE
      while (found.size < wait.atLeast && Date.now() < end) {
        await sleep(Math.min(pause, end - Date.now()), options.signal)
        pause = Math.min(2 * pause, WAIT_MAX_PAUSE)
        const left = end - Date.now()
        if (left <= 0) break
        await lookup({ ...once, cache: false, timeout: Math.min(once.timeout ?? LOOKUP_TIMEOUT, left) })
      }
      this.log('waited for %d agent(s) of %s: %d found', wait.atLeast, query.capability, found.size)
    }
    const results = [...found.values()].sort((a, b) => b.score - a.score)
    return options.limit != null ? results.slice(0, options.limit) : results
  }
}
