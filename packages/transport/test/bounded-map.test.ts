/**
 * The bounded map (`@ioa/transport/internal`) behind the interconnect's caches.
 */
import { describe, expect, it } from 'vitest'
import { BoundedMap } from '../src/internal.js'

describe('BoundedMap', () => {
  it('holds at most maxEntries under a flood, dropping the least recently used', () => {
    const evicted: number[] = []
    const m = new BoundedMap<number, string>({ maxEntries: 100, onEvict: (k) => evicted.push(k) })
    for (let i = 0; i < 10_000; i++) {
      m.set(i, `v${i}`)
      expect(m.size).toBeLessThanOrEqual(100)
    }
    expect(m.size).toBe(100)
    expect(m.evictions).toBe(9_900)
    expect(evicted.slice(0, 3)).toEqual([0, 1, 2])
    expect([...m.keys()][0]).toBe(9_900)
  })

  it('a read keeps an entry', () => {
    const m = new BoundedMap<string, number>({ maxEntries: 2 })
    m.set('a', 1)
    m.set('b', 2)
    expect(m.get('a')).toBe(1)
    m.set('c', 3)
    expect([...m.keys()].sort()).toEqual(['a', 'c'])
    // peek does not
    m.peek('a')
    m.set('d', 4)
    expect([...m.keys()].sort()).toEqual(['c', 'd'])
  })

  it('bounds the total weight and refuses a value heavier than the bound', () => {
    const m = new BoundedMap<string, string>({ maxEntries: 1_000, maxWeight: 10, weigh: v => v.length })
    for (let i = 0; i < 50; i++) m.set(`k${i}`, 'xxx')
    expect(m.weight).toBeLessThanOrEqual(10)
    expect(m.size).toBe(3)
    m.set('k49', 'y')
    expect(m.weight).toBe(7)
    expect(m.set('huge', 'x'.repeat(11))).toBe(false)
    expect(m.has('huge')).toBe(false)
    // replacing a key by a value too heavy drops the old value too
    expect(m.set('k49', 'x'.repeat(11))).toBe(false)
    expect(m.has('k49')).toBe(false)
    m.delete('k48')
    m.clear()
    expect(m.size).toBe(0)
    expect(m.weight).toBe(0)
  })

  it('refuses impossible bounds', () => {
    expect(() => new BoundedMap({ maxEntries: 0 })).toThrow(RangeError)
    expect(() => new BoundedMap({ maxEntries: 1.5 })).toThrow(RangeError)
    expect(() => new BoundedMap({ maxEntries: 1, maxWeight: 0 })).toThrow(RangeError)
  })
})
