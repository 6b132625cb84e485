/**
 * The collaboration layer's tracing facade (`IoaTracer` of `@ioa/collab`)
 * backed by the OpenTelemetry API (spec/management.md 3): spans of a tracer
 * provider (the node's own, from `createTracing`, or the application's).
 * This module is the only one that imports `@opentelemetry/api` at run
 * time, and it is itself imported dynamically (by `createTracing` and
 * `otelTracer`): a node that does not trace never loads the API.
 */
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, context, createTraceState, isSpanContextValid, trace } from '@opentelemetry/api'
import type { IoaSpan, IoaSpanAttributes, IoaSpanKind, IoaSpanParent, IoaTracer, TraceContext } from '@ioa/collab'
import type { Context, Span, SpanContext, Tracer, TracerProvider } from '@opentelemetry/api'

/** The instrumentation scope of the layer's spans */
export const TRACER_NAME = '@ioa/collab'

const KINDS: Record<IoaSpanKind, SpanKind> = { client: SpanKind.CLIENT, server: SpanKind.SERVER, internal: SpanKind.INTERNAL }

/** The remote span context named by a checked trace field (version-traceid-parentid-flags), or undefined when it is not valid */
function remoteContext (t: TraceContext): SpanContext | undefined {
  const p = t.traceparent
  // fixed offsets: readTrace/checkTrace checked the shape (2 + 1 + 32 + 1 + 16 + 1 + 2 characters)
  const sc: SpanContext = {
    traceId: p.slice(3, 35),
    spanId: p.slice(36, 52),
    traceFlags: parseInt(p.slice(53, 55), 16) & 0xff,
    isRemote: true
  }
  if (t.tracestate != null) sc.traceState = createTraceState(t.tracestate)
  return isSpanContextValid(sc) ? sc : undefined
}

/** A recording (or sampled-out) OpenTelemetry span behind the facade */
class OtelSpan implements IoaSpan {
  readonly span: Span
  private readonly recording: boolean
  private carried?: TraceContext

  constructor (span: Span) {
    this.span = span
    this.recording = span.isRecording()
  }

  isRecording (): boolean {
    return this.recording
  }

  setAttribute (key: string, value: string | number | boolean): void {
    this.span.setAttribute(key, value)
  }

  setAttributes (attributes: IoaSpanAttributes): void {
    this.span.setAttributes(attributes)
  }

  setError (type: string, message?: string): void {
    this.span.setAttribute('error.type', type)
    this.span.setStatus(message != null ? { code: SpanStatusCode.ERROR, message } : { code: SpanStatusCode.ERROR })
  }

  traceContext (): TraceContext | undefined {
    if (this.carried != null) return this.carried
    const sc = this.span.spanContext()
    if (!isSpanContextValid(sc)) return undefined
    const traceparent = `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, '0')}`
    const state = sc.traceState?.serialize()
    this.carried = state != null && state !== '' ? { traceparent, tracestate: state } : { traceparent }
    return this.carried
  }

  end (): void {
    this.span.end()
  }
}

/** The OpenTelemetry context of a facade parent */
function contextOf (parent: IoaSpanParent): Context {
  if (parent === 'root') return ROOT_CONTEXT
  if (parent === 'active') return context.active()
  if ('span' in parent) return parent.span instanceof OtelSpan ? trace.setSpan(ROOT_CONTEXT, parent.span.span) : ROOT_CONTEXT
  const sc = remoteContext(parent.trace)
  // a trace field that is not a valid context starts a new trace (spec/management.md 3.1)
  return sc != null ? trace.setSpanContext(ROOT_CONTEXT, sc) : ROOT_CONTEXT
}

class OtelTracer implements IoaTracer {
  private readonly tracer: Tracer

  constructor (tracer: Tracer) {
    this.tracer = tracer
  }

  startSpan (name: string, kind: IoaSpanKind, parent: IoaSpanParent, attributes: () => IoaSpanAttributes): IoaSpan {
    const span = this.tracer.startSpan(name, { kind: KINDS[kind] }, contextOf(parent))
    const s = new OtelSpan(span)
    if (s.isRecording()) span.setAttributes(attributes())
    return s
  }
}

/** The facade over `provider`'s tracer (the API's global provider when none is given) */
export function tracerOfProvider (provider: TracerProvider = trace.getTracerProvider()): IoaTracer {
  return new OtelTracer(provider.getTracer(TRACER_NAME))
}
