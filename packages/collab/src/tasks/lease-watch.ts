/**
 * The requester's lease watch (spec/collab-tasks.md, leases): follow a task's
 * event stream, resubscribe when it fails, and report a lapse after 3 lease
 * intervals without news from the executor.
 */
import { StreamClosedError, isRepeatable } from '@ioa/transport'
import delay from 'delay'
import { CollabError, fromRemote } from '../errors.js'
import { Deadlines } from './deadlines.js'
import { finishedOutcome, unansweredOutcome } from './feedback.js'
import { isTerminal } from './model.js'
import { MAX_LEASE, MIN_LEASE, eventState, eventTaskId, parseEvent } from './wire.js'
import type { TaskEvent } from './api.js'
import type { EventSource } from './event-source.js'
import type { TaskState } from './model.js'
import type { TraceContext } from './wire-v2.js'
import type { Did, Outcome } from '@ioa/interconnect'
import type { Logger } from '@libp2p/interface'

/**
 * The requester heard nothing from the executor (no status, artifact or
 * heartbeat) for 3 lease intervals and could not resubscribe: the executor is
 * presumed gone; the task may be given to another agent.
 */
export class LeaseLapsedError extends CollabError {
  static override name = 'LeaseLapsedError'
  static code = 'LEASE_LAPSED'
  readonly taskId?: string
  constructor (message = 'Task lease lapsed', options?: ErrorOptions & { taskId?: string }) {
    super(LeaseLapsedError.code, message, options)
    this.name = LeaseLapsedError.name
    this.taskId = options?.taskId
  }
}

/** What the lease watch needs of the requester */
export interface LeaseWatchHost {
  /** The first lease interval assumed, before the executor announces its own */
  readonly lease: number
  readonly requestTimeout: number
  readonly log: Logger
  /** Peers to try for an agent: 'local' when it is served here */
  peersOf(to: Did, taskId: string | undefined, signal?: AbortSignal, fresh?: boolean): Promise<string[]>
  openStream(peer: string, method: 'submit' | 'resubscribe', payload: unknown, signal: AbortSignal): EventSource
  remember(to: Did, taskId: string, peer: string): void
  observe(to: Did, taskId: string, outcome: Outcome | undefined): void
}

/** What the shared timer ends when its time passes */
interface Expiry {
  expire(): void
}

/**
 * One timer for every lease watch and drain of this process, in place of a
 * timer armed and cleared per task and per event: an entry is moved (a map
 * write) when news comes, and the timer, armed for the earliest entry, stays
 * armed while none is left (a later task reuses it)
 */
const timers = new Deadlines<Expiry>(e => { e.expire() }, { keepArmed: true })

/**
 * Read a finished task's stream to its end in the background (the
 * executor's END follows the terminal state at once): closing it earlier
 * would send the executor a CANCEL for a task that is already over, and
 * waiting for it would hold the caller. A stream that does not end within
 * `bound` ms is aborted; what comes after the terminal state is not news.
 */
function drain (host: LeaseWatchHost, source: EventSource, taskId: string, controller: AbortController, bound: number): void {
  const timer: Expiry = { expire: () => { controller.abort(new StreamClosedError(`No END within ${bound} ms of the final state`)) } }
  timers.add(timer, Date.now() + bound)
  void (async () => {
    while ((await source.next()).done !== true) {
      // an item after the terminal state: nothing to report
    }
  })().catch((err: unknown) => {
    // the task is over either way; the stream closing early is no news of it
    host.log.trace('the stream of finished task %s ended with %e', taskId, err)
  }).finally(() => { timers.delete(timer) })
}

/**
 * Follow a task's event stream with a lease watchdog: a stream that fails
 * is resubscribed until 3 lease intervals pass without any event, then a
 * `lapsed` event ends the iteration.
 */
