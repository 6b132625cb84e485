/**
 * Requester-side and discovery metrics: the task streams a node submits and
 * the lookups it makes have no event of their own, so the node's task
 * service and interconnect are wrapped (only when metrics are configured:
 * without them nothing is wrapped and nothing costs).
 */
import type { IoaMetrics, SubmittedOutcome } from './ioa-metrics.js'
import { outcomeOf } from './ioa-metrics.js'
import type { DiscoveredAgent, DiscoverOptions, DiscoveryQuery } from '@ioa/interconnect'
import type { SubmitOptions, TaskEvent, TaskRequest, TaskSnapshot } from '@ioa/collab'

/** The part of a task service whose submits are counted */
export interface SubmittingService {
  submit(from: any, to: any, request: TaskRequest, options?: SubmitOptions): AsyncGenerator<TaskEvent, void, undefined>
  submitAndWait(from: any, to: any, request: TaskRequest, options?: any): Promise<TaskSnapshot>
}

/** The part of an interconnect whose lookups are counted */
export interface DiscoveringService {
  discover(query: DiscoveryQuery, options?: DiscoverOptions): AsyncGenerator<DiscoveredAgent, void, undefined>
  discoverAll(query: DiscoveryQuery, options?: DiscoverOptions): Promise<DiscoveredAgent[]>
}

const seconds = (t0: number): number => (performance.now() - t0) / 1000

/**
 * A task stream counted when it ends: the generator itself, its `next` and
 * `return` patched on the instance (not a generator around it: each event
 * would take another generator's turns of the microtask queue, on the
 * requester's latency path)
 */
function meteredStream (m: Pick<IoaMetrics, 'submit'>, skill: string, stream: AsyncGenerator<TaskEvent, void, undefined>): AsyncGenerator<TaskEvent, void, undefined> {
  const t0 = performance.now()
  let last: TaskSnapshot | undefined
  let outcome: SubmittedOutcome | undefined
  let counted = false
  const count = (): void => {
    if (counted) return
    counted = true
    // a consumer that stops reading early ends the stream too: counted as the state it saw last
    m.submit(skill, outcome ?? outcomeOf(last), seconds(t0))
  }
  const next = stream.next.bind(stream)
  const ret = stream.return.bind(stream)
  const failed = (err: unknown): never => {
    outcome ??= 'error'
    count()
    throw err
  }
  stream.next = () => next().then(r => {
    if (r.done === true) count()
    else if (r.value.type === 'status' || r.value.type === 'artifact') last = r.value.task
    else if (r.value.type === 'lapsed') outcome = 'lapsed'
    return r
  }, failed)
  stream.return = (value) => ret(value).then(r => { count(); return r }, failed)
  return stream
}

/** Count the submits of `tasks` (its `submit` and `submitAndWait` are replaced on the instance) */
export function meterSubmits (m: Pick<IoaMetrics, 'submit'>, tasks: SubmittingService): void {
  const submit = tasks.submit.bind(tasks)
  const submitAndWait = tasks.submitAndWait.bind(tasks)
  tasks.submit = (from, to, request, options) => meteredStream(m, request?.skill, submit(from, to, request, options))
  tasks.submitAndWait = async (from, to, request, options) => {
    const t0 = performance.now()
    let outcome: SubmittedOutcome = 'error'
    let lapsed = false
    try {
      const onEvent = options?.onEvent
      const snapshot = await submitAndWait(from, to, request, {
        ...options,
        onEvent: (e: TaskEvent) => {
          if (e.type === 'lapsed') lapsed = true
          onEvent?.(e)
        }
      })
      outcome = outcomeOf(snapshot)
      return snapshot
    } finally {
      m.submit(request?.skill, lapsed ? 'lapsed' : outcome, seconds(t0))
    }
  }
}

/** Count the lookups of `ic` (its `discover` and `discoverAll` are replaced on the instance) */
export function meterLookups (m: IoaMetrics, ic: DiscoveringService): void {
  const discover = ic.discover.bind(ic)
  const discoverAll = ic.discoverAll.bind(ic)
  ic.discover = async function * (query, options) {
    const t0 = performance.now()
    let found = 0
    let failed = false
    try {
      for await (const agent of discover(query, options)) {
        found++
        yield agent
      }
    } catch (err) {
      failed = true
      throw err
    } finally {
      m.lookup(seconds(t0), failed ? undefined : found)
    }
  }
  ic.discoverAll = async (query, options) => {
    const t0 = performance.now()
    let found: number | undefined
    try {
      const agents = await discoverAll(query, options)
      found = agents.length
      return agents
    } finally {
      m.lookup(seconds(t0), found)
    }
  }
}
