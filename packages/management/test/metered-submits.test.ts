/**
 * The requester's task streams are counted once each, as they end
 * (metered.ts): the last state seen, `lapsed` after a lapsed event,
 * `error` when the stream throws, and the state seen last when the
 * consumer stops reading early; events pass through unchanged.
 */
import { describe, expect, it } from 'vitest'
import { meterSubmits } from '../src/metrics/metered.js'
import type { SubmittedOutcome } from '../src/metrics/ioa-metrics.js'
import type { TaskEvent } from '@ioa/collab'

const status = (state: string): TaskEvent => ({ type: 'status', task: { state } } as unknown as TaskEvent)

function service (events: TaskEvent[], fail?: Error): any {
  return {
    async * submit () {
      for (const e of events) yield e
      if (fail != null) throw fail
    },
    async submitAndWait () { return { state: 'completed' } }
  }
}

function counted (): { outcomes: SubmittedOutcome[], m: { submit: (skill: string, outcome: SubmittedOutcome, s: number) => void } } {
  const outcomes: SubmittedOutcome[] = []
  return { outcomes, m: { submit: (skill, outcome, s) => { expect(skill).toBe('x.y'); expect(s).toBeGreaterThanOrEqual(0); outcomes.push(outcome) } } }
}

const request = { skill: 'x.y', input: null, proofs: [] }

describe('metered submits', () => {
  it('count a stream once as it ends: its last state, lapsed, error, or what it saw when the reader stopped', async () => {
    const cases: Array<[TaskEvent[], Error | undefined, boolean, SubmittedOutcome]> = [
      [[status('working'), status('completed')], undefined, false, 'completed'],
      [[status('working'), { type: 'lapsed', taskId: 't', error: { code: 'LEASE_LAPSED', message: 'm' } } as unknown as TaskEvent], undefined, false, 'lapsed'],
      [[status('working')], new Error('stream reset'), false, 'error'],
      [[status('working'), status('input-required'), status('completed')], undefined, true, 'input-required']
    ]
    for (const [events, fail, stopEarly, outcome] of cases) {
      const { outcomes, m } = counted()
      const tasks = service(events, fail)
      meterSubmits(m, tasks)
      const seen: TaskEvent[] = []
      const read = async (): Promise<void> => {
        for await (const e of tasks.submit('a', 'b', request)) {
          seen.push(e)
          if (stopEarly && seen.length === 2) break
        }
      }
      if (fail != null) await expect(read()).rejects.toThrow('stream reset')
      else await read()
      expect(seen).toEqual(stopEarly ? events.slice(0, 2) : events)
      expect(outcomes).toEqual([outcome])
    }
  })
})
