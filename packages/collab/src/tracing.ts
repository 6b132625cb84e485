/**
 * Spans of the collaboration layer through the OpenTelemetry API
 * (spec/management.md 3): `invoke_agent {skill}` (CLIENT on the requester,
 * SERVER on the executor), `invoke_workflow {intent}` and `plan` for an
 * orchestrator run. The W3C trace context travels in the task protocol's
 * unsigned `trace` field (spec/collab-tasks.md 14.4): `injectTrace` writes a
 * span's context into it, `extractTrace` reads one (already validated by
 * wire-v2.ts) as the parent of a span.
 *
 * Without a tracer provider (the API's default) every span is the API's
 * non-recording span: no attributes are computed, nothing is exported, and a
 * trace context given by the caller is handed on unchanged.
 */
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, context, createTraceState, isSpanContextValid, trace } from '@opentelemetry/api'
import type { TraceContext } from './tasks/wire-v2.js'
import type { Attributes, Context, Span, Tracer, TracerProvider } from '@opentelemetry/api'

/** The instrumentation scope of the layer's spans */
const TRACER_NAME = '@ioa/collab'

/** The tracer of `provider`, or of the API's global provider (a no-op one unless the application registered one) */
export function tracerOf (provider?: TracerProvider): Tracer {
  return (provider ?? trace.getTracerProvider()).getTracer(TRACER_NAME)
}

/**
 * A context whose span is the remote parent named by `t` (a checked trace
 * field); without one, `fallback` (the requester: the active context; the
 * executor: the root context, a new trace)
 */
export function extractTrace (t: TraceContext | undefined, fallback: Context = context.active()): Context {
  if (t == null) return fallback
  // version-traceid-parentid-flags (checked by readTrace/checkTrace)
  const [, traceId, spanId, flags] = t.traceparent.split('-')
  const sc = {
    traceId,
    spanId,
    traceFlags: parseInt(flags, 16) & 0xff,
    isRemote: true,
    ...(t.tracestate != null ? { traceState: createTraceState(t.tracestate) } : {})
  }
  return isSpanContextValid(sc) ? trace.setSpanContext(ROOT_CONTEXT, sc) : fallback
}

/**
 * The trace field that continues `span`: its own context when it records,
 * else `fallback` unchanged (tracing off: what the caller gave is handed on)
 */
export function injectTrace (span: Span | undefined, fallback?: TraceContext): TraceContext | undefined {
  if (span == null || !span.isRecording()) return fallback
  const sc = span.spanContext()
  if (!isSpanContextValid(sc)) return fallback
  const traceparent = `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, '0')}`
  const state = sc.traceState?.serialize()
  return state != null && state !== '' ? { traceparent, tracestate: state } : { traceparent }
}

/** Start a span of `kind` under `parent`; `attributes` is called only when the span records */
export function startSpan (tracer: Tracer, name: string, kind: SpanKind, parent: Context, attributes: () => Attributes): Span {
  const span = tracer.startSpan(name, { kind }, parent)
  if (span.isRecording()) span.setAttributes(attributes())
  return span
}

/** End a task's span with its final state (`ioa.task.state`); a state other than `completed` is an error with its code */
export function endTaskSpan (span: Span, state: string | undefined, code?: string, message?: string): void {
  if (!span.isRecording()) {
    span.end()
    return
  }
  if (state != null) span.setAttribute('ioa.task.state', state)
  if (state !== 'completed') {
    span.setAttribute('error.type', code ?? (state ?? 'TASK_ENDED'))
    span.setStatus({ code: SpanStatusCode.ERROR, ...(message != null ? { message } : {}) })
  }
  span.end()
}

/** End a span with the error that stopped it */
export function endSpanWithError (span: Span, err: unknown): void {
  if (span.isRecording()) {
    const e = err as { code?: unknown, message?: unknown }
    span.setAttribute('error.type', typeof e?.code === 'string' ? e.code : (err as Error)?.name ?? 'Error')
    span.setStatus({ code: SpanStatusCode.ERROR, message: typeof e?.message === 'string' ? e.message : String(err) })
  }
  span.end()
}

export { SpanKind }
