/**
 * Measurement helpers shared by the benchmark groups.
 */

/** Nearest-rank percentile of sorted samples (NaN for none) */
export function percentile (sorted, p) {
  if (sorted.length === 0) return NaN
  return sorted[Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length))) - 1]
}

/** `items` rotated left by `n`, so that every round starts with another path */
export function rotate (items, n) {
  const k = n % items.length
  return [...items.slice(k), ...items.slice(0, k)]
}

/**
 * Keep `depth` calls in flight for `ms`, each with a fresh `input()` whose
 * answer `check(input, output)` verifies; returns the completed calls and the
 * elapsed ms (the calls in flight at the deadline are waited for and counted)
 */
export async function pipelined (call, { depth, ms, input, check }) {
  let done = 0
  const t0 = performance.now()
  const end = t0 + ms
  await Promise.all(Array.from({ length: depth }, async () => {
    while (performance.now() < end) {
      const sent = input()
      check(sent, await call(sent))
      done++
    }
  }))
  return { done, elapsed: performance.now() - t0 }
}

/**
 * A result row: `ratio` is `value / baseline` (null without a baseline);
 * `target` is `{ max }` / `{ min }` on the ratio or `{ maxValue }` /
 * `{ minValue }` on the value (bench/index.js `verdict`)
 */
export function row (name, value, unit, baseline, target) {
  const r = { name, value, unit, baseline, ratio: baseline != null && baseline !== 0 ? value / baseline : null }
  if (target != null) r.target = target
  return r
}

/** Median of unsorted numbers (NaN for none) */
export function median (xs) {
  return percentile([...xs].sort((a, b) => a - b), 50)
}

/**
 * Warm-up until steady, not for a fixed count: run each of `fns` (each
 * resolves with one figure of its path, less is better: ms per call) in
 * turns until every one has had `flat` runs in a row no better than `gain`
 * of its best, after at least `minRuns` and at most `maxRuns` turns.
 * Resolves with the turns made and each path's best figure. The task path's
 * code is optimised by V8 only after thousands of calls (session 15: 0.78 ms
 * after 500 calls, 0.38 ms after 5,000), a bare stream after a few hundred,
 * so a fixed warm-up measured the task path half-optimised
 */
export async function untilSteady (fns, { flat, minRuns, maxRuns, gain = 0.97 }) {
  const best = fns.map(() => Infinity)
  const flatRuns = fns.map(() => 0)
  let runs = 0
  while (runs < maxRuns && (runs < minRuns || flatRuns.some(f => f < flat))) {
    for (let k = 0; k < fns.length; k++) {
      const figure = await fns[k]()
      flatRuns[k] = figure < best[k] * gain ? 0 : flatRuns[k] + 1
      best[k] = Math.min(best[k], figure)
    }
    runs++
  }
  return { runs, best }
}
