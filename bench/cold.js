// Benchmark group `cold` (bench/index.js): the newcomer's first result.
//
// - `cold.first-result`: a fresh OS process per trial imports @ioa/node,
//   starts a node that joins a local network of NETWORK_SIZE IoaNodes (in
//   this process, TCP on 127.0.0.1) through one bootstrap address, discovers an agent by capability and gets its first
//   task result (bench/cold/ioa-client.js); the ms from the end of the
//   import to the result. The baseline: the official @a2a-js/sdk client's
//   cold path in a fresh process (fetch the agent card, first SendMessage;
//   bench/cold/a2a-client.js) against an A2A server in its own process
//   (bench/cold/a2a-server.js), the import excluded as well.
// - `cold.start`, `cold.join`, `cold.discover`, `cold.submit`: where the
//   IoA path's time goes (node started; first connection open; first
//   discovery answer, from after the import; the submit of the first task,
//   its route resolved from what the discovery cached, to its result), same baseline.
// - `cold.first-result.first-found`: the same path taking the first agent
//   the streaming discovery verifies (the walk ends there) instead of the
//   complete, ranked `node.discover()`.
// - `cold.import`: the import of @ioa/node in a fresh process, against the
//   import of the A2A SDK client.
// - `cold.cpu.first-result`, `cold.cpu.import`: the CPU time (user + system)
//   of the trial process over the same spans, against the A2A client's: less
//   sensitive than wall-clock times to other processes on a loaded machine.
// - `cold.modules.first-result`, `cold.modules.import`: the modules the
//   process loads after the import until the first result, and in the
//   import, counted in one more trial of each kind run with a module hook
//   (bench/cold/count-modules.js; untimed): independent of the load.
//
// With COLD_BEFORE=<dir> (a built checkout of another version, with
// bench/cold/ioa-client.js copied in) its client takes turns as well, for
// `cold.first-result.before` and `cold.import.before` in the same run (and
// `cold.cpu.*.before` when bench/cold/marks.js is copied in too).
//
// Medians over the trials; the two kinds take turns. Run it alone (after
// `npx tsc -b`) with
//
//   node --import ./scripts/polyfill.js bench/index.js --group cold [--quick]
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { createIoaNode } from '@ioa/node'
import { startChild } from './child.js'
import { median, row } from './measure.js'

const NETWORK_SIZE = 10
const CAPABILITY = 'bench.cold.echo'
const LISTEN = ['/ip4/127.0.0.1/tcp/0']
/** The network's nodes on one machine: loopback is exempt from the connection limits */
const TRANSPORT = { transports: ['tcp'], allow: ['/ip4/127.0.0.1'] }
/** Longest trial or set-up step before the group gives up, ms */
const STEP_TIMEOUT = 60_000
/** Trials per kind (the issue asks for a median of at least 5) */
const PROFILES = { default: { trials: 9 }, quick: { trials: 5 } }

const here = (file) => fileURLToPath(new URL(file, import.meta.url))

/** Run `node [execArgv] file ...args` (`file` relative to this directory, or absolute), resolve with the parsed last stdout line */
async function runChild (file, args, execArgv = process.execArgv, env = process.env) {
  const child = spawn(process.execPath, [...execArgv, file.startsWith('/') ? file : here(file), ...args], { stdio: ['ignore', 'pipe', 'pipe'], env })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (d) => { stdout += d })
  child.stderr.on('data', (d) => { stderr += d })
  const timer = setTimeout(() => { child.kill('SIGKILL') }, STEP_TIMEOUT)
  const [code] = await once(child, 'exit')
  clearTimeout(timer)
  if (code !== 0) throw new Error(`${file} exited with ${code}: ${stderr.slice(-2000)}`)
  return JSON.parse(stdout.trim().split('\n').pop())
}

/**
 * One untimed trial of a client with the module counter preloaded
 * (bench/cold/count-modules.js): its `modulesImport` and `modulesFirstResult`
 */
