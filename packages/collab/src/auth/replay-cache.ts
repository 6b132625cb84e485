/**
 * The replay cache of request envelopes (`spec/collab-tasks.md`, section 2.5):
 * the `(from, nonce)` pairs of accepted envelopes, remembered until those
 * envelopes could no longer be accepted anyway.
 *
 * Bounded three ways: per sender (DID), per peer, and in total. Expiry is
 * amortised O(1): entries sit in buckets of one second of expiry time, and a
 * sweep drops whole buckets that lie in the past (never a scan of the live
 * entries). An evicted entry raises the *floor of its own sender* only.
 */
import { DEFAULT_CLOCK_SKEW } from './delegation.js'
import { DList, links } from './dlist.js'
import { positiveInteger } from '../options.js'
import type { Links } from './dlist.js'
import type { Did } from '@ioa/interconnect'

/** Width of an expiry bucket, in ms */
const BUCKET_MS = 1_000

/** Longest envelope validity (exp - iat) of version 1, in ms (ENVELOPE_LIMITS.maxTtl) */
const MAX_TTL = 600_000

export interface ReplayCacheInit {
  /**
   * Most (from, nonce) entries remembered in total
   *
   * @default 100_000
   */
  maxEntries?: number
  /**
   * Most entries of one sender (envelope `from`); beyond it the sender's
   * oldest entry is evicted and the sender's floor raised
   *
   * @default 10_000
   */
  maxEntriesPerSender?: number
  /**
   * Most entries taken by envelopes received from one peer; beyond it that
   * peer's envelopes are refused (`TOO_MANY_REQUESTS`) until some expire
   *
   * @default 20_000
   */
  maxEntriesPerPeer?: number
  /**
   * Most senders whose floor is remembered; beyond it the oldest floor is
   * folded into a node-wide floor (fail closed)
   *
   * @default 100_000
   */
  maxFloors?: number
  /**
   * Added to an envelope's `exp` to get the time its entry may be forgotten
   *
   * @default 30_000
   */
  clockSkew?: number
  /**
   * Longest envelope validity (exp - iat) accepted, in ms: how long a floor
   * must be kept
   *
   * @default 600_000
   */
  maxTtl?: number
}

/** What {@link ReplayCache.take} did */
export type ReplayOutcome =
  /** new: now remembered */
  | 'taken'
  /** already remembered, or issued at or before the sender's floor */
  | 'replay'
  /** the peer holds `maxEntriesPerPeer` entries: refused, nothing remembered */
  | 'peer-quota'

/** Counters of a {@link ReplayCache}, for tests and metrics */
export interface ReplayCacheStats {
  /** Entries held */
  entries: number
  /** Senders with entries */
  senders: number
  /** Peers with entries */
  peers: number
  /** Senders with a floor */
  floors: number
  /** The node-wide floor (`-Infinity` unless `maxFloors` overflowed) */
  globalFloor: number
  /** Entries taken */
  taken: number
  /** Envelopes refused as replays (remembered, or at or below a floor) */
  replays: number
  /** Envelopes refused because their peer was at its quota */
  peerQuotaRefusals: number
  /** Entries evicted because their sender was at its quota */
  senderEvictions: number
  /** Entries evicted because the cache was full */
  capacityEvictions: number
  /** Floors folded into the node-wide floor */
  floorOverflows: number
  /** Entries dropped because they expired */
  expired: number
  /** Work done by sweeps and evictions: entries, buckets and floors visited */
  visited: number
}

interface Entry {
  readonly key: string
  readonly from: Did
  readonly peer: string | undefined
  readonly iat: number
  readonly expires: number
  readonly bucket: number
  /** place in the cache's insertion order */
  readonly all: Links<Entry>
  /** place in its sender's insertion order */
  readonly mine: Links<Entry>
}

interface Floor {
  readonly from: Did
  /** Envelopes of the sender issued at or before this are refused */
  iat: number
  /** The floor may be forgotten after this time */
  until: number
  readonly order: Links<Floor>
}

const allOf = (e: Entry): Links<Entry> => e.all
const mineOf = (e: Entry): Links<Entry> => e.mine

/**
 * Remembers the (from, nonce) pairs of accepted envelopes until their
 * `exp` + clock skew. See the module comment and `spec/collab-tasks.md` 2.5.
 */
