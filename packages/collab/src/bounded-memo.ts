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
import { positiveInteger } from './options.js'

export class BoundedMemo<K, V> {
  private readonly map = new Map<K, V>()

  constructor (readonly max: number) {
    positiveInteger('max', max)
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
