/**
 * Counters counted in plain numbers on the task path and handed to
 * prom-client when the registry is read (a scrape of `/metrics`), through
 * prom-client's documented `collect` hook.
 *
 * prom-client's `inc(labels)` builds a key from the label values and checks
 * every label name on every call: about 0.5 µs a counter with three labels,
 * several times per task on each end. Here a label set is looked up once:
 * its cell (`cell(labels)`) holds the count, and each call is an addition.
 * The metric is still a prom-client `Counter` of the registry (a second node
 * of the process finds it and adds its own cells), so its text, its name and
 * its type do not change; counts made through prom-client's own `inc` are
 * reported beside the cells'. Histograms stay prom-client's own (their
 * values have no public setter to hand over).
 */
import { Counter } from 'prom-client'
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

/** The registry's counter `name`, a `CellCounter` (registered on first use: a second node of the process finds it) */
export function cellCounter (registry: Registry, name: string, help: string, labelNames: string[]): CellCounter {
  const existing = registry.getSingleMetric(name)
  if (existing instanceof CellCounter) return existing
  if (existing != null) throw new TypeError(`metric ${name} is registered, not as a cell counter`)
  return new CellCounter(registry, name, help, labelNames)
}
