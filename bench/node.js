// Benchmark group of the assembled node (@ioa/node), for bench/index.js:
//
// - `node`: what `createIoaNode` adds, between two IoaNodes on TCP 127.0.0.1
//   in this process:
//   (a) a task round trip (/ioa/task/1.0.0: signed envelope, delegation chain,
//       task states streamed back) to a skill served by an in-process JS
//       handler, against an @ioa/transport messaging request to an echo
//       handler between the same two libp2p nodes (the baseline);
//   (b) the same skill served by an external agent program over the local
//       agent protocol ioa-agent/1 (JSON lines on stdio, spec/node-agents.md),
//       against the in-process handler (the baseline);
//   (c) throughput of each path with 32 requests in flight;
//   (d) start-up: `createIoaNode` + host one agent + `stop`, against
//       `createTransportNode` + `stop`, in memory and with a LevelDB data
//       directory.
//
// Registered in bench/index.js; run it alone (after `npx tsc -b`) with
//
//   node --import ./scripts/polyfill.js bench/index.js --group node [--quick]
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { delegate } from '@ioa/collab'
import { createIdentity } from '@ioa/interconnect'
import { createIoaNode, startExternalAgent } from '@ioa/node'
import { createTransportNode } from '@ioa/transport'
import { percentile, pipelined, rotate, row } from './measure.js'

const LISTEN = ['/ip4/127.0.0.1/tcp/0']
/** Both kinds of node get the same transports, so start-up compares like with like */
const TRANSPORTS = ['tcp']
const SKILL = 'bench.echo'
const MESSAGING_PROTOCOL = '/ioa/bench-node/1.0.0'
/** Requests in flight for the throughput rows */
const DEPTH = 32
/** The passphrase of the start-up's data directories (throw-away keys, not a secret) */
const BENCH_PASSPHRASE = 'bench keys: not a secret'
/** Longest single request, task or start-up step before the group gives up, ms */
const CALL_TIMEOUT = 30_000

const PROFILES = {
  default: { startupRuns: 12 },
  quick: { startupRuns: 3 }
}

/**
 * The external agent: a no-dependency program speaking ioa-agent/1 that
 * answers every task with its input. Written to a temp file at run time.
 */
const ECHO_PROGRAM = `// ioa-agent/1 echo (bench/node.js): every task's result is its input
const MAX_LINE = 1_048_576
const send = (msg) => { process.stdout.write(JSON.stringify(msg) + '\\n') }
send({ type: 'hello', protocol: 'ioa-agent/1', name: 'Bench echo', skills: [{ id: ${JSON.stringify(SKILL)} }] })
let pending = ''
process.stdin.setEncoding('utf8')
process.stdin.on('data', (chunk) => {
  pending += chunk
  let nl
  while ((nl = pending.indexOf('\\n')) >= 0) {
    const line = pending.slice(0, nl)
    pending = pending.slice(nl + 1)
    if (line.trim() === '') continue
    const msg = JSON.parse(line)
    if (msg.type === 'task') send({ type: 'result', task: msg.task, output: msg.input })
    else if (msg.type === 'shutdown') process.exit(0)
  }
  if (pending.length > MAX_LINE) process.exit(1)
})
process.stdin.on('end', () => { process.exit(0) })
`

async function until (fn, timeout, what) {
  const end = Date.now() + timeout
  while (true) {
    const v = await fn()
    if (v !== undefined) return v
    if (Date.now() > end) throw new Error(`${what} not met within ${timeout} ms`)
    await new Promise(resolve => setTimeout(resolve, 100))
  }
}

/** The echoed value must be the input, or the path measured something else */
function checkEcho (input, output) {
  if (output?.n !== input.n || output?.text !== input.text) {
    throw new Error(`Echo returned ${JSON.stringify(output)?.slice(0, 200)}, expected the input back`)
  }
}

let sequence = 0
/** A fresh small input: `{ n, text }` (100 characters of text) */
function nextInput () {
  return { n: ++sequence, text: 'x'.repeat(100) }
}

/** `count` sequential calls into `samples` (ms) */
async function sequential (call, count, samples) {
  for (let i = 0; i < count; i++) {
    const input = nextInput()
    const t0 = performance.now()
    const output = await call(input)
    samples.push(performance.now() - t0)
    checkEcho(input, output)
  }
}

/**
 * Two IoaNodes: `server` hosts the in-process and the external echo agents
 * and a messaging echo handler; `client` hosts the requesting agent. Returns
 * the three paths as `{ name, call(input) => Promise<output> }` and `close()`.
 */
