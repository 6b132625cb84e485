// Benchmark group `management` (bench/index.js; issue 16): what the
// management plane costs on the task path. The `task-envelope` path
// (bench/task-paths.js) between a server and a client OS process on TCP
// 127.0.0.1, with the management plane off and on (both nodes record
// libp2p's and our metrics and run the HTTP server; bench/management-paths.js),
// the paths taking turns in the same run (24 rounds, 8 with `--quick`, with
// a rotating start; two server/client process pairs per path, pooled, one
// with `--quick`).
//
// Rows: `management.metrics.rtt.median` (ms, sequential tasks, on against
// off), `.rtt.p99`, `.throughput.16` (tasks/s with 16 callers), `.cpu.per-call`
// (µs of both processes per task with 16 callers), pooled over the rounds;
// the spread of each: `.<row>.round-ratio.median`, `.min` and `.max`, the
// median, lowest and highest on/off ratio of the rounds (of their RTT
// medians, tasks/s, CPU per task). The targets are on the round ratios'
// medians (bench/README.md says why): rtt ≤ 1.05, throughput ≥ 0.95, CPU ≤ 1.05.
// Tracing: `management.tracing.*`, the same rows for the `task-tracing-on`
// path (metrics and tracing, every trace sampled, spans exported over
// OTLP/HTTP to a sink in the bench's own process, bench/otlp-sink.js, not
// in the measured ones) against off: targets (round ratios' medians)
// ≤ 1.15 (rtt, CPU), ≥ 0.87 (throughput); `.cpu.per-call.vs-metrics` against metrics on (what tracing
// adds by itself).
//
//   node --import ./scripts/polyfill.js bench/index.js --group management [--quick] [--json]
import { openCrossProcessPath, warmCrossProcess } from './cross-process.js'
import { median, percentile, rotate, row } from './measure.js'
import { OTLP_SINK_ENV, startOtlpSink } from './otlp-sink.js'

const PATHS_MODULE = new URL('./management-paths.js', import.meta.url).href
const OFF = 'task-metrics-off'
const ON = 'task-metrics-on'
const TRACED = 'task-tracing-on'
/** Concurrent callers of the throughput rows */
const DEPTH = 16
/**
 * Rounds of the comparison (the paths take turns in each); `--quick` fewer.
 * Many short rounds: on the shared machine the other processes' load comes
 * in bursts of a few hundred ms, and a burst that falls on one path's turn
 * moves that path's figures alone; the more turns, the more evenly bursts
 * fall on every path (session 14: at 8 rounds, two identical "off" paths
 * differed by up to 35 % in throughput in one run)
 */
const ROUNDS = { default: 24, quick: 8 }
/**
 * Process pairs per path: each pair does the profile's sequential tasks and
 * concurrent time (spread over the rounds), and a path's figures pool its
 * pairs'. A pair keeps the JIT state, heap and core placement it started
 * with, and one pair can read 10 % off another for a whole run: with two,
 * such a draw weighs half
 */
const PAIRS = { default: 2, quick: 1 }
/** `--quick` still warms the task path this much (less leaves its code unoptimised) */
const QUICK_WARMUP = { rttWarmup: 300, throughputWarmupMs: 500, warmBatches: 4 }

/**
 * Sequential then concurrent phases of `paths`, in `rounds` rounds with a
 * rotating start; per path name (its pairs pooled): the round medians, all
 * samples, tasks/s, CPU per task, and each phase's tasks/s and CPU per task
 * (a path's i-th phase and another's are of the same round)
 */