async function countModules (file, args) {
  const dir = await mkdtemp(join(tmpdir(), 'ioa-cold-modules-'))
  try {
    const env = { ...process.env, COLD_MODULES: join(dir, 'modules.txt') }
    return await runChild(file, args, ['--import', here('./cold/count-modules.js'), ...process.execArgv], env)
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
}

/** The A2A server in its own process (bench/child.js); resolves with its URL and a stop function */
async function startA2AServer () {
  const child = startChild(new URL('./cold/a2a-server.js', import.meta.url), [])
  try {
    const { url } = await child.next(STEP_TIMEOUT)
    return { url, stop: child.stop }
  } catch (err) {
    await child.stop()
    throw err
  }
}

/** NETWORK_SIZE IoaNodes, each bootstrapping from the first; the last hosts the echo agent */
async function startNetwork (progress) {
  const nodes = []
  try {
    nodes.push(await createIoaNode({ listen: LISTEN, transport: TRANSPORT }))
    const first = nodes[0].addresses()[0]
    while (nodes.length < NETWORK_SIZE) {
      nodes.push(await createIoaNode({ listen: LISTEN, transport: TRANSPORT, bootstrap: [first] }))
    }
    const host = nodes[nodes.length - 1]
    await host.host({ key: 'cold-echo', name: 'Cold echo', skills: [{ id: CAPABILITY }], handlers: { [CAPABILITY]: (input) => input } })
    await host.interconnect.announced({ signal: AbortSignal.timeout(STEP_TIMEOUT) })
    progress(`network of ${nodes.length} nodes up, ${CAPABILITY} announced`)
    return nodes
  } catch (err) {
    for (const n of nodes) await n.stop()
    throw err
  }
}

export const coldGroup = {
  name: 'cold',
  title: 'cold start: a fresh process joins a 10-node network, discovers an agent and gets its first task result (baseline: the @a2a-js/sdk client fetching the card and sending its first message, fresh process)',
  async run ({ quick, progress }) {
    const { trials } = quick ? PROFILES.quick : PROFILES.default
    const nodes = await startNetwork(progress)
    const a2a = await startA2AServer()
    const ioaRuns = []
    const firstRuns = []
    const beforeRuns = []
    const a2aRuns = []
    const before = process.env.COLD_BEFORE
    const failures = {}
    /** The untimed counting trials' answers, per kind */
    const counted = {}
    try {
      progress(`${trials} trials of each kind, taking turns`)
      for (let t = 0; t < trials; t++) {
        // the bootstrap node changes per trial; never the agent's host
        const bootstrap = nodes[t % (NETWORK_SIZE - 1)].addresses()[0]
        // a trial that fails (no agent found in time on a loaded machine) is counted, not fatal
        const got = {}
        const trial = (name, runs, run) => async () => {
          try {
            got[name] = await run()
            runs.push(got[name])
          } catch (err) {
            failures[name] = (failures[name] ?? 0) + 1
            progress(`trial ${t + 1}: ${name} failed: ${String(err?.message ?? err).split('\n').find(l => /Error/.test(l)) ?? err}`)
          }
        }
        const kinds = [
          trial('a2a', a2aRuns, async () => runChild('./cold/a2a-client.js', [a2a.url])),
          trial('ioa', ioaRuns, async () => runChild('./cold/ioa-client.js', [bootstrap, CAPABILITY])),
          trial('first-found', firstRuns, async () => runChild('./cold/ioa-client.js', [bootstrap, CAPABILITY, 'first']))
        ]
        if (before != null) {
          kinds.push(trial('before', beforeRuns, async () => runChild(`${before}/bench/cold/ioa-client.js`, [bootstrap, CAPABILITY], ['--import', `${before}/scripts/polyfill.js`])))
        }
        for (const k of kinds.slice(t % kinds.length).concat(kinds.slice(0, t % kinds.length))) await k()
        const ms = (name) => got[name] != null ? `${got[name].firstResult.toFixed(0)} ms` : 'failed'
        const last = got.ioa
        progress(`trial ${t + 1}: ioa ${ms('ioa')}${last != null ? ` (started ${last.started.toFixed(0)}, joined ${last.joined?.toFixed(0)}, discovered ${last.discovered.toFixed(0)})` : ''}, first-found ${ms('first-found')}, a2a ${ms('a2a')}${before != null ? `, before ${ms('before')}` : ''}`)
      }
      progress('one more trial of each kind, counting the modules loaded')
      counted.ioa = await countModules('./cold/ioa-client.js', [nodes[0].addresses()[0], CAPABILITY])
      counted.a2a = await countModules('./cold/a2a-client.js', [a2a.url])
    } finally {
      await a2a.stop()
      for (const n of nodes) await n.stop()
    }
    if (Object.keys(failures).length > 0) progress(`failed trials: ${JSON.stringify(failures)}`)
    const a2aFirst = median(a2aRuns.map(r => r.firstResult))
    const a2aImport = median(a2aRuns.map(r => r.import))
    const rows = [
      row('cold.first-result', median(ioaRuns.map(r => r.firstResult)), 'ms', a2aFirst, { max: 6 }),
      row('cold.first-result.first-found', median(firstRuns.map(r => r.firstResult)), 'ms', a2aFirst),
      row('cold.start', median(ioaRuns.map(r => r.started)), 'ms', a2aFirst),
      row('cold.join', median(ioaRuns.map(r => r.joined ?? NaN)), 'ms', a2aFirst),
      row('cold.discover', median(ioaRuns.map(r => r.discovered)), 'ms', a2aFirst),
      row('cold.submit', median(ioaRuns.map(r => r.firstResult - r.discovered)), 'ms', a2aFirst),
      row('cold.import', median(ioaRuns.map(r => r.import)), 'ms', a2aImport),
      row('cold.cpu.first-result', median(ioaRuns.map(r => r.cpuFirstResult)), 'ms', median(a2aRuns.map(r => r.cpuFirstResult))),
      row('cold.cpu.import', median(ioaRuns.map(r => r.cpuImport)), 'ms', median(a2aRuns.map(r => r.cpuImport))),
      row('cold.modules.first-result', counted.ioa.modulesFirstResult, 'modules', counted.a2a.modulesFirstResult),
      row('cold.modules.import', counted.ioa.modulesImport, 'modules', counted.a2a.modulesImport)
    ]
    if (beforeRuns.length > 0) {
      rows.push(
        row('cold.first-result.before', median(beforeRuns.map(r => r.firstResult)), 'ms', a2aFirst),
        row('cold.start.before', median(beforeRuns.map(r => r.started)), 'ms', a2aFirst),
        row('cold.discover.before', median(beforeRuns.map(r => r.discovered)), 'ms', a2aFirst),
        row('cold.import.before', median(beforeRuns.map(r => r.import)), 'ms', a2aImport)
      )
      // a before build whose client reports CPU time (this directory's ioa-client.js and marks.js copied in)
      if (beforeRuns.every(r => r.cpuFirstResult != null)) {
        rows.push(
          row('cold.cpu.first-result.before', median(beforeRuns.map(r => r.cpuFirstResult)), 'ms', median(a2aRuns.map(r => r.cpuFirstResult))),
          row('cold.cpu.import.before', median(beforeRuns.map(r => r.cpuImport)), 'ms', median(a2aRuns.map(r => r.cpuImport)))
        )
      }
    }
    return rows
  }
}
