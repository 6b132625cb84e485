/**
 * Benchmarks of the Internet of Agents stack. See bench/README.md.
 *
 *   npm run bench                      # build, then a table on stdout
 *   npm run bench -- --quick           # fewer iterations (smoke run)
 *   npm run --silent bench -- --json   # one JSON object per line and measurement
 *
 * or, after `npx tsc -b`:
 *
 *   node --import ./scripts/polyfill.js bench/index.js [--quick] [--json]
 *
 * The file holds a list of benchmark groups (`GROUPS`). A group is
 * `{ name, title, run(ctx) }`; `run` returns measurement rows
 * `{ name, value, unit, baseline, ratio, target? }` where `target` is
 * `{ max }` or `{ min }` on `ratio`. Add a group to the list to add benchmarks.
 * The process always exits 0 unless a benchmark crashed: targets are
 * reported, not enforced.
 */
import os from 'node:os'
import { parseArgs } from 'node:util'
import { createTransportNode } from '@ioa/transport'
import { discoveryGroup } from './discovery.js'
import { hostingGroup } from './interconnect.js'
import { orchestrationGroup, dagGroup, chainGroup, replayGroup } from './collab.js'
import { percentile, pipelined, rotate } from './measure.js'
import { ECHO_PROTOCOL, lpEchoClient, netEchoClient, serveLpEcho, startNetEchoServer } from './echo-wire.js'
import { nodeGroup } from './node.js'
import { soakGroup } from './soak.js'
import { coldGroup } from './cold.js'
import { teamGroup } from './teams.js'
import { taskGroup } from './task.js'
import { managementGroup } from './management.js'

// ---------------------------------------------------------------------------
// options

const PROFILES = {
  default: {
    /** sequential requests per path and size before anything is timed */
    rttWarmup: 500,
    /** sequential requests timed per path and size (split over the rounds) */
    rttCount: 2000,
    /** requests in flight for throughput */
    depth: 64,
    /** pipelined warm-up per path and size, in ms */
    throughputWarmupMs: 500,
    /** timed pipelined run per path and size (split over the rounds), in ms */
    throughputMs: 3000,
    /** the paths take turns this many times, so drift hits all of them alike */
    rounds: 4
  },
  quick: {
    rttWarmup: 100,
    rttCount: 300,
    depth: 64,
    throughputWarmupMs: 150,
    throughputMs: 600,
    rounds: 2
  }
}

/** The whole run is aborted (exit code 1) after this long */
const WATCHDOG_MS = 20 * 60_000

/** After the run, wait this long for the event loop to empty before forcing exit */
const EXIT_GRACE_MS = 5_000

const USAGE = `Usage: node --import ./scripts/polyfill.js bench/index.js [options]

  --quick           fewer iterations (smoke run, a few seconds)
  --json            one JSON object per line: {name, value, unit, baseline, ratio}
  --group <name>    run only this group (repeatable); groups: %GROUPS%
  --path <name>     echo group: run only this path (repeatable): transport,
                    libp2p, net (for profiling; without libp2p there is no baseline)
  --rtt-count <n>   sequential requests timed per RTT measurement
  --depth <n>       requests in flight for throughput
  --duration <ms>   length of each throughput measurement
  --soak-seconds <n>  soak group: length of the run (default 75; --quick 20)
  --soak-rate <n>   soak group: tasks started per second (default 50)
  --soak-keep-all   soak group: no retention limit (to see the growth it stops)
  --load            discovery group: run it all beside a CPU load of one core
  -h, --help        this text`

