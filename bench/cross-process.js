/**
 * The cross-process harness of the benchmarks: every path runs between two
 * OS processes of its own on 127.0.0.1, a server and a client, both children
 * of the bench (bench/child.js: JSON lines on stdin/stdout), so that neither
 * end shares an event loop, a heap or a GC with the other or with the bench.
 *
 * A path is defined in a module that exports `paths`, an object of
 *
 *   name: {
 *     serve () => Promise<{ address, close () }>,   // in the server process
 *     connect (address) => Promise<{ call (n), close () }>  // in the client
 *   }
 *
 * `address` is any JSON value (a multiaddr, a URL, a port). `call(n)` makes
 * call number `n` (its own payload, made from `n`), checks the answer and
 * throws on a wrong one. `openCrossProcessPath(moduleUrl, name)` starts the
 * server child, hands its address to the client child, and returns a handle
 * on which `compareCrossProcess` runs warm-up, sequential and concurrent
 * phases, the paths taking turns with a rotating start; each phase reports
 * the client's calls and the CPU time (`process.cpuUsage()`, user + system)
 * both processes spent in it.
 *
 * With IOA_BENCH_PROF=<dir> every child runs under `node --cpu-prof` and
 * writes `<dir>/<path>-<role>.cpuprofile` when it stops (sum them up with
 * bench/cpuprofile-top.js). IOA_BENCH_NODE_FLAGS="--trace-gc ..." gives
 * every child these node flags too.
 *
 * Run as a script it is the child: `cross-process.js --cross-process-child
 * <server|client> <module URL> <path>`.
 */
import { createInterface } from 'node:readline'
import { pathToFileURL } from 'node:url'
import { startChild } from './child.js'
import { percentile, pipelined, rotate, untilSteady } from './measure.js'

const CHILD_FLAG = '--cross-process-child'
/** Longest start of a child (its imports, a node, an announcement), ms */
const START_TIMEOUT = 120_000

/** CPU time of this process so far, µs (user + system) */
function cpuNow () {
  const { user, system } = process.cpuUsage()
  return user + system
}

/** The node flags of a child: IOA_BENCH_NODE_FLAGS (space-separated, e.g. `--trace-gc`), and `--cpu-prof` into IOA_BENCH_PROF, when set */
function profileFlags (name, role) {
  const extra = (process.env.IOA_BENCH_NODE_FLAGS ?? '').split(' ').filter(f => f !== '')
  const dir = process.env.IOA_BENCH_PROF
  if (dir == null || dir === '') return extra
  return [...extra, '--cpu-prof', `--cpu-prof-dir=${dir}`, `--cpu-prof-name=${name}-${role}.cpuprofile`]
}

/** One child of a path: `request(cmd)` sends a command and resolves with its answer (rejects on `{ error }`) */
function startRole (moduleUrl, name, role) {
  const child = startChild(import.meta.url, [CHILD_FLAG, role, moduleUrl, name], undefined, { execArgv: profileFlags(name, role) })
  const answer = async (what, ms) => {
    const e = await child.next(ms)
    if (e.error != null) throw new Error(`${name} ${role}: ${what}: ${e.error}`)
    return e
  }
  return {
    child,
    answer,
    request: (cmd, ms = START_TIMEOUT) => {
      child.send(cmd)
      return answer(cmd.cmd, ms)
    }
  }
}

/**
 * Start the server and the client process of path `name` of the module at
 * `moduleUrl` and connect them. Resolves with `{ name, phase(cmd), close() }`
 * where `phase` runs a `sequential` (`{ count }`) or `pipelined` (`{ depth,
 * ms }`) command in the client and adds the server's CPU of that time.
 */
export async function openCrossProcessPath (moduleUrl, name) {
  const server = startRole(moduleUrl, name, 'server')
  let client
  try {
    const { address } = await server.answer('start', START_TIMEOUT)
    client = startRole(moduleUrl, name, 'client')
    await client.request({ cmd: 'connect', address })
  } catch (err) {
    await client?.child.stop()
    await server.child.stop()
    throw err
  }
  return {
    name,
    pids: { server: server.child.pid, client: client.child.pid },
    async phase (cmd) {
      const before = await server.request({ cmd: 'cpu' })
      const result = await client.request(cmd, 10 * 60_000)
      const after = await server.request({ cmd: 'cpu' })
      return { ...result, cpu: result.cpu + after.cpu - before.cpu, clientCpu: result.cpu }
    },
    async close () {
      await client.child.stop()
      await server.child.stop()
    }
  }
}

/** Sequential calls in one batch of the warm-up (`profile.warmBatch` overrides) */
const WARM_BATCH = 1_000

/**
 * Warm every path of `paths` until it is steady (measure.js `untilSteady`):
 * batches of `WARM_BATCH` sequential calls, each followed by
 * `throughputWarmupMs` with `depth` callers, until two batches in a row
 * have a median RTT no better than 0.97 of the path's best, at least
 * `profile.rttWarmup` calls and at most `profile.warmBatches` batches
 * (default 12); the progress line of each path says how many it took
 */