async function openPaths (progress) {
  const closers = []
  const close = async () => {
    for (const fn of closers.reverse()) await fn().catch(err => { progress(`closing failed: ${err.message}`) })
  }
  try {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'ioa-bench-node-'))
    closers.push(() => rm(dir, { recursive: true, force: true }))
    const program = path.join(dir, 'echo-agent.mjs')
    await writeFile(program, ECHO_PROGRAM)

    const transport = { transports: TRANSPORTS }
    const server = await createIoaNode({ listen: LISTEN, transport })
    closers.push(() => server.stop())
    const client = await createIoaNode({ listen: LISTEN, transport, bootstrap: [server.addresses()[0]] })
    closers.push(() => client.stop())

    await server.transport.services.messaging.handle(MESSAGING_PROTOCOL, 'echo', (payload) => payload)
    const inproc = await server.host({
      key: 'bench-inproc',
      name: 'Bench in-process echo',
      skills: [{ id: SKILL }],
      handlers: { [SKILL]: (input) => input }
    })
    const external = await startExternalAgent(server, {
      command: [process.execPath, program],
      card: { key: 'bench-external', name: 'Bench external echo', skills: [{ id: SKILL }] },
      // the throughput rows keep more tasks in flight than the default 16
      maxConcurrentTasks: DEPTH * 2,
      // (no `signal`: aborting it would stop the running agent; the start is bounded by startTimeout)
      onLog: line => { progress(`external agent: ${line}`) }
    })
    // stopped before the nodes (closers run in reverse)
    closers.push(() => external.stop())
    progress(`external agent up (pid ${external.pid})`)

    const requester = await client.host({ key: 'bench-client', name: 'Bench client', skills: [{ id: 'bench.client' }] })
    const user = await createIdentity()
    const grant = await delegate(user, { audience: requester.did, capabilities: [{ skill: 'bench.*' }], expiresAt: Date.now() + 3_600_000 })

    await server.interconnect.announced({ signal: AbortSignal.timeout(CALL_TIMEOUT) })
    for (const did of [inproc.did, external.agent.did]) {
      await until(
        () => client.interconnect.resolve(did, { cache: false, timeout: 3_000 }).then(() => true, () => undefined),
        CALL_TIMEOUT, `resolving ${did}`)
    }
    progress('both agents resolvable from the client node')

    const task = (to) => async (input) => {
      const done = await client.tasks.submitAndWait(requester.identity, to, { skill: SKILL, input, proofs: [grant] },
        { signal: AbortSignal.timeout(CALL_TIMEOUT) })
      return done.result
    }
    const messaging = client.transport.services.messaging
    const serverPeer = server.transport.peerId
    const paths = [
      { name: 'messaging', call: (input) => messaging.request(serverPeer, MESSAGING_PROTOCOL, 'echo', input, { timeout: CALL_TIMEOUT }) },
      { name: 'inproc', call: task(inproc.did) },
      { name: 'external', call: task(external.agent.did) }
    ]
    return { paths, close }
  } catch (err) {
    await close()
    throw err
  }
}

/** Round trips (median, p95) and throughput of the three paths, taking turns */
async function measurePaths (paths, profile, progress) {
  const { rttWarmup, rttCount, throughputWarmupMs, throughputMs, rounds } = profile
  progress(`warm-up: ${rttWarmup} sequential and ${throughputWarmupMs} ms at ${DEPTH} in flight per path`)
  for (const p of paths) {
    await sequential(p.call, rttWarmup, [])
    await pipelined(p.call, { depth: DEPTH, ms: throughputWarmupMs, input: nextInput, check: checkEcho })
  }

  progress(`round trips: ${rttCount} sequential requests per path in ${rounds} rounds`)
  const samples = new Map(paths.map(p => [p.name, []]))
  for (let r = 0; r < rounds; r++) {
    const count = Math.floor(rttCount * (r + 1) / rounds) - Math.floor(rttCount * r / rounds)
    for (const p of rotate(paths, r)) await sequential(p.call, count, samples.get(p.name))
  }

  progress(`throughput: ${DEPTH} in flight, ${throughputMs} ms per path in ${rounds} rounds`)
  const totals = new Map(paths.map(p => [p.name, { done: 0, elapsed: 0 }]))
  for (let r = 0; r < rounds; r++) {
    for (const p of rotate(paths, r)) {
      const { done, elapsed } = await pipelined(p.call, { depth: DEPTH, ms: throughputMs / rounds, input: nextInput, check: checkEcho })
      const t = totals.get(p.name)
      t.done += done
      t.elapsed += elapsed
    }
  }

  const out = new Map()
  for (const p of paths) {
    const sorted = samples.get(p.name).sort((a, b) => a - b)
    const { done, elapsed } = totals.get(p.name)
    out.set(p.name, { median: percentile(sorted, 50), p95: percentile(sorted, 95), throughput: done / (elapsed / 1000) })
  }
  return out
}

