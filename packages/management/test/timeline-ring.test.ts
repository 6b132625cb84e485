/**
 * The dashboard's timeline ring (spec/management.md 2.6): after it wraps
 * around many times it still answers the held entries above `after`, oldest
 * first, at most `limit`, and a reader from before a restart (`after` above
 * the newest) reads from the oldest held.
 */
import { describe, expect, it } from 'vitest'
import { Timeline } from '../src/dashboard/timeline.js'

const entry = (n: number) => ({ at: n, kind: 'task' as const, side: 'client' as const, type: 'completed', skill: 'demo.echo' })

describe('the timeline ring', () => {
  it('holds the last max entries through many wrap-arounds', () => {
    const t = new Timeline(4)
    expect(t.read(0, 10)).toEqual([])
    for (let n = 1; n <= 23; n++) t.push(entry(n))
    expect(t.seq).toBe(23)
    expect(t.read(0, 10).map(e => e.seq)).toEqual([20, 21, 22, 23])
    expect(t.read(0, 2).map(e => e.seq)).toEqual([20, 21])
    expect(t.read(21, 10).map(e => e.seq)).toEqual([22, 23])
    expect(t.read(23, 10)).toEqual([])
    expect(t.read(99, 10).map(e => e.seq)).toEqual([20, 21, 22, 23])
    expect(t.read(22, 10).map(e => e.at)).toEqual([23])
  })
})
