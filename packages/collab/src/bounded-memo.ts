/**
 * A memo of at most `max` entries, the oldest inserted dropped first. For
 * caches of pure functions (a key always maps to the same value), where
 * which entry goes first only changes what is computed again, never a
 * decision. Not for the replay cache, whose insertion-order eviction and
 * floors are a security rule of their own (auth/replay-cache.ts).
 *
 * Kept rather than taken from a library: `@libp2p/utils` has no LRU and is
 * not a dependency of this package; `hashlru` holds up to twice its size.
 */
export class BoundedMemo<K, V> {
  private readonly map = new Map<K, V>()

  constructor (readonly max: number) {
    if (!Number.isSafeInteger(max) || max < 1) throw new RangeError(`max must be a positive integer, not ${max}`)
  }

  get size (): number {
    return this.map.size
  }

  get (key: K): V | undefined {
    return this.map.get(key)
  }

  has (key: K): boolean {
    return this.map.has(key)
  }

  set (key: K, value: V): void {
    if (!this.map.has(key) && this.map.size >= this.max) {
      this.map.delete(this.map.keys().next().value as K)
    }
    this.map.set(key, value)
  }
}

/** A count option: `value`, or `fallback` when not given; a positive safe integer or a RangeError naming `name` */
export function boundedCount (value: number | undefined, fallback: number, name: string): number {
  const n = value ?? fallback
  if (!Number.isSafeInteger(n) || n < 1) throw new RangeError(`${name} must be a positive integer, not ${String(value)}`)
  return n
}
