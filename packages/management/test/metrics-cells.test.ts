/**
 * Metric cells (src/metrics/cells.ts): counted in plain numbers on the task
 * path, they read on /metrics exactly as prom-client's own counters and
 * histograms fed the same observations.
 */
import { Counter, Histogram, Registry } from 'prom-client'
import { describe, expect, it } from 'vitest'
import { cellCounter, cellHistogram } from '../src/metrics/cells.js'

const BUCKETS = [0.001, 0.01, 0.1, 1]
const SAMPLES: Array<[number, string]> = [[0.0005, 'a'], [0.01, 'a'], [0.5, 'b'], [3, 'a'], [0.001, 'b'], [0.02, 'a']]

describe('metric cells', () => {
  it('write the same /metrics text and JSON as prom-client fed the same observations, and keep counting between scrapes', async () => {
    const plain = new Registry()
    const cells = new Registry()
    const h = new Histogram({ name: 'x_seconds', help: 'h', labelNames: ['network', 'skill'], buckets: BUCKETS, registers: [plain] })
    const c = new Counter({ name: 'y_total', help: 'h', labelNames: ['network', 'skill'], registers: [plain] })
    const hc = cellHistogram(cells, 'x_seconds', 'h', ['network', 'skill'], BUCKETS)
    const cc = cellCounter(cells, 'y_total', 'h', ['network', 'skill'])
    // a second node of the process finds the same metrics
    expect(cellCounter(cells, 'y_total', 'h', ['network', 'skill'])).toBe(cc)
    expect(cellHistogram(cells, 'x_seconds', 'h', ['network', 'skill'], BUCKETS)).toBe(hc)
    for (const [v, skill] of SAMPLES) {
      h.observe({ network: 'public', skill }, v)
      c.inc({ network: 'public', skill })
      hc.cell({ network: 'public', skill }).observe(v)
      // label order given does not matter: the text follows the metric's
      cc.cell({ skill, network: 'public' }).inc()
    }
    expect(await cells.metrics()).toBe(await plain.metrics())
    expect(await cells.getMetricsAsJSON()).toEqual(await plain.getMetricsAsJSON())
    // a scrape does not count twice; later counts are added
    expect(await cells.metrics()).toBe(await plain.metrics())
    c.inc({ network: 'public', skill: 'a' })
    cc.cell({ network: 'public', skill: 'a' }).inc()
    h.observe({ network: 'public', skill: 'c' }, 0.2)
    hc.cell({ network: 'public', skill: 'c' }).observe(0.2)
    expect(await cells.metrics()).toBe(await plain.metrics())
    expect(await cells.metrics()).toContain('y_total{network="public",skill="a"} 5')
  })
})
