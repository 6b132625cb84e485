/**
 * Sum the self time of `.cpuprofile` files (from `node --cpu-prof`, e.g. the
 * task group's children under IOA_BENCH_PROF=<dir>) by function, and print
 * the top ones: self ms, share of the busy time (all samples but "(idle)"),
 * and where.
 *
 *   node bench/cpuprofile-top.js [--top 30] [--by function|package] <file.cpuprofile>...
 *
 * `--by package` sums by npm package (or node: internals, or "(program)",
 * "(garbage collector)", "(idle)") instead.
 */
import { readFile } from 'node:fs/promises'
import { parseArgs } from 'node:util'

const { values, positionals } = parseArgs({
  options: { top: { type: 'string', default: '30' }, by: { type: 'string', default: 'function' } },
  allowPositionals: true
})

/** The package a script URL belongs to: `@scope/name` or `name` below node_modules, our workspace packages, or node: */
function packageOf (url) {
  if (url === '') return '(native)'
  if (url.startsWith('node:')) return 'node:internal'
  const nm = url.lastIndexOf('/node_modules/')
  if (nm >= 0) {
    const rest = url.slice(nm + '/node_modules/'.length).split('/')
    return rest[0].startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]
  }
  const ws = url.match(/\/packages\/([^/]+)\//)
  if (ws != null) return `@ioa/${ws[1]}`
  return url.replace(/^file:\/\//, '')
}

function keyOf ({ functionName, url, lineNumber }) {
  if (values.by === 'package') return url === '' && functionName.startsWith('(') ? functionName : packageOf(url)
  const where = url === '' ? '' : ` ${url.replace(/^file:\/\/.*?\/node_modules\//, '').replace(/^file:\/\/.*?\/packages\//, 'packages/')}:${lineNumber + 1}`
  return `${functionName === '' ? '(anonymous)' : functionName}${where}`
}

const self = new Map()
let total = 0
for (const file of positionals) {
  const profile = JSON.parse(await readFile(file, 'utf8'))
  const byId = new Map(profile.nodes.map(n => [n.id, n]))
  // each sample is one node; the time to the next sample is its self time
  for (let i = 0; i < profile.samples.length; i++) {
    const dt = (profile.timeDeltas[i + 1] ?? 0) / 1000
    const key = keyOf(byId.get(profile.samples[i]).callFrame)
    self.set(key, (self.get(key) ?? 0) + dt)
    total += dt
  }
}
const idle = self.get('(idle)') ?? 0
self.delete('(idle)')
const busy = total - idle
const top = [...self].sort((a, b) => b[1] - a[1]).slice(0, Number(values.top))
console.log(`${positionals.length} profile(s), ${total.toFixed(0)} ms sampled, ${busy.toFixed(0)} ms busy (${(100 * busy / total).toFixed(1)} %)`)
for (const [key, ms] of top) {
  console.log(`${ms.toFixed(1).padStart(9)} ms ${(100 * ms / busy).toFixed(1).padStart(5)} %  ${key}`)
}
