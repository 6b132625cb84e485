/**
 * Token buckets per key (a caller peer, an agent): each key may make
 * `requests` calls per `per` ms on average, in bursts of up to `requests`.
 * At most `maxKeys` keys are tracked; the least recently seen are forgotten.
 */
export class TokenBuckets {
  private readonly buckets = new Map<string, { tokens: number, at: number }>()
  private readonly requests: number
  private readonly per: number
  private readonly maxKeys: number

  constructor (requests: number, per: number, maxKeys = 10_000) {
    this.requests = requests
    this.per = per
    this.maxKeys = maxKeys
  }

  /** Take one token for `key`; `false` when its bucket is empty */
  take (key: string, now = Date.now()): boolean {
    const b = this.buckets.get(key)
    let tokens = this.requests
    if (b != null) {
      tokens = Math.min(this.requests, b.tokens + (now - b.at) * this.requests / this.per)
      // re-insert: the map's order is least recently seen first
      this.buckets.delete(key)
    }
    const allowed = tokens >= 1
    this.buckets.set(key, { tokens: allowed ? tokens - 1 : tokens, at: now })
    while (this.buckets.size > this.maxKeys) {
      this.buckets.delete(this.buckets.keys().next().value as string)
    }
    return allowed
  }
}