/** One start-up of each kind: create, (host an agent,) stop; resolves with the ms it took */
const STARTUPS = {
  async transport (dataDir) {
    const t0 = performance.now()
    const node = await createTransportNode({ transports: TRANSPORTS, listen: LISTEN, ...(dataDir != null ? { dataDir } : {}) })
    await node.stop()
    return performance.now() - t0
  },
  async ioa (dataDir) {
    return ioaStartup(dataDir, { passphrase: BENCH_PASSPHRASE })
  },
  async 'ioa-plaintext' (dataDir) {
    return ioaStartup(dataDir, { insecurePlaintext: true })
  }
}

/** Start an IoaNode (its keys encrypted or in plaintext in `dataDir`), host an agent, stop */
async function ioaStartup (dataDir, keyStore) {
  const t0 = performance.now()
  const node = await createIoaNode({ listen: LISTEN, transport: { transports: TRANSPORTS }, ...(dataDir != null ? { dataDir, keyStore } : {}) })
  try {
    await node.host({
      key: 'startup',
      name: 'Start-up agent',
      skills: [{ id: SKILL }],
      handlers: { [SKILL]: (input) => input }
    }, { signal: AbortSignal.timeout(CALL_TIMEOUT) })
  } finally {
    await node.stop()
  }
  return performance.now() - t0
}

/**
 * Median start-up times of both kinds, in memory and with a LevelDB data
 * directory (one per kind, made by the warm-up run: the timed runs are
 * restarts of an existing node, as `ioa start` does)
 */
async function measureStartup (runs, progress) {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'ioa-bench-startup-'))
  try {
    const variants = []
    for (const storage of ['memory', 'leveldb']) {
      for (const kind of Object.keys(STARTUPS)) {
        // in memory there are no keys at rest: no plaintext variant
        if (kind === 'ioa-plaintext' && storage === 'memory') continue
        variants.push({ kind, storage, dataDir: storage === 'leveldb' ? path.join(dir, kind) : undefined, times: [] })
      }
    }
    progress(`start-up: ${runs} runs of each of ${variants.length} variants after one warm-up run each`)
    for (const v of variants) await STARTUPS[v.kind](v.dataDir)
    for (let r = 0; r < runs; r++) {
      for (const v of rotate(variants, r)) v.times.push(await STARTUPS[v.kind](v.dataDir))
    }
    return variants.map(v => ({ ...v, median: percentile(v.times.sort((a, b) => a - b), 50) }))
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
}

export const nodeGroup = {
  name: 'node',
  title: 'assembled node over TCP: task round trip to an in-process handler (baseline: @ioa/transport messaging) and to an external agent program (baseline: the in-process handler); start-up (baseline: createTransportNode)',
  async run ({ profile, quick, progress }) {
    const own = quick ? PROFILES.quick : PROFILES.default
    const rows = []

    const { paths, close } = await openPaths(progress)
    let m
    try {
      m = await measurePaths(paths, profile, progress)
    } finally {
      await close()
    }
    const messaging = m.get('messaging')
    const inproc = m.get('inproc')
    const external = m.get('external')
    rows.push(
      row('messaging.rtt.median', messaging.median, 'ms', messaging.median),
      row('messaging.rtt.p95', messaging.p95, 'ms', messaging.p95),
      row(`messaging.throughput.${DEPTH}`, messaging.throughput, 'msg/s', messaging.throughput),
      row('inproc.rtt.median', inproc.median, 'ms', messaging.median),
      row('inproc.rtt.p95', inproc.p95, 'ms', messaging.p95),
      row(`inproc.throughput.${DEPTH}`, inproc.throughput, 'msg/s', messaging.throughput),
      row('external.rtt.median', external.median, 'ms', inproc.median),
      row('external.rtt.p95', external.p95, 'ms', inproc.p95),
      row(`external.throughput.${DEPTH}`, external.throughput, 'msg/s', inproc.throughput)
    )

    const startups = await measureStartup(own.startupRuns, progress)
    for (const storage of ['memory', 'leveldb']) {
      const base = startups.find(v => v.kind === 'transport' && v.storage === storage).median
      const ioa = startups.find(v => v.kind === 'ioa' && v.storage === storage).median
      rows.push(
        row(`transport.startup.${storage}`, base, 'ms', base),
        row(`ioa.startup.${storage}`, ioa, 'ms', base)
      )
    }
    // keys at rest: the encrypted key store (keychain PBKDF2, decrypting the
    // node key and the agent key) against the same start with plaintext keys
    const plaintext = startups.find(v => v.kind === 'ioa-plaintext').median
    const encrypted = startups.find(v => v.kind === 'ioa' && v.storage === 'leveldb').median
    rows.push(
      row('ioa.startup.leveldb.plaintext', plaintext, 'ms', plaintext),
      row('ioa.startup.leveldb.encrypted', encrypted, 'ms', plaintext)
    )
    return rows
  }
}

