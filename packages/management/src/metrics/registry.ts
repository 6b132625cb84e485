/**
 * The process's metrics registry and libp2p's metrics component on it.
 *
 * `@libp2p/prometheus-metrics` keeps its metric objects in one map per
 * process, keyed by name: with `preserveExistingMetrics` a second node in the
 * process reuses the first node's objects instead of clearing them. So a
 * process has one set of metrics (Prometheus scrapes processes): its nodes'
 * libp2p metrics add up, and ours tell a gateway's two nodes apart by their
 * `network` label. They live in a registry of their own (not prom-client's
 * global one, which the embedding application may use for itself).
 */
import { prometheusMetrics } from '@libp2p/prometheus-metrics'
import { Registry } from 'prom-client'
import type { ComponentLogger, Metrics } from '@libp2p/interface'

let shared: Registry | undefined
/** Registries that already collect the Node.js process metrics (prom-client refuses them twice) */
const withDefaults = new WeakSet<Registry>()

/** The registry the nodes of this process record their metrics in */
export function metricsRegistry (): Registry {
  shared ??= new Registry()
  return shared
}

/**
 * How often the event loop's lag is sampled (prom-client's
 * `eventLoopMonitoringPrecision` of `nodejs_eventloop_lag_*`), ms: the
 * sampling timer wakes the process that often even when it is idle, and at
 * prom-client's 10 ms it cost about 3 ms of CPU per second per process, a
 * task path's metrics' biggest share
 */
export const EVENT_LOOP_PRECISION = 100

/** What `libp2pMetrics` returns: libp2p's `metrics` option and the registry it records in */
export interface Libp2pMetrics {
  /** Pass as libp2p's `metrics` option (`createTransportNode({ metrics })`) */
  readonly metrics: (components: { logger: ComponentLogger }) => Metrics
  readonly registry: Registry
}

/**
 * libp2p's metrics component for one node: Prometheus metrics in `registry`
 * (the process's by default), libp2p's own included, the Node.js process
 * metrics collected once per registry
 */
export function libp2pMetrics (registry: Registry = metricsRegistry()): Libp2pMetrics {
  return {
    registry,
    metrics: (components) => {
      const collectDefaultMetrics = !withDefaults.has(registry)
      withDefaults.add(registry)
      return prometheusMetrics({ registry, preserveExistingMetrics: true, collectDefaultMetrics, defaultMetrics: { eventLoopMonitoringPrecision: EVENT_LOOP_PRECISION } })(components)
    }
  }
}
