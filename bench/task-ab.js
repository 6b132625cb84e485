/**
 * Before/after on a loaded machine: the task group's paths (bench/task-paths.js)
 * open at once, each between its own two OS processes, and measured in short
 * phases that take turns (the order reversed every round), so that every path
 * sees the same load over the run; each figure is the median over the rounds.
 * With IOA_BENCH_BEFORE=<built checkout> the `*-before` paths run that
 * checkout's stack on both ends.
 *
 *   node --import ./scripts/polyfill.js bench/task-ab.js [--rounds 8] [--calls 400] [--ms 400] task task-before ...
 *
 * Per path: the median RTT of a round's sequential calls and the CPU per call
 * of both processes (client's in brackets), then calls/s and CPU per call
 * with 16 concurrent callers.
 */
import { parseArgs } from 'node:util'
import { openCrossProcessPath } from './cross-process.js'

const { values, positionals } = parseArgs({
  options: { rounds: { type: 'string', default: '8' }, calls: { type: 'string', default: '400' }, ms: { type: 'string', default: '400' } },
  allowPositionals: true
})
const PATHS_MODULE = new URL('./task-paths.js', import.meta.url).href

const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[s.length >> 1] }

const paths = []
try {
  for (const name of positionals) paths.push(await openCrossProcessPath(PATHS_MODULE, name))
  // warm: enough calls for the hot code to be optimised
  for (const p of paths) {
    await p.phase({ cmd: 'sequential', count: 1000 })
    await p.phase({ cmd: 'pipelined', depth: 16, ms: 800 })
  }
  const runs = new Map(paths.map(p => [p.name, { rtt: [], seq: [], seqClient: [], rate: [], cpu: [], client: [] }]))
  for (let round = 0; round < Number(values.rounds); round++) {
    for (const p of round % 2 === 0 ? paths : [...paths].reverse()) {
      const r = runs.get(p.name)
      const s = await p.phase({ cmd: 'sequential', count: Number(values.calls) })
      r.rtt.push(median(s.samples))
      r.seq.push(s.cpu / s.samples.length)
      r.seqClient.push(s.clientCpu / s.samples.length)
      const q = await p.phase({ cmd: 'pipelined', depth: 16, ms: Number(values.ms) })
      r.rate.push(q.done / q.elapsed * 1000)
      r.cpu.push(q.cpu / q.done)
      r.client.push(q.clientCpu / q.done)
    }
  }
  for (const [name, r] of runs) {
    console.log(`${name.padEnd(22)} sequential: RTT ${median(r.rtt).toFixed(3)} ms, CPU ${median(r.seq).toFixed(0)} µs/call (client ${median(r.seqClient).toFixed(0)}) | 16 callers: ${median(r.rate).toFixed(0)} calls/s, CPU ${median(r.cpu).toFixed(0)} µs/call (client ${median(r.client).toFixed(0)})`)
  }
} finally {
  await Promise.all(paths.map(async p => { await p.close() }))
}
