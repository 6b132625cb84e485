// Benchmark group `task` (bench/index.js; issue 15): one agent asking
// another to run a skill, against the other ways two processes can make a
// call, each path between a server and a client OS process of its own on
// 127.0.0.1 (bench/cross-process.js; the paths are in bench/task-paths.js):
//
//   task           IoaNode.submit in session mode (one binding per connection,
//                  no signature per request) + delegation, until completed (/ioa/task/2.0.0)
//   task-envelope  the same with a signed envelope per request
//   task-v1        task-envelope with an executor of /ioa/task/1.0.0 only (the version 1 wire, in the same run)
//   libp2p         the baseline: the cheaper of libp2p-lp and libp2p-events
//   libp2p-lp      a long-lived libp2p stream, lpStream framing
//   libp2p-events  the same stream read through its 'message' events
//   messaging      an @ioa/transport messaging request
//   a2a            @a2a-js/sdk blocking SendMessage, one completed Task
//   net            node:net, the same framing: the machine's limit
//
// Rows `<path>.rtt.median`, `<path>.rtt.p99` (ms, sequential calls),
// `<path>.throughput.16` (calls/s, 16 concurrent callers),
// `<path>.cpu.per-call` (µs of both processes per call with 16 callers) and
// `<path>.cpu.per-call.sequential` (the same over the sequential calls),
// each with its ratio to `libp2p`; the targets of issue 15 that compare with
// A2A are on rows `<path>.<metric>.vs-a2a` (baseline: the `a2a` value).
//
//   node --import ./scripts/polyfill.js bench/index.js --group task [--quick] [--json]
//   IOA_BENCH_PROF=/tmp/prof node --import ./scripts/polyfill.js bench/index.js --group task --path task-envelope
import { compareCrossProcess, openCrossProcessPath } from './cross-process.js'
import { row } from './measure.js'

const PATHS_MODULE = new URL('./task-paths.js', import.meta.url).href
/** Paths measured, in this order (`--path` picks some; `libp2p` is both libp2p variants) */
const PATHS = ['task', 'task-envelope', 'task-v1', ...(process.env.IOA_BENCH_BEFORE ? ['task-envelope-before', 'task-before'] : []), 'libp2p-lp', 'libp2p-events', 'messaging', 'a2a', 'net']
const LIBP2P_VARIANTS = ['libp2p-lp', 'libp2p-events']
/** Concurrent callers of the throughput rows */
const DEPTH = 16
/**
 * `--quick` still warms every path this much: fewer calls leave the task
 * path's code unoptimised, and the quick figures would mislead. Its calls
 * are split over 6 rounds (not 2): on a loaded machine a burst of other work
 * lands on whichever path has its turn, and with 2 rounds the first path
 * (`task`) always starts right after the last one's 16-caller warm-up, so
 * one unlucky turn decided a path's median
 */
const QUICK_WARMUP = { rttWarmup: 300, throughputWarmupMs: 500, rounds: 6, warmBatches: 4 }

/** metric name → [field of compareCrossProcess, unit, true when more is better] */
const METRICS = {
  'rtt.median': ['median', 'ms', false],
  'rtt.p99': ['p99', 'ms', false],
  [`throughput.${DEPTH}`]: ['throughput', 'calls/s', true],
  'cpu.per-call': ['cpuPerCall', 'µs', false],
  'cpu.per-call.client': ['cpuPerCallClient', 'µs', false],
  'cpu.per-call.sequential': ['cpuPerCallSequential', 'µs', false]
}

/**
 * Issue 15's targets, ratios in the same run: per path and metric, against
 * `libp2p` (on the row itself) and against `a2a` (on the `.vs-a2a` row)
 */
const ENVELOPE_TARGETS = {
  'rtt.median': { a2a: { max: 0.7 } },
  [`throughput.${DEPTH}`]: { a2a: { min: 2 } }
}
/** Session mode's targets (the `task` path) */
const SESSION_TARGETS = {
  'rtt.median': { libp2p: { max: 1.5 }, a2a: { max: 0.5 } },
  'rtt.p99': { a2a: { max: 0.5 } },
  [`throughput.${DEPTH}`]: { libp2p: { min: 0.5 }, a2a: { min: 3 } },
  'cpu.per-call': { libp2p: { max: 3 } }
}
const TARGETS = { task: SESSION_TARGETS, 'task-envelope': ENVELOPE_TARGETS, 'task-envelope-before': ENVELOPE_TARGETS, 'task-before': SESSION_TARGETS }

/** The paths `--path` asks for (all by default) */
function selectPaths (only) {
  if (only == null) return PATHS
  const names = new Set(only.flatMap(n => n === 'libp2p' ? LIBP2P_VARIANTS : [n]))
  for (const n of names) {
    if (!PATHS.includes(n)) throw new Error(`Unknown path "${n}" (paths: libp2p, ${PATHS.join(', ')})`)
  }
  return PATHS.filter(n => names.has(n))
}

/**
 * The measurements as rows: every path's, then `libp2p` as the cheaper
 * variant per metric, ratios against `libp2p`, and the `.vs-a2a` rows
 */
function toRows (m) {
  const byPath = new Map(m)
  const variants = LIBP2P_VARIANTS.filter(v => byPath.has(v))
  if (variants.length > 0) {
    const best = {}
    for (const [field, , more] of Object.values(METRICS)) {
      const values = variants.map(v => byPath.get(v)[field])
      best[field] = more ? Math.max(...values) : Math.min(...values)
    }
    byPath.set('libp2p', best)
  }
  const order = ['task', 'task-before', 'task-envelope', 'task-v1', 'task-envelope-before', 'libp2p', ...PATHS.filter(p => !p.startsWith('task'))]
  const rows = []
  for (const path of order.filter(p => byPath.has(p))) {
    const values = byPath.get(path)
    for (const [metric, [field, unit]] of Object.entries(METRICS)) {
      const targets = TARGETS[path]?.[metric] ?? {}
      rows.push(row(`${path}.${metric}`, values[field], unit, byPath.get('libp2p')?.[field], targets.libp2p))
      if (targets.a2a != null && byPath.has('a2a')) {
        rows.push(row(`${path}.${metric}.vs-a2a`, values[field], unit, byPath.get('a2a')[field], targets.a2a))
      }
    }
  }
  return rows
}

export const taskGroup = {
  name: 'task',
  title: `the task path across two OS processes on TCP 127.0.0.1, ~100 B checked per call (baseline: the cheaper bare libp2p 3 stream; ${DEPTH} callers for throughput; CPU of both processes)`,
  async run ({ profile: base, quick, paths: only, progress }) {
    const profile = quick ? { ...base, ...QUICK_WARMUP } : base
    const names = selectPaths(only)
    const t0 = performance.now()
    progress(`starting a server and a client process for each of ${names.join(', ')}`)
    const opened = await Promise.allSettled(names.map(n => openCrossProcessPath(PATHS_MODULE, n)))
    const paths = opened.filter(o => o.status === 'fulfilled').map(o => o.value)
    try {
      const failed = opened.find(o => o.status === 'rejected')
      if (failed != null) throw failed.reason
      progress(`up in ${((performance.now() - t0) / 1000).toFixed(1)} s: ${paths.map(p => `${p.name} (server ${p.pids.server}, client ${p.pids.client})`).join(', ')}`)
      const m = await compareCrossProcess(paths, { profile, depth: DEPTH, progress })
      return toRows(m)
    } finally {
      await Promise.all(paths.map(p => p.close().catch(err => { progress(`stopping ${p.name} failed: ${err.message}`) })))
    }
  }
}
