/**
 * Metric cells (src/metrics/cells.ts): counted in plain numbers on the task
 * path, they read on /metrics exactly as prom-client's own counters fed the
 * same counts.
 */
import { Counter, Registry } from 'prom-client'
import { describe, expect, it } from 'vitest'
import { cellCounter } from '../src/metrics/cells.js'

const SAMPLES = ['a', 'a', 'b', 'a', 'b', 'a']

describe('metric cells', () => {
  it('write the same /metrics text and JSON as prom-client fed the same counts, and keep counting between scrapes', async () => {
    const plain = new Registry()
    const cells = new Registry()
    const c = new Counter({ name: 'y_total', help: 'h', labelNames: ['network', 'skill'], registers: [plain] })
    const cc = cellCounter(cells, 'y_total', 'h', ['network', 'skill'])
    // a second node of the process finds the same metrics
    expect(cellCounter(cells, 'y_total', 'h', ['network', 'skill'])).toBe(cc)
    for (const skill of SAMPLES) {
      c.inc({ network: 'public', skill })
      // label order given does not matter: the text follows the metric's
      cc.cell({ skill, network: 'public' }).inc()
    }
    expect(await cells.metrics()).toBe(await plain.metrics())
    expect(await cells.getMetricsAsJSON()).toEqual(await plain.getMetricsAsJSON())
    // a scrape does not count twice; later counts are added
    expect(await cells.metrics()).toBe(await plain.metrics())
    c.inc({ network: 'public', skill: 'a' })
    cc.cell({ network: 'public', skill: 'a' }).inc()
    c.inc({ network: 'public', skill: 'c' })
    cc.cell({ network: 'public', skill: 'c' }).inc()
    expect(await cells.metrics()).toBe(await plain.metrics())
    expect(await cells.metrics()).toContain('y_total{network="public",skill="a"} 5')
  })
})