export class ReplayCache {
  readonly maxEntries: number
  readonly maxEntriesPerSender: number
  readonly maxEntriesPerPeer: number
  readonly maxFloors: number
  readonly clockSkew: number
  readonly maxTtl: number
  /** key -> entry */
  private readonly entries = new Map<string, Entry>()
  /** every entry, oldest first (evicted first when full) */
  private readonly order = new DList<Entry>(allOf)
  /** sender -> its entries, oldest first */
  private readonly senders = new Map<Did, DList<Entry>>()
  /** peer -> entries it holds */
  private readonly peers = new Map<string, number>()
  /** expiry bucket (floor(expires / 1 s)) -> entries */
  private readonly buckets = new Map<number, Set<Entry>>()
  /** every bucket up to this one has been swept */
  private sweptTo = -Infinity
  /** sender -> floor */
  private readonly floors = new Map<Did, Floor>()
  /** the floors in order of `until` (moved to the end when raised) */
  private readonly floorOrder = new DList<Floor>(f => f.order)
  private globalFloor: { iat: number, until: number } = { iat: -Infinity, until: -Infinity }
  private readonly counters = {
    taken: 0, replays: 0, peerQuotaRefusals: 0, senderEvictions: 0, capacityEvictions: 0, floorOverflows: 0, expired: 0, visited: 0
  }

  constructor (init: ReplayCacheInit = {}) {
    this.maxEntries = positiveInteger('maxEntries', init.maxEntries ?? 100_000)
    this.maxEntriesPerSender = positiveInteger('maxEntriesPerSender', init.maxEntriesPerSender ?? Math.min(10_000, this.maxEntries))
    this.maxEntriesPerPeer = positiveInteger('maxEntriesPerPeer', init.maxEntriesPerPeer ?? Math.min(20_000, this.maxEntries))
    this.maxFloors = positiveInteger('maxFloors', init.maxFloors ?? 100_000)
    this.clockSkew = init.clockSkew ?? DEFAULT_CLOCK_SKEW
    this.maxTtl = init.maxTtl ?? MAX_TTL
    if (!Number.isFinite(this.clockSkew) || this.clockSkew < 0) throw new RangeError('clockSkew must be >= 0')
    if (!Number.isFinite(this.maxTtl) || this.maxTtl <= 0) throw new RangeError('maxTtl must be > 0')
  }

  get size (): number {
    return this.entries.size
  }

  get stats (): ReplayCacheStats {
    return {
      entries: this.entries.size,
      senders: this.senders.size,
      peers: this.peers.size,
      floors: this.floors.size,
      globalFloor: this.globalFloor.iat,
      ...this.counters
    }
  }

  /** The floor of one sender at `now` (`-Infinity` when it has none) */
  floorOf (from: Did, now = Date.now()): number {
    const own = this.floors.get(from)
    const mine = own != null && own.until >= now ? own.iat : -Infinity
    const global = this.globalFloor.until >= now ? this.globalFloor.iat : -Infinity
    return Math.max(mine, global)
  }

  private static key (from: Did, nonce: string): string {
    return `${from}\n${nonce}`
  }

  /** Has this (from, nonce) been seen, or is it at or below the sender's floor? Changes nothing but expiry */
  has (from: Did, nonce: string, iat: number, now = Date.now()): boolean {
    this.sweep(now)
    const e = this.entries.get(ReplayCache.key(from, nonce))
    if (e != null && e.expires >= now) return true
    return iat <= this.floorOf(from, now)
  }

  /**
   * Remember (from, nonce) of an envelope that was accepted, unless already
   * remembered. `peer` is the peer it came from (its quota); without it only
   * the sender and total bounds apply.
   */
  take (from: Did, nonce: string, iat: number, exp: number, now = Date.now(), peer?: string): ReplayOutcome {
    if (this.has(from, nonce, iat, now)) {
      this.counters.replays++
      return 'replay'
    }
    const expires = exp + this.clockSkew
    // it could not be accepted again anyway: nothing to remember
    if (expires < now) return 'taken'
    if (peer != null && (this.peers.get(peer) ?? 0) >= this.maxEntriesPerPeer) {
      this.counters.peerQuotaRefusals++
      return 'peer-quota'
    }
    const own = this.senders.get(from)
    while (own?.first != null && own.size >= this.maxEntriesPerSender) {
      this.evict(own.first, now)
      this.counters.senderEvictions++
    }
    while (this.order.first != null && this.entries.size >= this.maxEntries) {
      this.evict(this.order.first, now)
      this.counters.capacityEvictions++
    }
    // an eviction may have raised this sender's floor above this envelope
    if (iat <= this.floorOf(from, now)) {
      this.counters.replays++
      return 'replay'
    }
    this.insert(from, nonce, iat, expires, peer)
    this.counters.taken++
    return 'taken'
  }

  /**
   * `take` as a boolean: `true` when (from, nonce) is new and now
   * remembered; `false` for a replay or a peer over its quota
   */
  check (from: Did, nonce: string, iat: number, exp: number, now = Date.now(), peer?: string): boolean {
    return this.take(from, nonce, iat, exp, now, peer) === 'taken'
  }

