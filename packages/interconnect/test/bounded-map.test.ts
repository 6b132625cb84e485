/**
 * The bounded map behind the interconnect's caches, and the per-agent record
 * book the default ranker reads.
 */
import { describe, expect, it } from 'vitest'
import { BoundedMap } from '../src/index.js'
import { HistoryBook, MAX_COUNT } from '../src/history.js'

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

describe('HistoryBook', () => {
  it('counts outcomes, smooths round trips and caps the counts', () => {
    const book = new HistoryBook(10)
    book.record('did:key:a', { ok: true, rtt: 10 })
    book.record('did:key:a', { ok: true, rtt: 20 })
    book.record('did:key:a', { ok: false })
    expect(book.get('did:key:a')).toMatchObject({ successes: 2, failures: 1, rtt: 13 })
    for (let i = 0; i < MAX_COUNT + 10; i++) book.record('did:key:b', { ok: false })
    expect(book.get('did:key:b')?.failures).toBe(MAX_COUNT)
    // a copy: the caller cannot change the record
    const r = book.get('did:key:a')!
    r.successes = 99
    expect(book.get('did:key:a')?.successes).toBe(2)
  })

  it('keeps at most maxHistory agents', () => {
    const book = new HistoryBook(50)
    for (let i = 0; i < 5_000; i++) book.record(`did:key:z${i}`, { ok: true, rtt: 1 })
    expect(book.size).toBe(50)
    expect(book.get('did:key:z0')).toBeUndefined()
    expect(book.get('did:key:z4999')).toBeDefined()
  })
})
