/**
 * libp2p's metrics component on a registry of the process
 * (spec/management.md 2.3): libp2p's own metrics and the Node.js process's
 * are there, the event loop's lag among them (sampled every
 * `EVENT_LOOP_PRECISION` ms rather than prom-client's 10, which woke an idle
 * node 100 times a second: the cost is measured in bench/README.md, not
 * asserted here).
 */
import { defaultLogger } from '@libp2p/logger'
import { Registry } from 'prom-client'
import { describe, expect, it } from 'vitest'
import { EVENT_LOOP_PRECISION, libp2pMetrics } from '../src/metrics/registry.js'

describe('libp2p\'s metrics component', () => {
  it('records libp2p\'s metrics and the process\'s, the event loop lag too', async () => {
    const registry = new Registry()
    const m = libp2pMetrics(registry)
    expect(m.registry).toBe(registry)
    const metrics = m.metrics({ logger: defaultLogger() })
    expect(typeof metrics.trackProtocolStream).toBe('function')
    // the lag histogram needs a sample or two before its percentiles mean anything
    await new Promise(resolve => setTimeout(resolve, 3 * EVENT_LOOP_PRECISION))
    const text = await registry.metrics()
    for (const name of ['libp2p_data_transfer_bytes_total', 'nodejs_memory_usage_bytes', 'process_cpu_user_seconds_total', 'nodejs_eventloop_lag_p99_seconds', 'nodejs_gc_duration_seconds']) {
      expect(text, name).toContain(`# TYPE ${name} `)
    }
    expect(EVENT_LOOP_PRECISION).toBe(100)
  })
})
