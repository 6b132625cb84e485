/**
 * Counters and histograms counted in plain numbers on the task path and
 * handed to prom-client when the registry is read (a scrape of `/metrics`).
 *
 * prom-client's `inc(labels)` and `observe(labels, v)` build a key from the
 * label values, check every label name and, for a histogram, convert the
 * bucket's bound to a property name, on every call: about 0.5 µs a counter
 * and 0.7 µs a histogram with three labels, several times per task on each
 * end. Here a label set is looked up once: its cell (`cell(labels)`) holds
 * the numbers, and each call is an addition. The metric is still a
 * prom-client `Counter` / `Histogram` of the registry (a second node of
 * the process finds it and adds its own cells), so its text, its name and
 * its type do not change; values recorded through prom-client's own
 * methods are reported beside the cells'.
 */
import { Counter, Histogram } from 'prom-client'
import type { Registry } from 'prom-client'

type Labels = Record<string, string>

/** The count of one label set */
export class CountCell {
  n = 0
  /** What the prom-client counter has been given so far */
  reported = 0

  constructor (readonly labels: Labels) {}

  inc (): void {
    this.n++
  }
}

/** The observations of one label set: per bucket (not cumulative), their sum and count */
export class HistogramCell {
  readonly buckets: Float64Array
  sum = 0
  count = 0

  constructor (readonly labels: Labels, private readonly bounds: readonly number[]) {
    this.buckets = new Float64Array(bounds.length)
  }

  observe (value: number): void {
    const b = this.bounds
    let i = 0
    while (i < b.length && value > b[i]) i++
    if (i < b.length) this.buckets[i]++
    this.sum += value
    this.count++
  }
}

/** The key of a label set (its values in the metric's label order) */
function keyOf (names: readonly string[], labels: Labels): string {
  let k = ''
  for (const n of names) k += `${labels[n] ?? ''}\u0000`
  return k
}

/** `labels` in the metric's label order (the order prom-client writes them in) */
function ordered (names: readonly string[], labels: Labels): Labels {
  const out: Labels = {}
  for (const n of names) if (labels[n] != null) out[n] = labels[n]
  return out
}

/** A prom-client counter whose cells are added to it when the registry is read */
export class CellCounter extends Counter {
  private readonly cells = new Map<string, CountCell>()
  private readonly names: readonly string[]
  readonly metricName: string

  constructor (registry: Registry, name: string, help: string, labelNames: string[]) {
    super({
      name,
      help,
      labelNames,
      registers: [registry],
      collect () {
        // `this` is the metric (prom-client calls collect on it before reading its values)
        for (const c of (this as unknown as CellCounter).cells.values()) {
          if (c.n > c.reported) {
            this.inc(c.labels, c.n - c.reported)
            c.reported = c.n
          }
        }
      }
    })
    this.metricName = name
    this.names = labelNames
  }

  /** The cell of `labels` (made on first use; keep it: the lookup is the cost saved) */
  cell (labels: Labels): CountCell {
    const k = keyOf(this.names, labels)
    let c = this.cells.get(k)
    if (c == null) {
      c = new CountCell(ordered(this.names, labels))
      this.cells.set(k, c)
    }
    return c
  }
}

/** One value of prom-client's histogram data as the registry formats it */
interface ExportValue { labels: Record<string, string | number>, sharedLabels: Labels, value: number, metricName: string, exemplar?: null }

/** A prom-client histogram that reports its cells beside what was observed through prom-client */
export class CellHistogram extends Histogram {
  private readonly cells = new Map<string, HistogramCell>()
  private readonly names: readonly string[]
  private readonly bounds: readonly number[]
  readonly metricName: string

  constructor (registry: Registry, name: string, help: string, labelNames: string[], buckets: number[]) {
    super({ name, help, labelNames, buckets, registers: [registry] })
    this.metricName = name
    this.names = labelNames
    this.bounds = [...buckets].sort((a, b) => a - b)
  }

  /** The cell of `labels` (made on first use; keep it) */
  cell (labels: Labels): HistogramCell {
    const k = keyOf(this.names, labels)
    let c = this.cells.get(k)
    if (c == null) {
      c = new HistogramCell(ordered(this.names, labels), this.bounds)
      this.cells.set(k, c)
    }
    return c
  }

  // prom-client's `get()` and the registry's text both read this method of
  // prom-client 15's histogram (not in its typings; get() splays sharedLabels
  // into labels): the test of /metrics reads the cells' values through it
  async getForPromString (): Promise<{ values: ExportValue[] }> {
    const own = Reflect.get(Histogram.prototype, 'getForPromString') as (this: Histogram) => Promise<{ values: ExportValue[] }>
    const data = await own.call(this)
    const values = data.values
    const name = this.metricName
    for (const c of this.cells.values()) {
      let acc = 0
      for (let i = 0; i < this.bounds.length; i++) {
        acc += c.buckets[i]
        values.push({ labels: { le: this.bounds[i] }, sharedLabels: c.labels, value: acc, metricName: `${name}_bucket`, exemplar: null })
      }
      values.push({ labels: { le: '+Inf' }, sharedLabels: c.labels, value: c.count, metricName: `${name}_bucket`, exemplar: null })
      values.push({ labels: {}, sharedLabels: c.labels, value: c.sum, metricName: `${name}_sum` })
      values.push({ labels: {}, sharedLabels: c.labels, value: c.count, metricName: `${name}_count` })
    }
    return data
  }
}

/** The registry's counter `name`, a `CellCounter` (registered on first use: a second node of the process finds it) */
export function cellCounter (registry: Registry, name: string, help: string, labelNames: string[]): CellCounter {
  const existing = registry.getSingleMetric(name)
  if (existing instanceof CellCounter) return existing
  if (existing != null) throw new Error(`metric ${name} is registered, not as a cell counter`)
  return new CellCounter(registry, name, help, labelNames)
}

/** The registry's histogram `name`, a `CellHistogram` (registered on first use) */
export function cellHistogram (registry: Registry, name: string, help: string, labelNames: string[], buckets: number[]): CellHistogram {
  const existing = registry.getSingleMetric(name)
  if (existing instanceof CellHistogram) return existing
  if (existing != null) throw new Error(`metric ${name} is registered, not as a cell histogram`)
  return new CellHistogram(registry, name, help, labelNames, buckets)
}