function parseOptions (argv) {
  const { values } = parseArgs({
    args: argv,
    options: {
      quick: { type: 'boolean', default: false },
      json: { type: 'boolean', default: false },
      group: { type: 'string', multiple: true },
      path: { type: 'string', multiple: true },
      'rtt-count': { type: 'string' },
      depth: { type: 'string' },
      duration: { type: 'string' },
      'soak-seconds': { type: 'string' },
      'soak-rate': { type: 'string' },
      'soak-keep-all': { type: 'boolean', default: false },
      load: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false }
    },
    strict: true
  })
  const profile = { ...(values.quick ? PROFILES.quick : PROFILES.default) }
  const positive = (flag, value) => {
    const n = Number(value)
    if (!Number.isInteger(n) || n <= 0) {
      throw new Error(`--${flag} needs a positive integer, got "${value}"`)
    }
    return n
  }
  if (values['rtt-count'] != null) profile.rttCount = positive('rtt-count', values['rtt-count'])
  if (values.depth != null) profile.depth = positive('depth', values.depth)
  if (values.duration != null) profile.throughputMs = positive('duration', values.duration)
  const soak = { keepAll: values['soak-keep-all'] }
  if (values['soak-seconds'] != null) soak.seconds = positive('soak-seconds', values['soak-seconds'])
  if (values['soak-rate'] != null) soak.rate = positive('soak-rate', values['soak-rate'])
  return {
    soak,
    quick: values.quick,
    load: values.load,
    json: values.json,
    help: values.help,
    groups: values.group,
    paths: values.path,
    profile
  }
}

// ---------------------------------------------------------------------------
// measurement helpers

function checkEcho (sent, received) {
  if (received?.byteLength !== sent.byteLength) {
    throw new Error(`Echo returned ${received?.byteLength} bytes, sent ${sent.byteLength}`)
  }
}

/**
 * Time `count` sequential calls (one in flight) into `samples` from `offset`,
 * in ms
 */
async function timeSequential (call, payload, count, samples, offset) {
  for (let i = 0; i < count; i++) {
    const t0 = performance.now()
    const answer = await call(payload)
    samples[offset + i] = performance.now() - t0
    checkEcho(payload, answer)
  }
}

/**
 * Compare `paths` (each `{ name, call }`) on one payload: a warm-up, then RTT
 * of sequential calls (median, p99 in ms) and pipelined throughput (msg/s),
 * the paths taking turns over `rounds`. Returns rows named
 * `<path>.rtt.median.<label>`, `<path>.rtt.p99.<label>`,
 * `<path>.throughput.<label>`.
 */
async function comparePaths (paths, payload, label, profile, progress) {
  const { rttWarmup, rttCount, depth, throughputWarmupMs, throughputMs, rounds } = profile

  progress(`warm-up ${label}`)
  for (const path of paths) {
    await timeSequential(path.call, payload, rttWarmup, new Float64Array(rttWarmup), 0)
    await pipelined(path.call, { depth, ms: throughputWarmupMs, input: () => payload, check: checkEcho })
  }

  progress(`rtt ${label}: ${rttCount} sequential requests per path`)
  const samples = new Map(paths.map(p => [p.name, new Float64Array(rttCount)]))
  for (let r = 0; r < rounds; r++) {
    const from = Math.floor(rttCount * r / rounds)
    const to = Math.floor(rttCount * (r + 1) / rounds)
    for (const path of rotate(paths, r)) {
      await timeSequential(path.call, payload, to - from, samples.get(path.name), from)
    }
  }

  progress(`throughput ${label}: ${depth} in flight, ${throughputMs} ms per path`)
  const totals = new Map(paths.map(p => [p.name, { done: 0, elapsed: 0 }]))
  for (let r = 0; r < rounds; r++) {
    for (const path of rotate(paths, r)) {
      const { done, elapsed } = await pipelined(path.call, { depth, ms: throughputMs / rounds, input: () => payload, check: checkEcho })
      const t = totals.get(path.name)
      t.done += done
      t.elapsed += elapsed
    }
  }

  const rows = []
  for (const path of paths) {
    const sorted = samples.get(path.name).sort()
    const { done, elapsed } = totals.get(path.name)
    rows.push(
      { name: `${path.name}.rtt.median.${label}`, value: percentile(sorted, 50), unit: 'ms' },
      { name: `${path.name}.rtt.p99.${label}`, value: percentile(sorted, 99), unit: 'ms' },
      { name: `${path.name}.throughput.${label}`, value: done / (elapsed / 1000), unit: 'msg/s' }
    )
  }
  return rows
}