export async function warmCrossProcess (paths, { profile, depth, progress }) {
  const { rttWarmup, throughputWarmupMs } = profile
  const maxBatches = profile.warmBatches ?? 12
  const batch = profile.warmBatch ?? WARM_BATCH
  progress(`warm-up: batches of ${batch} sequential calls and ${throughputWarmupMs} ms with ${depth} callers per path, until steady (at most ${maxBatches})`)
  for (const p of paths) {
    const batchMedian = async () => {
      const { samples } = await p.phase({ cmd: 'sequential', count: batch })
      await p.phase({ cmd: 'pipelined', depth, ms: throughputWarmupMs })
      return percentile(samples.sort((a, b) => a - b), 50)
    }
    const { runs, best } = await untilSteady([batchMedian], { flat: 2, minRuns: Math.ceil(rttWarmup / batch), maxRuns: maxBatches })
    progress(`  ${p.name}: ${runs * batch} calls in ${runs} batches, best batch median ${best[0].toFixed(3)} ms`)
  }
}

/**
 * Measure `paths` (from `openCrossProcessPath`) side by side: a warm-up of
 * each, then `rttCount` sequential calls split over `rounds`, then `depth`
 * concurrent callers for `throughputMs` split over `rounds`; in every round
 * the paths take turns, starting with the next one. Resolves with a Map of
 * path name to `{ median, p99 }` (ms), `throughput` (calls/s), `cpuPerCall`
 * (µs of both processes per call, concurrent phase), `cpuPerCallClient` (the
 * client's share of it) and
 * `cpuPerCallSequential` (the same over the sequential calls).
 */
export async function compareCrossProcess (paths, { profile, depth, progress }) {
  const { rttCount, throughputMs, rounds } = profile
  await warmCrossProcess(paths, { profile, depth, progress })

  progress(`round trips: ${rttCount} sequential calls per path in ${rounds} rounds`)
  const seq = new Map(paths.map(p => [p.name, { samples: [], cpu: 0 }]))
  for (let r = 0; r < rounds; r++) {
    const count = Math.floor(rttCount * (r + 1) / rounds) - Math.floor(rttCount * r / rounds)
    for (const p of rotate(paths, r)) {
      const { samples, cpu } = await p.phase({ cmd: 'sequential', count })
      const s = seq.get(p.name)
      s.samples.push(...samples)
      s.cpu += cpu
    }
  }

  progress(`throughput: ${depth} concurrent callers, ${throughputMs} ms per path in ${rounds} rounds`)
  const con = new Map(paths.map(p => [p.name, { done: 0, elapsed: 0, cpu: 0, clientCpu: 0 }]))
  for (let r = 0; r < rounds; r++) {
    for (const p of rotate(paths, r)) {
      const { done, elapsed, cpu, clientCpu } = await p.phase({ cmd: 'pipelined', depth, ms: throughputMs / rounds })
      const t = con.get(p.name)
      t.done += done
      t.elapsed += elapsed
      t.cpu += cpu
      t.clientCpu += clientCpu
    }
  }

  const out = new Map()
  for (const p of paths) {
    const s = seq.get(p.name)
    const sorted = s.samples.sort((a, b) => a - b)
    const t = con.get(p.name)
    out.set(p.name, {
      median: percentile(sorted, 50),
      p99: percentile(sorted, 99),
      throughput: t.done / (t.elapsed / 1000),
      cpuPerCall: t.cpu / t.done,
      cpuPerCallClient: t.clientCpu / t.done,
      cpuPerCallSequential: s.cpu / sorted.length
    })
  }
  return out
}

// ---------------------------------------------------------------------------
// the child

function reply (msg) {
  process.stdout.write(JSON.stringify(msg) + '\n')
}

/** Answer the bench's commands, one at a time, until `stop` or the end of stdin */
async function serveCommands (handlers, close) {
  const lines = createInterface({ input: process.stdin })
  for await (const line of lines) {
    const cmd = JSON.parse(line)
    if (cmd.cmd === 'stop') break
    const handler = handlers[cmd.cmd]
    if (handler == null) {
      reply({ error: `unknown command ${cmd.cmd}` })
      continue
    }
    try {
      reply(await handler(cmd))
    } catch (err) {
      reply({ error: err.stack ?? String(err) })
    }
  }
  await close()
}

async function childMain (role, moduleUrl, name) {
  const def = (await import(moduleUrl)).paths?.[name]
  if (def == null) throw new Error(`${moduleUrl} has no path ${name}`)
  if (role === 'server') {
    let served
    try {
      served = await def.serve()
    } catch (err) {
      reply({ error: err.stack ?? String(err) })
      process.exit(1)
    }
    reply({ address: served.address })
    await serveCommands({ cpu: () => ({ cpu: cpuNow() }) }, () => served.close())
    return
  }
  let client
  let n = 0
  const call = () => client.call(++n)
  await serveCommands({
    async connect ({ address }) {
      client = await def.connect(address)
      return { connected: true }
    },
    async sequential ({ count }) {
      const samples = new Array(count)
      const cpu0 = cpuNow()
      for (let i = 0; i < count; i++) {
        const t0 = performance.now()
        await call()
        samples[i] = performance.now() - t0
      }
      return { samples, cpu: cpuNow() - cpu0 }
    },
    async pipelined ({ depth, ms }) {
      const cpu0 = cpuNow()
      const { done, elapsed } = await pipelined(call, { depth, ms, input: () => undefined, check: () => {} })
      return { done, elapsed, cpu: cpuNow() - cpu0 }
    }
  }, async () => { await client?.close() })
}

if (process.argv[2] === CHILD_FLAG && import.meta.url === pathToFileURL(process.argv[1]).href) {
  try {
    await childMain(process.argv[3], process.argv[4], process.argv[5])
  } catch (err) {
    process.stderr.write(`cross-process child: ${err.stack ?? err}\n`)
    process.exitCode = 1
  }
  // whatever a path left running (timers of a node being stopped) does not keep the child
  process.exit()
}