async function compare (paths, profile, rounds, progress) {
  const { rttCount, throughputMs } = profile
  await warmCrossProcess(paths, { profile, depth: DEPTH, progress })
  const out = new Map(paths.map(p => [p.name, { rounds: [], samples: [], done: 0, elapsed: 0, cpu: 0, roundRate: [], roundCpu: [] }]))
  progress(`${rounds} rounds: ${rttCount} sequential tasks and ${throughputMs} ms with ${DEPTH} callers per path, split over the rounds`)
  for (let r = 0; r < rounds; r++) {
    const count = Math.floor(rttCount * (r + 1) / rounds) - Math.floor(rttCount * r / rounds)
    for (const p of rotate(paths, r)) {
      const m = out.get(p.name)
      const { samples } = await p.phase({ cmd: 'sequential', count })
      m.rounds.push(median(samples))
      m.samples.push(...samples)
      const { done, elapsed, cpu } = await p.phase({ cmd: 'pipelined', depth: DEPTH, ms: throughputMs / rounds })
      m.done += done
      m.elapsed += elapsed
      m.cpu += cpu
      m.roundRate.push(done / elapsed)
      m.roundCpu.push(cpu / done)
    }
  }
  return out
}

export const managementGroup = {
  name: 'management',
  title: `the task path with the management plane (metrics, HTTP server) on vs off, across two OS processes on TCP 127.0.0.1 (baseline: off; ${DEPTH} callers for throughput; CPU of both processes)`,
  async run ({ profile: base, quick, progress }) {
    const profile = quick ? { ...base, ...QUICK_WARMUP } : base
    const pairs = quick ? PAIRS.quick : PAIRS.default
    const rounds = quick ? ROUNDS.quick : ROUNDS.default
    progress(`starting ${pairs} server and client process pair(s) for each of ${OFF}, ${ON} and ${TRACED}`)
    // the tracing path's collector runs here, outside the measured processes (they get its URL from the environment)
    const sink = await startOtlpSink()
    process.env[OTLP_SINK_ENV] = sink.url
    // the pairs of a path share its name: compare() pools their figures
    const names = Array.from({ length: pairs }, () => [OFF, ON, TRACED]).flat()
    const opened = await Promise.allSettled(names.map(n => openCrossProcessPath(PATHS_MODULE, n)))
    const paths = opened.filter(o => o.status === 'fulfilled').map(o => o.value)
    try {
      const failed = opened.find(o => o.status === 'rejected')
      if (failed != null) throw failed.reason
      const m = await compare(paths, profile, rounds, progress)
      const off = m.get(OFF)
      const sorted = (x) => [...x.samples].sort((a, b) => a - b)
      /** The rows of `on` against `off` under prefix `p` */
      const against = (p, on, { rtt, throughput }) => {
        /** The on/off ratios of one figure in each round: their median, lowest and highest (the spread) */
        const spread = (name, a, b, target) => {
          const ratios = a.map((v, i) => v / b[i])
          return [
            row(`${p}.${name}.round-ratio.median`, median(ratios), 'x', null, target),
            row(`${p}.${name}.round-ratio.min`, Math.min(...ratios), 'x', null),
            row(`${p}.${name}.round-ratio.max`, Math.max(...ratios), 'x', null)
          ]
        }
        return [
          row(`${p}.rtt.median`, median(on.samples), 'ms', median(off.samples)),
          row(`${p}.rtt.p99`, percentile(sorted(on), 99), 'ms', percentile(sorted(off), 99)),
          ...spread('rtt', on.rounds, off.rounds, { maxValue: rtt }),
          row(`${p}.throughput.${DEPTH}`, on.done / (on.elapsed / 1000), 'tasks/s', off.done / (off.elapsed / 1000)),
          ...spread(`throughput.${DEPTH}`, on.roundRate, off.roundRate, { minValue: throughput }),
          row(`${p}.cpu.per-call`, on.cpu / on.done, 'µs', off.cpu / off.done),
          ...spread('cpu.per-call', on.roundCpu, off.roundCpu, { maxValue: rtt })
        ]
      }
      const metrics = m.get(ON)
      const traced = m.get(TRACED)
      return [
        ...against('management.metrics', metrics, { rtt: 1.05, throughput: 0.95 }),
        ...against('management.tracing', traced, { rtt: 1.15, throughput: 0.87 }),
        row('management.tracing.cpu.per-call.vs-metrics', traced.cpu / traced.done, 'µs', metrics.cpu / metrics.done)
      ]
    } finally {
      await Promise.all(paths.map(p => p.close().catch(err => { progress(`stopping ${p.name} failed: ${err.message}`) })))
      delete process.env[OTLP_SINK_ENV]
      await sink.close()
    }
  }
}
