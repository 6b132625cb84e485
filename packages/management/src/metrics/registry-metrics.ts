/**
 * Metrics of the process's registry, registered on first use: a second node
 * of the process finds them registered and records in the same ones.
 */
import { Counter, Histogram } from 'prom-client'
import type { Registry } from 'prom-client'

/** Buckets of task and run durations, seconds: the GenAI conventions' (10 ms … 82 s) below a fast task's sub-millisecond ones */
export const DURATION_BUCKETS = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]

/** One metric of the registry, registered on first use (a second node of the process finds it) */
export function counter (registry: Registry, name: string, help: string, labelNames: string[]): Counter {
  const existing = registry.getSingleMetric(name)
  if (existing != null) return existing as Counter
  return new Counter({ name, help, labelNames, registers: [registry] })
}

export function histogram (registry: Registry, name: string, help: string, labelNames: string[], buckets: number[]): Histogram {
  const existing = registry.getSingleMetric(name)
  if (existing != null) return existing as Histogram
  return new Histogram({ name, help, labelNames, buckets, registers: [registry] })
}

