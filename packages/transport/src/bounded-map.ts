/**
 * A map with a hard bound: at most `maxEntries` entries and, when a weight
 * function is given, at most `maxWeight` in total. Reads refresh an entry;
 * the least recently used entries are evicted first. O(1) per operation
 * (a JavaScript `Map` keeps insertion order, so re-inserting moves an entry
 * to the most recent end).
 *
 * Kept rather than taken from a library: `@libp2p/utils` has no LRU (its
 * `TrackedMap` only counts entries for metrics), and `hashlru` (in the tree
 * through kad-dht) is a two-generation approximation that holds up to twice
 * its size and cannot weigh entries: the caches here must stay within a byte
 * bound (spec `interconnect.md` 10) and report evictions.
 */
export interface BoundedMapInit<K, V> {
  /** Most entries held */
  maxEntries: number
  /** Most total weight held (with `weigh`) @default Infinity */
  maxWeight?: number
  /** Weight of a value (for example its size in bytes) @default 1 per entry */
  weigh?: (value: V) => number
  /** Called for every entry dropped to make room (not for `delete` or `clear`) */
  onEvict?: (key: K, value: V) => void
}

export class BoundedMap<K, V> {
  private readonly map = new Map<K, { value: V, weight: number }>()
  private readonly maxEntries: number
  private readonly maxWeight: number
  private readonly weigh?: (value: V) => number
  private readonly onEvict?: (key: K, value: V) => void
  private total = 0
  /** Entries evicted to make room since creation */
  evictions = 0

  constructor (init: BoundedMapInit<K, V>) {
    if (!Number.isInteger(init.maxEntries) || init.maxEntries < 1) {
      throw new RangeError(`maxEntries must be a positive integer, not ${init.maxEntries}`)
    }
    if (init.maxWeight != null && !(init.maxWeight > 0)) {
      throw new RangeError(`maxWeight must be positive, not ${init.maxWeight}`)
    }
    this.maxEntries = init.maxEntries
    this.maxWeight = init.maxWeight ?? Infinity
    this.weigh = init.weigh
    this.onEvict = init.onEvict
  }

  get size (): number {
    return this.map.size
  }

  /** Total weight held */
  get weight (): number {
    return this.total
  }

  has (key: K): boolean {
    return this.map.has(key)
  }

  /** The value, marking the entry as recently used */
  get (key: K): V | undefined {
    const e = this.map.get(key)
    if (e == null) return undefined
    this.map.delete(key)
    this.map.set(key, e)
    return e.value
  }

  /** The value, without touching its recency */
  peek (key: K): V | undefined {
    return this.map.get(key)?.value
  }

  /**
   * Store a value as the most recently used, evicting the least recently
   * used entries beyond the bounds. A value heavier than `maxWeight` alone is
   * not stored (and any previous value of the key is dropped): returns false.
   */
  set (key: K, value: V): boolean {
    this.delete(key)
    const weight = this.weigh?.(value) ?? 1
    if (weight > this.maxWeight) return false
    this.map.set(key, { value, weight })
    this.total += weight
    while (this.map.size > this.maxEntries || this.total > this.maxWeight) {
      const [oldKey, old] = this.map.entries().next().value as [K, { value: V, weight: number }]
      this.map.delete(oldKey)
      this.total -= old.weight
      this.evictions++
      this.onEvict?.(oldKey, old.value)
    }
    return true
  }

  delete (key: K): boolean {
    const e = this.map.get(key)
    if (e == null) return false
    this.map.delete(key)
    this.total -= e.weight
    return true
  }

  clear (): void {
    this.map.clear()
    this.total = 0
  }

  * keys (): IterableIterator<K> {
    yield * this.map.keys()
  }

  * values (): IterableIterator<V> {
    for (const e of this.map.values()) yield e.value
  }

  * entries (): IterableIterator<[K, V]> {
    for (const [k, e] of this.map) yield [k, e.value]
  }
}