/** Fill in `baseline` and `ratio` from the row named `<baselinePath>.<metric>` */
function withBaselines (rows, baselinePath) {
  const byName = new Map(rows.map(r => [r.name, r]))
  return rows.map(row => {
    const metric = row.name.slice(row.name.indexOf('.') + 1)
    const base = byName.get(`${baselinePath}.${metric}`)
    const baseline = base?.value ?? null
    const ratio = baseline != null && baseline !== 0 ? row.value / baseline : null
    return { ...row, baseline, ratio }
  })
}

// ---------------------------------------------------------------------------
// echo paths: each opens a client `call(payload) => Promise<bytes>` to an echo
// server and returns `{ call, close }`

const MESSAGING_PROTOCOL = '/ioa/bench/1.0.0'

/** (1) @ioa/transport messaging request/response to an echo handler */
async function openTransportPath ({ server, client }) {
  await server.services.messaging.handle(MESSAGING_PROTOCOL, 'echo', (payload) => payload)
  const peer = server.peerId
  const messaging = client.services.messaging
  return {
    call: (payload) => messaging.request(peer, MESSAGING_PROTOCOL, 'echo', payload, { timeout: 30_000 }),
    close: async () => {
      await server.services.messaging.unhandle(MESSAGING_PROTOCOL)
    }
  }
}

/** (2) one long-lived bare libp2p stream, `lpStream` framing, echo server */
async function openLibp2pPath ({ server, client }) {
  await server.handle(ECHO_PROTOCOL, (stream) => { serveLpEcho(stream) })
  const stream = await client.dialProtocol(server.peerId, ECHO_PROTOCOL, { signal: AbortSignal.timeout(10_000) })
  const echo = lpEchoClient(stream)
  return {
    call: echo.call,
    close: async () => {
      await echo.close()
      await server.unhandle(ECHO_PROTOCOL)
    }
  }
}

/** (3) a plain `node:net` socket, same framing: the physical limit */
async function openNetPath () {
  const server = await startNetEchoServer()
  const echo = await netEchoClient(server.port)
  return {
    call: echo.call,
    close: async () => {
      await echo.close()
      await server.close()
    }
  }
}

// ---------------------------------------------------------------------------
// groups

const SIZES = [
  { label: '100B', bytes: 100 },
  { label: '1KiB', bytes: 1024 }
]

/**
 * Request/response echo through three paths on TCP loopback, side by side:
 * `transport` (@ioa/transport messaging), `libp2p` (bare long-lived libp2p
 * stream with lpStream framing, the baseline) and `net` (node:net socket with
 * the same framing).
 */
