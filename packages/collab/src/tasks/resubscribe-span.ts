/**
 * The spans of a `resubscribe` (spec/management.md 3.1, 3.2): a CLIENT span
 * `resubscribe` on the requester for each resubscribe stream it opens (a
 * child of the submit's CLIENT span when the lease watch resubscribes, of
 * the caller's trace for `resubscribe()`), whose context the request's
 * `trace` field carries; a SERVER span `resubscribe` on the executor, a
 * child of that context, for the stream it serves. Both end when the
 * stream ends, with the last task state seen (`ioa.task.state`), or with
 * the error that ended it. Without a tracer nothing is computed.
 */
import { endSpanWithError, extractTrace, injectTrace } from '../tracing.js'
import type { IoaSpan, IoaSpanAttributes, IoaSpanParent, IoaTracer } from '../tracing.js'
import type { EventSource } from './event-source.js'
import type { TraceContext } from './wire-v2.js'

/** The name of both spans of a resubscribe */
const RESUBSCRIBE_SPAN = 'resubscribe'

/** The request of a resubscribe on the requester's side */
interface ResubscribeRequest { agent: string, task: string, trace?: TraceContext }

/**
 * Start the requester's CLIENT span of a resubscribe; returns it and the
 * request whose `trace` continues it (the given trace unchanged when the
 * span does not record)
 */
export function startResubscribeClient (tracer: IoaTracer, request: ResubscribeRequest): { span: IoaSpan, request: ResubscribeRequest } {
  const span = tracer.startSpan(RESUBSCRIBE_SPAN, 'client', extractTrace(request.trace), () => ({
    'gen_ai.agent.id': request.agent,
    'ioa.task.id': request.task
  }))
  const trace = injectTrace(span, request.trace)
  return { span, request: { agent: request.agent, task: request.task, ...(trace != null ? { trace } : {}) } }
}

/** Start the executor's SERVER span of a resubscribe: a child of the request's trace, else a new trace */
export function startResubscribeServer (tracer: IoaTracer, trace: TraceContext | undefined, attributes: () => IoaSpanAttributes): IoaSpan {
  const parent: IoaSpanParent = extractTrace(trace, 'root')
  return tracer.startSpan(RESUBSCRIBE_SPAN, 'server', parent, attributes)
}

/** End a resubscribe's span: with the last state seen, or with the error */
function endResubscribe (span: IoaSpan, state: string | undefined, err?: unknown): void {
  if (err !== undefined) {
    endSpanWithError(span, err)
    return
  }
  if (state != null && span.isRecording()) span.setAttribute('ioa.task.state', state)
  span.end()
}

/** The state of a full task event (`status`, `artifact`), if it is one */
function stateOf (item: unknown): string | undefined {
  const state = (item as { task?: { state?: unknown } } | undefined)?.task?.state
  return typeof state === 'string' ? state : undefined
}

/** The requester's events of `source`, ending `span` when the stream ends, fails or is closed */
export function tracedResubscribe (source: EventSource, span: IoaSpan): EventSource {
  if (!span.isRecording()) {
    span.end()
    return source
  }
  let state: string | undefined
  let ended = false
  const end = (err?: unknown): void => {
    if (ended) return
    ended = true
    endResubscribe(span, state, err)
  }
  return {
    async next () {
      try {
        const r = await source.next()
        if (r.done === true) end()
        else state = stateOf(r.value) ?? state
        return r
      } catch (err) {
        end(err)
        throw err
      }
    },
    async return (value) {
      try {
        return await source.return(value)
      } finally {
        end()
      }
    }
  }
}

/** The executor's stream `items`, ending `span` when it ends (with `state()`, the task's state then) or fails */
export async function * servedResubscribe<T> (items: AsyncGenerator<T>, span: IoaSpan, state: () => string | undefined): AsyncGenerator<T> {
  let failure: unknown
  try {
    yield * items
  } catch (err) {
    failure = err
    throw err
  } finally {
    endResubscribe(span, span.isRecording() ? state() : undefined, failure)
  }
}
