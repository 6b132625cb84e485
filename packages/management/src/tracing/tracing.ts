/**
 * The node's tracer provider (spec/management.md 3): the OpenTelemetry
 * SDK's basic provider with a parent-based ratio sampler, exporting over
 * OTLP/HTTP (JSON) to `otlp`, or to a span exporter the caller gives (an
 * in-memory one in tests). The SDK and the exporter are imported here
 * dynamically: a node without `management.tracing` never loads them.
 * A provider per node (not the API's global one): nodes in one process
 * keep their own service names. `tracer` is the collaboration layer's
 * facade over it (otel-tracer.ts, also loaded here only).
 */
import { InvalidTracingConfigError } from './errors.js'
import type { IoaTracer } from '@ioa/collab'
import type { TracerProvider } from '@opentelemetry/api'
import type { Sampler, SpanExporter } from '@opentelemetry/sdk-trace-base'
import type * as SdkTraceBase from '@opentelemetry/sdk-trace-base'

/** Defaults of `TracingInit` */
export const TRACING_DEFAULTS = Object.freeze({
  sampleRatio: 1,
  serviceName: 'ioa-node',
  /** Spans queued for export at most (more are dropped, counted by the SDK) */
  maxQueueSize: 2_048,
  /** Spans in one export request at most */
  maxExportBatchSize: 512,
  /** How long the queue waits before an export, ms */
  scheduledDelay: 1_000,
  /** How long one export request may take, ms */
  exportTimeout: 10_000
})

export interface TracingInit {
  /** URL of an OTLP/HTTP traces endpoint, e.g. `http://127.0.0.1:4318/v1/traces` (JSON encoding) @default undefined (no OTLP export) */
  otlp?: string
  /** Spans exported here instead of (or besides) OTLP: an in-memory exporter in tests @default undefined */
  exporter?: SpanExporter
  /** Share of new traces sampled, 0-1 (a continued trace follows its parent's decision) @default 1 */
  sampleRatio?: number
  /** `service.name` of the node's spans @default 'ioa-node' */
  serviceName?: string
  /** Spans queued for export at most @default 2_048 */
  maxQueueSize?: number
  /** How long the queue waits before an export, ms @default 1_000 */
  scheduledDelay?: number
}

/** A node's tracer provider and how to flush and stop it */
export interface Tracing {
  readonly provider: TracerProvider
  /** The provider's tracer as the collaboration layer takes it (`TaskServiceInit.tracer`, `OrchestratorInit.tracer`) */
  readonly tracer: IoaTracer
  /** Export every span ended so far */
  flush(): Promise<void>
  /** Flush, then stop exporting */
  shutdown(): Promise<void>
}

/** Check `init`; throws `InvalidTracingConfigError` naming the field */
function check (init: TracingInit): void {
  if (init.otlp == null && init.exporter == null) throw new InvalidTracingConfigError('tracing needs otlp (an OTLP/HTTP URL) or an exporter')
  if (init.otlp != null) {
    let url: URL
    try {
      url = new URL(init.otlp)
    } catch {
      throw new InvalidTracingConfigError(`otlp: not a URL: ${String(init.otlp).slice(0, 100)}`)
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new InvalidTracingConfigError(`otlp: must be an http(s) URL, not ${url.protocol}`)
  }
  const r = init.sampleRatio
  if (r != null && (typeof r !== 'number' || !(r >= 0 && r <= 1))) throw new InvalidTracingConfigError('sampleRatio: must be a number from 0 to 1')
  if (init.serviceName != null && (typeof init.serviceName !== 'string' || init.serviceName.length === 0 || init.serviceName.length > 128)) {
    throw new InvalidTracingConfigError('serviceName: must be text of 1-128 characters')
  }
  for (const k of ['maxQueueSize', 'scheduledDelay'] as const) {
    const v = init[k]
    if (v != null && (!Number.isSafeInteger(v) || v <= 0)) throw new InvalidTracingConfigError(`${k}: must be a positive integer`)
  }
}

/**
 * The collaboration layer's tracer over an OpenTelemetry tracer provider of
 * the application's own (`provider`, else the API's global one, which the
 * application registers): for `TaskServiceInit.tracer` when the node's own
 * `createTracing` is not used. Loads the OpenTelemetry API.
 */
export async function otelTracer (provider?: TracerProvider): Promise<IoaTracer> {
  const { tracerOfProvider } = await import('./otel-tracer.js')
  return tracerOfProvider(provider)
}

/** The sampler of new traces: every one or none without a draw per span at 1 and 0, else a share by trace id */
function rootSampler (sdk: typeof SdkTraceBase, ratio: number): Sampler {
  if (ratio >= 1) return new sdk.AlwaysOnSampler()
  if (ratio <= 0) return new sdk.AlwaysOffSampler()
  return new sdk.TraceIdRatioBasedSampler(ratio)
}

/** Make a node's tracer provider (loads the OpenTelemetry SDK); throws `InvalidTracingConfigError` */
export async function createTracing (init: TracingInit): Promise<Tracing> {
  check(init)
  const [sdk, resources, otel] = await Promise.all([import('@opentelemetry/sdk-trace-base'), import('@opentelemetry/resources'), import('./otel-tracer.js')])
  const processors = []
  if (init.exporter != null) processors.push(new sdk.SimpleSpanProcessor(init.exporter))
  if (init.otlp != null) {
    const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-http')
    processors.push(new sdk.BatchSpanProcessor(new OTLPTraceExporter({ url: init.otlp, timeoutMillis: TRACING_DEFAULTS.exportTimeout }), {
      maxQueueSize: init.maxQueueSize ?? TRACING_DEFAULTS.maxQueueSize,
      maxExportBatchSize: Math.min(TRACING_DEFAULTS.maxExportBatchSize, init.maxQueueSize ?? TRACING_DEFAULTS.maxQueueSize),
      scheduledDelayMillis: init.scheduledDelay ?? TRACING_DEFAULTS.scheduledDelay,
      exportTimeoutMillis: TRACING_DEFAULTS.exportTimeout
    }))
  }
  const provider = new sdk.BasicTracerProvider({
    resource: resources.resourceFromAttributes({ 'service.name': init.serviceName ?? TRACING_DEFAULTS.serviceName }),
    sampler: new sdk.ParentBasedSampler({ root: rootSampler(sdk, init.sampleRatio ?? TRACING_DEFAULTS.sampleRatio) }),
    spanProcessors: processors
  })
  return {
    provider,
    tracer: otel.tracerOfProvider(provider),
    flush: async () => { await provider.forceFlush() },
    shutdown: async () => { await provider.shutdown() }
  }
}
