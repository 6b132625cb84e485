/**
 * The executor's one timer for all task deadlines: each item is handed
 * over once its deadline has passed, never before, in deadline order; an
 * item removed in time never is; the timer follows the earliest deadline.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { Deadlines } from '../src/tasks/deadlines.js'

beforeEach(() => { vi.useFakeTimers({ now: 1_000_000 }) })
afterEach(() => { vi.useRealTimers() })

describe('deadlines on one timer', () => {
  it('hands over each item at its deadline, in order, and only the ones still watched', () => {
    const due: Array<[string, number]> = []
    const d = new Deadlines<string>(item => { due.push([item, Date.now()]) })
    const t0 = Date.now()
    d.add('late', t0 + 300)
    d.add('early', t0 + 100)
    d.add('gone', t0 + 200)
    d.add('same', t0 + 100)
    expect(vi.getTimerCount()).toBe(1)
    d.delete('gone')
    vi.advanceTimersByTime(99)
    expect(due).toEqual([])
    vi.advanceTimersByTime(1)
    expect(due).toEqual([['early', t0 + 100], ['same', t0 + 100]])
    vi.advanceTimersByTime(199)
    expect(due).toHaveLength(2)
    vi.advanceTimersByTime(1)
    expect(due.map(([i]) => i)).toEqual(['early', 'same', 'late'])
    expect(d.size).toBe(0)
    expect(vi.getTimerCount()).toBe(0)
  })

  it('arms again for an earlier deadline, drops the timer when nothing is watched, and goes on when a handler throws', () => {
    const due: string[] = []
    const d = new Deadlines<string>(item => {
      due.push(item)
      if (item === 'bad') throw new Error('handler failed')
    })
    const t0 = Date.now()
    d.add('a', t0 + 1_000)
    d.add('b', t0 + 50)
    vi.advanceTimersByTime(50)
    expect(due).toEqual(['b'])
    d.delete('a')
    expect(vi.getTimerCount()).toBe(0)
    d.add('bad', t0 + 100)
    d.add('after', t0 + 200)
    expect(() => vi.advanceTimersByTime(50)).toThrow('handler failed')
    vi.advanceTimersByTime(100)
    expect(due).toEqual(['b', 'bad', 'after'])
  })

  it('with keepArmed, arms one timer for items added and deleted one after the other, and still hands over an item due', () => {
    const due: string[] = []
    const d = new Deadlines<string>(item => { due.push(item) }, { keepArmed: true })
    const spy = vi.spyOn(globalThis, 'setTimeout')
    const t0 = Date.now()
    for (let i = 0; i < 100; i++) {
      d.add(`task-${i}`, Date.now() + 30_000)
      vi.advanceTimersByTime(1)
      d.delete(`task-${i}`)
    }
    expect(spy).toHaveBeenCalledTimes(1)
    expect(vi.getTimerCount()).toBe(1)
    d.add('slow', Date.now() + 30_000)
    vi.advanceTimersByTime(29_950)
    // the first timer (due at t0 + 30 s) found nothing due and was armed again for 'slow'
    expect(due).toEqual([])
    vi.advanceTimersByTime(200)
    expect(due).toEqual(['slow'])
    expect(Date.now() - t0).toBeGreaterThanOrEqual(30_100)
    d.clear()
    expect(vi.getTimerCount()).toBe(0)
    spy.mockRestore()
  })
})
