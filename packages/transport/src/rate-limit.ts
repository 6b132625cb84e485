/**
 * Token buckets per key (a caller peer, an agent): each key may make
 * `requests` calls per `per` ms on average, in bursts of up to `requests`.
 * A call may cost more than one token (bytes to decode, for example).
 * At most `maxKeys` keys are tracked; the least recently seen are forgotten.
 * A bucket that has filled up again is the same as no bucket, so full
 * buckets are dropped from time to time: the table only holds keys that
 * were active within about `per` ms.
 *
 * Hand-written on purpose: the `RateLimiter` of `@libp2p/utils` (a port of
 * `rate-limiter-flexible`) counts fixed windows and keeps a timer per key to
 * expire it, with no bound on the number of keys; this one is a plain Map of
 * two numbers per key, refilled lazily on `take`, with a bounded key count
 * and no timers, which is what 10k remote peers need.
 */
export class TokenBuckets {
  private readonly buckets = new Map<string, { tokens: number, at: number }>()
  private readonly requests: number
  private readonly per: number
  private readonly maxKeys: number
  private nextPrune = 0

  constructor (requests: number, per: number, maxKeys = 10_000) {
    this.requests = requests
    this.per = per
    this.maxKeys = maxKeys
  }

  /** Take `cost` tokens (default 1) for `key`; `false` when its bucket holds fewer */
  take (key: string, now = Date.now(), cost = 1): boolean {
    this.prune(now)
    const b = this.buckets.get(key)
    let tokens = this.requests
    if (b != null) {
      tokens = this.refill(b, now)
      // re-insert: the map's order is least recently seen first
      this.buckets.delete(key)
    }
    const allowed = tokens >= cost
    this.buckets.set(key, { tokens: allowed ? tokens - cost : tokens, at: now })
    while (this.buckets.size > this.maxKeys) {
      this.buckets.delete(this.buckets.keys().next().value as string)
    }
    return allowed
  }

  /** Keys tracked (buckets not yet full again) */
  size (now = Date.now()): number {
    this.nextPrune = 0
    this.prune(now)
    return this.buckets.size
  }

  private refill (b: { tokens: number, at: number }, now: number): number {
    return Math.min(this.requests, b.tokens + (now - b.at) * this.requests / this.per)
  }

  /** Drop the buckets that are full again, at most once per `per` ms */
  private prune (now: number): void {
    if (now < this.nextPrune) {
      return
    }
    this.nextPrune = now + this.per
    for (const [key, b] of this.buckets) {
      if (this.refill(b, now) >= this.requests) {
        this.buckets.delete(key)
      }
    }
  }
}