export async function * watchLease (host: LeaseWatchHost, to: Did, initialId: string, submit: ((peer: string, signal: AbortSignal) => Promise<EventSource>) | undefined, outer?: AbortSignal, trace?: TraceContext): AsyncGenerator<TaskEvent, void, undefined> {
  let taskId = initialId
  let lease = host.lease
  let received = false
  /** when the last event arrived (reported in `lapsed`) */
  let lastSeen = Date.now()
  /** since when we have been waiting for the next event (time the consumer holds an event does not count) */
  let waitingSince = lastSeen
  let lastState: TaskState | undefined
  let peer: string | undefined
  let candidates = await host.peersOf(to, submit == null ? taskId : undefined, outer)
  let index = 0
  let resolvedFresh = false
  /** this stream saw the task before it ended (a resubscribe to a task already finished reports nothing) */
  let witnessed = submit != null

  while (true) {
    outer?.throwIfAborted()
    const target = peer ?? candidates[index]
    const controller = new AbortController()
    // the caller's signal aborts this attempt too (linked by hand: AbortSignal.any is costly per call)
    const onOuter = (): void => { controller.abort(outer?.reason) }
    outer?.addEventListener('abort', onOuter, { once: true })
    if (outer?.aborted === true) onOuter()
    const signal = controller.signal
    let lapsed = false
    const timer: Expiry = { expire: () => { lapsed = true; controller.abort(new LeaseLapsedError('No event within the lease', { taskId })) } }
    const arm = (): void => {
      const now = Date.now()
      timers.add(timer, received ? Math.max(now + 1, waitingSince + 3 * lease) : now + Math.max(3 * lease, host.requestTimeout))
    }
    let source: EventSource | undefined
    let failure: unknown
    try {
      arm()
      source = submit != null && !received
        ? await submit(target, signal)
        // `trace`: the submit's CLIENT span (or the caller's trace), parent of the resubscribe's own span
        : host.openStream(target, 'resubscribe', trace != null ? { agent: to, task: taskId, trace } : { agent: to, task: taskId }, signal)
      while (true) {
        arm()
        const next = await source.next()
        timers.delete(timer)
        if (next.done === true) {
          failure = new StreamClosedError('The task stream ended before the task did')
          break
        }
        const event = parseEvent(next.value)
        received = true
        peer = target
        lastSeen = waitingSince = Date.now()
        taskId = eventTaskId(event)
        lastState = eventState(event)
        const announced = event.type === 'heartbeat' ? event.lease : event.type === 'lapsed' ? undefined : event.task.lease
        if (typeof announced === 'number' && Number.isFinite(announced)) lease = Math.min(MAX_LEASE, Math.max(MIN_LEASE, announced))
        if (target !== 'local') host.remember(to, taskId, target)
        const finished = lastState != null && isTerminal(lastState) && event.type !== 'heartbeat'
        if (finished && witnessed && event.type !== 'lapsed') host.observe(to, taskId, finishedOutcome(event.task.state, event.task.error?.code))
        if (!finished) witnessed = true
        yield event
        waitingSince = Date.now()
        if (finished) {
          drain(host, source, taskId, controller, 3 * lease)
          source = undefined
          return
        }
      }
    } catch (err) {
      failure = err
    } finally {
      timers.delete(timer)
      if (source != null) {
        await source.return(undefined).catch((closeErr: unknown) => {
          // the attempt is over either way; its own outcome is `failure`
          host.log.trace('closing the stream of task %s: %e', taskId, closeErr)
        })
      }
      outer?.removeEventListener('abort', onOuter)
    }
    if (outer?.aborted === true) throw outer.reason
    const err = fromRemote(failure) as { code?: string } | undefined
    if (!lapsed && !isRepeatable(err) && !(failure instanceof StreamClosedError)) {
      host.observe(to, taskId, unansweredOutcome(err?.code))
      throw err
    }
    if (!received) {
      index++
      if (index >= candidates.length && !resolvedFresh && submit != null && candidates[0] !== 'local') {
        // the route may be stale: look the agent up again once
        resolvedFresh = true
        candidates = await host.peersOf(to, undefined, outer, true).catch((lookupErr: unknown) => {
          // no fresh route: the attempts' own error is reported below
          host.log('could not look %s up again for task %s: %e', to, taskId, lookupErr)
          return []
        })
        index = 0
      }
      if (index >= candidates.length) {
        host.observe(to, taskId, lapsed ? { ok: false } : unansweredOutcome(err?.code))
        if (lapsed) throw new LeaseLapsedError(`No answer from ${to} for task ${taskId}`, { taskId })
        throw err
      }
      continue
    }
    const left = waitingSince + 3 * lease - Date.now()
    if (lapsed || left <= 0) {
      host.observe(to, taskId, { ok: false })
      yield {
        type: 'lapsed',
        taskId,
        ...(lastState != null ? { state: lastState } : {}),
        lastSeen,
        error: { code: LeaseLapsedError.code, message: `No news of task ${taskId} for ${Date.now() - lastSeen} ms` }
      }
      return
    }
    // resubscribe after a short pause, within the lease
    await delay(Math.min(Math.max(MIN_LEASE, lease / 2), left), { signal: outer })
  }
}
