/**
 * The per-agent record book the default ranker reads.
 */
import { describe, expect, it } from 'vitest'
import { HistoryBook, MAX_COUNT } from '../src/history.js'

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