const echoGroup = {
  name: 'echo',
  title: 'request/response echo on TCP loopback (baseline: bare libp2p stream)',
  async run ({ profile, progress, paths: only }) {
    const init = { transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'] }
    const nodes = []
    const paths = []
    try {
      const server = await createTransportNode(init)
      nodes.push(server)
      const client = await createTransportNode(init)
      nodes.push(client)
      await client.dial(server.getMultiaddrs()[0], { signal: AbortSignal.timeout(10_000) })

      const openers = { transport: openTransportPath, libp2p: openLibp2pPath, net: openNetPath }
      for (const name of only ?? Object.keys(openers)) {
        if (openers[name] == null) {
          throw new Error(`Unknown path "${name}" (paths: ${Object.keys(openers).join(', ')})`)
        }
        paths.push({ name, ...await openers[name]({ server, client }) })
      }

      const rows = []
      for (const size of SIZES) {
        const payload = new Uint8Array(size.bytes)
        for (let i = 0; i < payload.length; i++) payload[i] = i & 0xff
        rows.push(...await comparePaths(paths, payload, size.label, profile, progress))
      }
      return withBaselines(rows, 'libp2p').map(row => {
        if (/^transport\.rtt\.median\./.test(row.name)) return { ...row, target: { max: 1.3 } }
        if (/^transport\.throughput\./.test(row.name)) return { ...row, target: { min: 0.8 } }
        return row
      })
    } finally {
      for (const path of paths.reverse()) {
        await path.close().catch(err => { progress(`closing ${path.name} failed: ${err.message}`) })
      }
      await Promise.all(nodes.map(node => node.stop()))
    }
  }
}

/** Benchmark groups, run in this order. Add new groups here. */
const GROUPS = [
  echoGroup,
  discoveryGroup,
  hostingGroup,
  chainGroup,
  replayGroup,
  orchestrationGroup,
  dagGroup,
  nodeGroup,
  coldGroup,
  teamGroup,
  taskGroup,
  managementGroup,
  // only when asked for (`--group soak`): it runs for over a minute
  soakGroup
]

// ---------------------------------------------------------------------------
// output

function round (value, unit) {
  if (value == null) return null
  if (unit === 'msg/s') return Math.round(value)
  return Number(value.toPrecision(4))
}

function toJsonRow (row) {
  return {
    name: row.name,
    value: round(row.value, row.unit),
    unit: row.unit,
    baseline: round(row.baseline, row.unit),
    ratio: row.ratio == null ? null : Number(row.ratio.toFixed(3))
  }
}

function verdict (row) {
  if (row.target?.maxValue != null) {
    return { text: `<= ${row.target.maxValue} ${row.unit}`, pass: row.value <= row.target.maxValue }
  }
  if (row.target?.minValue != null) {
    return { text: `>= ${row.target.minValue} ${row.unit}`, pass: row.value >= row.target.minValue }
  }
  if (row.target == null || row.ratio == null) return undefined
  if (row.target.max != null) {
    return { text: `<= ${row.target.max}x`, pass: row.ratio <= row.target.max }
  }
  return { text: `>= ${row.target.min}x`, pass: row.ratio >= row.target.min }
}

function formatValue (value, unit) {
  if (value == null) return '-'
  if (unit === 'msg/s') return `${Math.round(value).toLocaleString('en-US')} msg/s`
  // ms and ratios ('x', e.g. the management group's round ratios, whose targets are a few per cent) to the thousandth
  if (unit !== 'ms' && unit !== 'x') return `${value.toFixed(1)} ${unit}`
  return `${value.toFixed(3)} ${unit}`
}

/**
 * A table per group: one line per metric, one column per path (the first
 * dotted segment of a row name), each cell `value (ratio to baseline)`
 */
function formatGroup (group, rows) {
  const paths = []
  const metrics = []
  const cells = new Map()
  for (const row of rows) {
    const dot = row.name.indexOf('.')
    const path = row.name.slice(0, dot)
    const metric = row.name.slice(dot + 1)
    if (!paths.includes(path)) paths.push(path)
    if (!metrics.includes(metric)) metrics.push(metric)
    cells.set(`${path}|${metric}`, row)
  }

  const header = ['metric', ...paths, 'target', '']
  const lines = [header]
  for (const metric of metrics) {
    const line = [metric]
    let target = ''
    let result = ''
    for (const path of paths) {
      const row = cells.get(`${path}|${metric}`)
      if (row == null) {
        line.push('-')
        continue
      }
      const ratio = row.ratio == null ? '' : ` (${row.ratio.toFixed(2)}x)`
      line.push(formatValue(row.value, row.unit) + ratio)
      const v = verdict(row)
      if (v != null) {
        target = `${path} ${v.text}`
        result = v.pass ? 'pass' : 'FAIL'
      }
    }
    line.push(target, result)
    lines.push(line)
  }

  const widths = header.map((_, i) => Math.max(...lines.map(l => l[i].length)))
  const text = lines.map(l => l.map((cell, i) => i === 0 ? cell.padEnd(widths[i]) : cell.padStart(widths[i])).join('  ').trimEnd())
  text.splice(1, 0, widths.map(w => '-'.repeat(w)).join('  '))
  return `${group.name}: ${group.title}\n${text.join('\n')}`
}

function targetSummary (results) {
  const lines = []
  for (const { rows } of results) {
    for (const row of rows) {
      const v = verdict(row)
      if (v != null) {
        lines.push(`  ${v.pass ? 'pass' : 'FAIL'}  ${row.name} ${row.target.maxValue != null || row.target.minValue != null ? formatValue(row.value, row.unit) : `ratio ${row.ratio.toFixed(2)}x`}, target ${v.text}`)
      }
    }
  }
  return lines
}

// ---------------------------------------------------------------------------
// main

async function main () {
  let options
  try {
    options = parseOptions(process.argv.slice(2))
  } catch (err) {
    console.error(err.message)
    console.error(USAGE.replace('%GROUPS%', GROUPS.map(g => g.name).join(', ')))
    process.exitCode = 2
    return
  }
  if (options.help) {
    console.log(USAGE.replace('%GROUPS%', GROUPS.map(g => g.name).join(', ')))
    return
  }

  const selected = options.groups == null ? GROUPS.filter(g => g !== soakGroup) : GROUPS.filter(g => options.groups.includes(g.name))
  if (selected.length === 0) {
    console.error(`No such group: ${options.groups.join(', ')} (groups: ${GROUPS.map(g => g.name).join(', ')})`)
    process.exitCode = 2
    return
  }

  const { profile } = options
  if (!options.json) {
    const cpu = os.cpus()[0]?.model ?? 'unknown cpu'
    console.log(`Node ${process.version}, ${os.cpus().length} x ${cpu}, ${options.quick ? 'quick' : 'default'} run`)
    console.log(`RTT: ${profile.rttCount} sequential requests after ${profile.rttWarmup} warm-up; ` +
      `throughput: ${profile.depth} in flight for ${profile.throughputMs} ms after ${profile.throughputWarmupMs} ms warm-up`)
    console.log('Servers and clients share this process (one event loop), so throughput counts the CPU of both ends.\n')
  }

  const watchdog = setTimeout(() => {
    console.error(`bench: still running after ${WATCHDOG_MS / 1000} s, giving up`)
    process.exit(1)
  }, WATCHDOG_MS)

  const results = []
  try {
    for (const group of selected) {
      const started = performance.now()
      const progress = (msg) => { process.stderr.write(`[${group.name}] ${msg}\n`) }
      const rows = await group.run({ profile, quick: options.quick, load: options.load, paths: options.paths, soak: options.soak, progress })
      progress(`done in ${((performance.now() - started) / 1000).toFixed(1)} s`)
      results.push({ group, rows })
      if (options.json) {
        for (const row of rows) {
          console.log(JSON.stringify(toJsonRow(row)))
        }
      } else {
        console.log(formatGroup(group, rows) + '\n')
      }
    }
  } finally {
    clearTimeout(watchdog)
  }

  const summary = targetSummary(results)
  if (summary.length > 0) {
    const text = ['Targets (reported, not enforced):', ...summary].join('\n')
    if (options.json) {
      console.error(text)
    } else {
      console.log(text)
    }
  }
}

try {
  await main()
} catch (err) {
  console.error('bench crashed:', err)
  process.exitCode = 1
}

// Everything is stopped by now; the process should exit on its own. If some
// handle is left behind, say which and exit anyway.
setTimeout(() => {
  console.error('bench: event loop still busy after the run:', process.getActiveResourcesInfo().join(', '))
  process.exit(process.exitCode ?? 0)
}, EXIT_GRACE_MS).unref()
