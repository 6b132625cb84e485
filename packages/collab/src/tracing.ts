/**
 * Spans of the collaboration layer (spec/management.md 3), through a small
 * tracing facade of the layer's own: `invoke_agent {skill}` (CLIENT on the
 * requester, SERVER on the executor), `invoke_workflow {intent}` and `plan`
 * for an orchestrator run, `execute_tool {tool}` for a handler's tool calls
 * (`SkillContext.tool`, tool-span.ts). The W3C trace context travels in the
 * task protocol's unsigned `trace` field (spec/collab-tasks.md 14.4):
 * `injectTrace` writes a span's context into it, `extractTrace` names one
 * (already validated by wire-v2.ts) as the parent of a span.
 *
 * The layer never imports the OpenTelemetry API: a tracer (`IoaTracer`) is
 * given to it (`TaskServiceInit.tracer`, `OrchestratorInit.tracer`), and
 * `@ioa/management` makes one backed by the OpenTelemetry SDK when the node
 * traces. Without one every span is `NOOP_SPAN`: no attributes are
 * computed, nothing is recorded, and a trace context given by the caller is
 * handed on unchanged.
 */
import type { TraceContext } from './tasks/wire-v2.js'

/** What a span stands for (OpenTelemetry's span kinds of the same names) */
export type IoaSpanKind = 'client' | 'server' | 'internal'

/** Attribute values of a span (OpenTelemetry's primitive attribute values) */
export type IoaSpanAttributes = Record<string, string | number | boolean>

/**
 * The parent of a new span: `{ span }` a span of this process, `{ trace }`
 * a remote parent named by a checked trace field, `'root'` a new trace,
 * `'active'` the tracer's current context (OpenTelemetry's active context:
 * the application's own span, when it runs one)
 */
export type IoaSpanParent = { span: IoaSpan } | { trace: TraceContext } | 'root' | 'active'

/** A span the layer started; only a recording span costs anything */
export interface IoaSpan {
  /** Whether the span records (else its other methods do nothing) */
  isRecording(): boolean
  setAttribute(key: string, value: string | number | boolean): void
  setAttributes(attributes: IoaSpanAttributes): void
  /** Mark the span as failed: `error.type` = `type`, status ERROR with `message` */
  setError(type: string, message?: string): void
  /** The W3C trace context that makes a remote span its child (undefined when the span does not record) */
  traceContext(): TraceContext | undefined
  end(): void
}

/** Where the layer's spans go */
export interface IoaTracer {
  /**
   * Start a span of `kind` under `parent`; `attributes` is called only when
   * the span records. A `{ trace }` parent whose context is not valid starts
   * a new trace.
   */
  startSpan(name: string, kind: IoaSpanKind, parent: IoaSpanParent, attributes: () => IoaSpanAttributes): IoaSpan
}

/** The span of a tracer that records nothing */
export const NOOP_SPAN: IoaSpan = Object.freeze({
  isRecording: () => false,
  setAttribute: () => {},
  setAttributes: () => {},
  setError: () => {},
  traceContext: () => undefined,
  end: () => {}
})

/** A tracer that records nothing (the layer's default) */
export const NOOP_TRACER: IoaTracer = Object.freeze({ startSpan: () => NOOP_SPAN })

/** `tracer`, or the tracer that records nothing */
export function tracerOf (tracer?: IoaTracer): IoaTracer {
  return tracer ?? NOOP_TRACER
}

/**
 * The parent named by `t` (a checked trace field); without one, `fallback`
 * (the requester: the active context; the executor: a new trace)
 */
export function extractTrace (t: TraceContext | undefined, fallback: IoaSpanParent = 'active'): IoaSpanParent {
  return t == null ? fallback : { trace: t }
}

/**
 * The trace field that continues `span`: its own context when it records,
 * else `fallback` unchanged (tracing off: what the caller gave is handed on)
 */
export function injectTrace (span: IoaSpan | undefined, fallback?: TraceContext): TraceContext | undefined {
  if (span == null || !span.isRecording()) return fallback
  return span.traceContext() ?? fallback
}

/** End a task's span with its final state (`ioa.task.state`); a state other than `completed` is an error with its code */
export function endTaskSpan (span: IoaSpan, state: string | undefined, code?: string, message?: string): void {
  if (span.isRecording()) {
    if (state != null) span.setAttribute('ioa.task.state', state)
    if (state !== 'completed') span.setError(code ?? (state ?? 'TASK_ENDED'), message)
  }
  span.end()
}

/** The `error.type` of `err`: its code, else its name */
export function errorTypeOf (err: unknown): string {
  const e = err as { code?: unknown, name?: unknown } | undefined
  if (typeof e?.code === 'string') return e.code
  return typeof e?.name === 'string' ? e.name : 'Error'
}

/** End a span with the error that stopped it */
export function endSpanWithError (span: IoaSpan, err: unknown): void {
  if (span.isRecording()) {
    const message = (err as { message?: unknown } | undefined)?.message
    span.setError(errorTypeOf(err), typeof message === 'string' ? message : String(err))
  }
  span.end()
}