  /** Forget entries and floors whose envelopes can no longer be accepted */
  prune (now = Date.now()): void {
    this.sweep(now)
  }

  clear (): void {
    this.entries.clear()
    this.order.clear()
    this.senders.clear()
    this.peers.clear()
    this.buckets.clear()
    this.floors.clear()
    this.floorOrder.clear()
    this.sweptTo = -Infinity
    this.globalFloor = { iat: -Infinity, until: -Infinity }
  }

  private insert (from: Did, nonce: string, iat: number, expires: number, peer: string | undefined): void {
    const key = ReplayCache.key(from, nonce)
    const bucket = Math.floor(expires / BUCKET_MS)
    const stale = this.entries.get(key)
    if (stale != null) this.remove(stale)
    const e: Entry = { key, from, peer, iat, expires, bucket, all: links(), mine: links() }
    this.entries.set(key, e)
    this.order.push(e)
    let own = this.senders.get(from)
    if (own == null) {
      own = new DList(mineOf)
      this.senders.set(from, own)
    }
    own.push(e)
    if (peer != null) this.peers.set(peer, (this.peers.get(peer) ?? 0) + 1)
    let b = this.buckets.get(bucket)
    if (b == null) {
      b = new Set()
      this.buckets.set(bucket, b)
    }
    b.add(e)
    // the clock went back: sweep this bucket again when its time comes
    if (bucket <= this.sweptTo) this.sweptTo = bucket - 1
  }

  private remove (e: Entry): void {
    this.counters.visited++
    this.entries.delete(e.key)
    this.order.remove(e)
    const own = this.senders.get(e.from)
    if (own != null) {
      own.remove(e)
      if (own.size === 0) this.senders.delete(e.from)
    }
    if (e.peer != null) {
      const n = (this.peers.get(e.peer) ?? 1) - 1
      if (n <= 0) this.peers.delete(e.peer)
      else this.peers.set(e.peer, n)
    }
    const b = this.buckets.get(e.bucket)
    if (b != null) {
      b.delete(e)
      if (b.size === 0) this.buckets.delete(e.bucket)
    }
  }

  /** Drop a live entry and raise its sender's floor to its `iat` */
  private evict (e: Entry, now: number): void {
    this.remove(e)
    // expired but not yet swept (its bucket is the current one): no floor needed
    if (e.expires < now) {
      this.counters.expired++
      return
    }
    // every envelope issued at or before the floor is dead by this time
    const until = now + this.maxTtl + 2 * this.clockSkew
    let floor = this.floors.get(e.from)
    if (floor != null) {
      this.floorOrder.remove(floor)
      floor.iat = Math.max(floor.iat, e.iat)
      floor.until = Math.max(floor.until, until)
    } else {
      floor = { from: e.from, iat: e.iat, until, order: links() }
      this.floors.set(e.from, floor)
    }
    this.floorOrder.push(floor)
    while (this.floorOrder.first != null && this.floors.size > this.maxFloors) {
      const f = this.floorOrder.first
      this.floorOrder.remove(f)
      this.floors.delete(f.from)
      this.counters.visited++
      this.counters.floorOverflows++
      this.globalFloor = { iat: Math.max(this.globalFloor.iat, f.iat), until: Math.max(this.globalFloor.until, f.until) }
    }
  }

  /** Drop the buckets that lie wholly in the past, and the floors that ran out */
  private sweep (now: number): void {
    const upTo = Math.floor(now / BUCKET_MS) - 1
    if (upTo > this.sweptTo) {
      if (upTo - this.sweptTo > this.buckets.size) {
        // a long gap: visit the buckets held rather than every second of it
        for (const [bucket, b] of this.buckets) {
          this.counters.visited++
          if (bucket <= upTo) this.dropBucket(bucket, b)
        }
      } else {
        for (let bucket = this.sweptTo + 1; bucket <= upTo; bucket++) {
          this.counters.visited++
          const b = this.buckets.get(bucket)
          if (b != null) this.dropBucket(bucket, b)
        }
      }
      this.sweptTo = upTo
    }
    for (let f = this.floorOrder.first; f != null && f.until < now; f = this.floorOrder.first) {
      this.counters.visited++
      this.floorOrder.remove(f)
      this.floors.delete(f.from)
    }
    if (this.globalFloor.until < now) this.globalFloor = { iat: -Infinity, until: -Infinity }
  }

  /** Forget every entry of an expired bucket */
  private dropBucket (bucket: number, b: Set<Entry>): void {
    this.counters.expired += b.size
    for (const e of b) this.remove(e)
    this.buckets.delete(bucket)
  }
}
