// The scenario runner behind `npm run demo`: starts every node of the
// scenarios as a separate OS process (`ioa start --json`), joins them through
// a seed node, runs each scenario from an in-process driver node (the user's
// phone), prints one merged timeline, checks the outcomes and stops
// everything. Each scenario is a module `scenarios/<name>/scenario.js`
// (contract: scenarios/README.md).
import { anySignal } from 'any-signal'
import { spawn } from 'node:child_process'
import { createWriteStream } from 'node:fs'
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { createIdentity } from '@ioa/interconnect'
import { createIoaNode, loadConfig, readKeyFile } from '@ioa/node'
import { multiaddr } from '@multiformats/multiaddr'

export const SCENARIOS_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const ROOT = resolve(SCENARIOS_DIR, '..')
const IOA = join(ROOT, 'packages', 'node', 'bin', 'ioa.js')

/** Longest wait for a node process to print its ready line, ms */
const READY_TIMEOUT = 90_000
/** Longest run of one scenario, ms */
const SCENARIO_TIMEOUT = 40_000
/** Grace period of a node process after SIGTERM, ms */
const STOP_GRACE = 3_000
/** Most events kept per node process */
const MAX_EVENTS = 5_000
/** `IOA_DEMO_OTLP=<url>`: every scenario node exports its spans to this OTLP/HTTP traces endpoint (management.tracing, its node name as service.name) */
const OTLP = process.env.IOA_DEMO_OTLP != null && process.env.IOA_DEMO_OTLP !== '' ? process.env.IOA_DEMO_OTLP : undefined
/** `IOA_DEMO_LOGS=<dir>`: each node process's stdout and stderr go to `<dir>/<node>.log` too */
const LOG_DIR = process.env.IOA_DEMO_LOGS != null && process.env.IOA_DEMO_LOGS !== '' ? resolve(process.env.IOA_DEMO_LOGS) : undefined

function timeoutSignal (ms, outer) {
  return outer != null ? anySignal([outer, AbortSignal.timeout(ms)]) : AbortSignal.timeout(ms)
}

/** One `ioa start --json` process */
class NodeProcess {
  constructor (name, scenario, t0, onEvent) {
    this.name = name
    this.scenario = scenario
    this.t0 = t0
    this.onEvent = onEvent
    this.events = []
    this.waiters = new Set()
    this.stderr = []
    this.exitCode = undefined
  }

  start (config, args) {
    const argv = [IOA, 'start', '--json', '--config', config, ...args]
    this.proc = spawn(process.execPath, argv, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] })
    this.pid = this.proc.pid
    if (LOG_DIR != null) {
      // everything the process prints (its JSON lines and, with DEBUG set, its log lines), to read after a failed run
      const file = createWriteStream(join(LOG_DIR, `${this.name}.log`))
      file.on('error', err => { console.error(`${this.name}: log file: ${err.message}`) })
      this.proc.stdout.on('data', c => file.write(c))
      this.proc.stderr.on('data', c => file.write(c))
      this.proc.once('exit', () => file.end())
    }
    this.exited = new Promise(resolve => {
      this.proc.once('exit', (code, signal) => {
        this.exitCode = code ?? signal
        for (const w of this.waiters) w.reject(new Error(`${this.name} exited (${this.exitCode}) while waiting for ${w.what}`))
        this.waiters.clear()
        resolve(this.exitCode)
      })
    })
    let buffer = ''
    this.proc.stdout.setEncoding('utf8')
    this.proc.stdout.on('data', chunk => {
      buffer += chunk
      let i
      while ((i = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, i)
        buffer = buffer.slice(i + 1)
        this.line(line)
      }
    })
    this.proc.stderr.setEncoding('utf8')
    this.proc.stderr.on('data', chunk => {
      this.stderr.push(chunk)
      if (this.stderr.length > 200) this.stderr.shift()
    })
    return this.waitFor(e => e.type === 'ready', READY_TIMEOUT, 'its ready line').then(ready => {
      this.ready = ready
      return ready
    })
  }

  line (line) {
    if (line.trim() === '') return
    let msg
    try {
      msg = JSON.parse(line)
    } catch {
      this.stderr.push(line + '\n')
      return
    }
    if (msg.type === 'event') {
      const event = { at: msg.at, source: msg.source, event: msg.event, data: msg.data ?? {}, node: this.name }
      if (this.events.length < MAX_EVENTS) this.events.push(event)
      this.onEvent(this, event)
    }
    for (const w of [...this.waiters]) {
      let hit = false
      try {
        hit = w.match(msg.type === 'event' ? { ...msg, node: this.name } : msg)
      } catch {
        // a predicate that throws matches nothing
      }
      if (hit) {
        this.waiters.delete(w)
        w.resolve(msg)
      }
    }
  }

  /** Wait for a line (ready, event, …) of this process; events seen before count too */
  waitFor (match, timeout, what = 'a line') {
    if (this.ready != null && match(this.ready)) return Promise.resolve(this.ready)
    for (const e of this.events) {
      if (match({ type: 'event', ...e })) return Promise.resolve({ type: 'event', ...e })
    }
    if (this.exitCode !== undefined) return Promise.reject(new Error(`${this.name} has exited (${this.exitCode})`))
    return new Promise((resolve, reject) => {
      const w = { match, what, resolve: v => { clearTimeout(t); resolve(v) }, reject: e => { clearTimeout(t); reject(e) } }
      const t = setTimeout(() => {
        this.waiters.delete(w)
        reject(new Error(`${this.name}: no ${what} within ${timeout} ms${this.stderrTail()}`))
      }, timeout)
      this.waiters.add(w)
    })
  }

  stderrTail () {
    const tail = this.stderr.join('').trim().split('\n').slice(-3).join(' | ')
    return tail !== '' ? ` (stderr: ${tail})` : ''
  }

  did (key) {
    const a = this.ready?.agents?.find(x => x.key === key)
    if (a == null) throw new Error(`${this.name} hosts no agent ${key}`)
    return a.did
  }

  kill (signal) {
    if (this.exitCode === undefined) this.proc.kill(signal)
  }

  async stop () {
    if (this.exitCode !== undefined) return
    this.proc.kill('SIGCONT')
    this.proc.kill('SIGTERM')
    const t = setTimeout(() => this.proc.kill('SIGKILL'), STOP_GRACE)
    await this.exited
    clearTimeout(t)
  }
}

/**
 * Run the scenarios. `only`: names to run (default all); `print`: receives
 * each human-readable line (nothing is printed without it). Resolves to the
 * summary; never throws for a failed scenario (its status says so).
 */
/**
 * Run the scenarios. `dashboard`: the driver node (the phone) is the
 * management agent of the demo (its node key is the operator's, every node
 * process names it in `management.operator`) and serves the dashboard on
 * 127.0.0.1: `onDashboard` gets its login URL once it is up. `keep`: after
 * the scenarios, the nodes still running and the dashboard stay up until
 * `keep` (a promise) resolves.
 */
export async function runScenarios ({ only, print = () => {}, scenarios = ['car-assistant', 'home-security', 'festival-move'], dashboard = false, onDashboard = () => {}, keep } = {}) {
  const t0 = Date.now()
  const elapsed = at => `+${((at - t0) / 1000).toFixed(2).padStart(6)}s`
  const line = (at, who, text) => print(`${elapsed(at)}  ${who.padEnd(22)} ${text}`)

  const defs = []
  const dirs = { 'car-assistant': 'car', 'home-security': 'home', 'festival-move': 'festival' }
  for (const name of scenarios) {
    if (only != null && !only.includes(name)) continue
    const mod = await import(join(SCENARIOS_DIR, dirs[name] ?? name, 'scenario.js'))
    defs.push(mod.default)
  }

  const procs = new Map()
  let driverNode
  let tmp
  const summary = { ok: false, duration: 0, processes: 0, scenarios: [] }
  let current
  let stopping = false
  const onEvent = (proc, e) => {
    // what the nodes say while they shut down is not part of the story
    if (stopping || proc.quiet) return
    if (current != null) current.events++
    const text = describe(e)
    if (text != null) line(e.at, e.source === 'node' ? proc.name : `${proc.name}/${e.source}`, text)
  }

  // with the dashboard, every node's config names the phone's node key as its operator
  const operator = dashboard ? await createIdentity() : undefined
  const configFor = async (name, config) => {
    if (operator == null) return config
    const loaded = await loadConfig(config)
    // kept: what the config already says of management (e.g. tracing, IOA_DEMO_OTLP)
    const derived = { ...loaded, management: { ...loaded.management, operator: operator.did } }
    tmp ??= await mkdtemp(join(tmpdir(), 'ioa-demo-'))
    const path = join(tmp, `${name}.operated.json`)
    await writeFile(path, JSON.stringify(derived))
    return path
  }

  try {
    if (LOG_DIR != null) await mkdir(LOG_DIR, { recursive: true })
    // the seed: a node with no agents that everyone joins through
    // a scenario with `ownNetwork` has a seed of its own: its nodes form a network apart from the others'
    const own = defs.filter(d => d.ownNetwork === true)
    print(`Starting ${1 + own.length + defs.reduce((n, d) => n + d.nodes.length, 0)} node processes on 127.0.0.1…`)
    const seedAddrs = new Map()
    await Promise.all([{ name: 'seed', scenario: null }, ...own.map(d => ({ name: `seed-${d.name}`, scenario: d.name }))].map(async ({ name, scenario }) => {
      const seed = new NodeProcess(name, scenario, t0, onEvent)
      procs.set(name, seed)
      const ready = await seed.start(await configFor(name, join(SCENARIOS_DIR, 'seed.json')), [])
      seedAddrs.set(name, ready.addresses[0])
      line(Date.now(), name, `listening on ${ready.addresses[0]} (pid ${seed.pid})`)
    }))
    const seedAddr = seedAddrs.get('seed')

    // every scenario node; one that bootstraps from another's gateway waits for it
    const specs = defs.flatMap(d => d.nodes.map(n => ({ ...n, scenario: d.name, seed: d.ownNetwork === true ? `seed-${d.name}` : 'seed' })))
    const started = new Map()
    const startOne = async (spec) => {
      if (started.has(spec.name)) return started.get(spec.name)
      const p = (async () => {
        let config = join(SCENARIOS_DIR, spec.config)
        let args = ['--bootstrap', seedAddrs.get(spec.seed)]
        if (spec.bootstrapFromGateway != null) {
          // a node inside a domain network joins only that network, through
          // its gateway, which it names in its config (peer ids known now)
          const gw = await startOne(specs.find(s => s.name === spec.bootstrapFromGateway))
          if (gw.ready.gateway == null) throw new Error(`${spec.bootstrapFromGateway} runs no gateway`)
          const inner = gw.ready.gateway.addresses[0]
          const derived = { ...(await loadConfig(config)), behindGateways: [{ outer: gw.ready.peerId, inner: inner.slice(inner.lastIndexOf('/p2p/') + 5) }] }
          tmp ??= await mkdtemp(join(tmpdir(), 'ioa-demo-'))
          config = join(tmp, `${spec.name}.json`)
          await writeFile(config, JSON.stringify(derived))
          args = ['--bootstrap', inner]
        }
        if (OTLP != null) {
          // the node's config with tracing to the given endpoint (paths in it are absolute once loaded)
          const c = await loadConfig(config)
          tmp ??= await mkdtemp(join(tmpdir(), 'ioa-demo-'))
          config = join(tmp, `${spec.name}.traced.json`)
          await writeFile(config, JSON.stringify({ ...c, management: { ...c.management, tracing: { otlp: OTLP, serviceName: spec.name } } }))
        }
        const proc = new NodeProcess(spec.name, spec.scenario, t0, onEvent)
        procs.set(spec.name, proc)
        const ready = await proc.start(await configFor(spec.name, config), args)
        const agents = ready.agents.map(a => a.name).join(', ')
        line(Date.now(), spec.name, `up (pid ${proc.pid})${agents !== '' ? ` hosting ${agents}` : ''}${ready.gateway != null ? ` — gateway of ${ready.gateway.domain}` : ''}`)
        return proc
      })()
      started.set(spec.name, p)
      return p
    }
    // the nodes of an `ownNetwork` scenario start while the first scenarios run: twenty processes starting at once held back the others' announcements
    await Promise.all(specs.filter(s => s.seed === 'seed').map(startOne))
    summary.processes = procs.size
    const later = specs.filter(s => s.seed !== 'seed')
    let startingLater

    // every process is on 127.0.0.1: the driver, like the configs, exempts
    // loopback from the connection limits (nodes do not by default)
    driverNode = await createIoaNode({
      bootstrap: [seedAddr],
      domain: 'people.example',
      transport: { allow: ['/ip4/127.0.0.1', '/ip6/::1'], ...(operator != null ? { privateKey: operator.privateKey } : {}) },
      ...(operator != null ? { management: { http: '127.0.0.1:0', role: 'agent', operator: operator.did } } : {})
    })
    line(Date.now(), 'driver', `user's phone joined the network (peer ${driverNode.transport.peerId.toString().slice(-8)})`)
    const login = driverNode.management?.http?.loginUrl
    if (login != null) {
      summary.dashboard = login
      onDashboard(login)
    }

    for (const [i, def] of defs.entries()) {
      if (i === 0 && later.length > 0) {
        startingLater = Promise.all(later.map(startOne))
        // a failure is reported when its scenario's turn comes
        startingLater.catch(() => {})
      }
      if (def.ownNetwork === true) {
        // the scenarios before it are over: their nodes stop, and the phone joins this scenario's network
        print('')
        const before = new Set(defs.slice(0, i).map(d => d.name))
        const done = [...procs.values()].filter(p => before.has(p.scenario))
        for (const p of done) p.quiet = true
        await Promise.all([...done.map(p => p.stop().catch(() => {})), startingLater])
        summary.processes = procs.size
        await driverNode.transport.dial(multiaddr(seedAddrs.get(`seed-${def.name}`)), { signal: AbortSignal.timeout(10_000) })
        line(Date.now(), 'driver', `${done.length} node processes of the scenarios before stopped; the phone joined the network of ${def.name}`)
      }
      const started = Date.now()
      print('')
      print(`── ${def.title ?? def.name} ──`)
      current = { events: 0 }
      const identity = def.userKey != null ? (await readKeyFile(def.userKey, SCENARIOS_DIR)).identity : await createIdentity()
      const signal = AbortSignal.timeout(def.timeout ?? SCENARIO_TIMEOUT)
      const nodes = def.nodes.map(n => procs.get(n.name))
      const ctx = {
        node: name => {
          const p = procs.get(name)
          if (p == null) throw new Error(`No node ${name}`)
          return {
            name,
            ready: p.ready,
            pid: p.pid,
            events: p.events,
            did: key => p.did(key),
            kill: sig => p.kill(sig),
            waitForEvent: (match, timeout = 15_000, what = 'event') => p.waitFor(
              m => m.type === 'event' && (typeof match === 'function' ? match(m) : ((match.source == null || m.source === match.source) && m.event === match.event)),
              timeout, what
            ).then(m => ({ at: m.at, source: m.source, event: m.event, data: m.data ?? {}, node: name }))
          }
        },
        driver: { node: driverNode, identity },
        timeline: (who, text) => line(Date.now(), who, text),
        signal,
        deadline: ms => timeoutSignal(ms, signal)
      }
      let result
      let error
      try {
        result = await Promise.race([
          def.run(ctx),
          new Promise((_resolve, reject) => signal.addEventListener('abort', () => reject(new Error(`scenario timed out after ${def.timeout ?? SCENARIO_TIMEOUT} ms`)), { once: true }))
        ])
      } catch (err) {
        error = err
      }
      const checks = result?.checks ?? []
      const ok = error == null && checks.length > 0 && checks.every(c => c.ok)
      const entry = {
        name: def.name,
        status: ok ? 'completed' : 'failed',
        nodes: def.nodes.length,
        processes: nodes.filter(Boolean).map(p => ({ name: p.name, pid: p.pid })),
        agents: nodes.reduce((n, p) => n + (p?.ready?.agents?.length ?? 0), 0),
        steps: result?.steps ?? [],
        duration: Date.now() - started,
        events: current.events,
        checks,
        outcome: result?.outcome ?? null,
        ...(error != null ? { error: String(error?.message ?? error) } : {})
      }
      summary.scenarios.push(entry)
      print('')
      for (const c of checks) print(`  ${c.ok ? '✔' : '✘'} ${c.name}${c.detail != null ? ` — ${c.detail}` : ''}`)
      if (error != null) print(`  ✘ ${entry.error}`)
      print(`  ${def.name}: ${entry.status} in ${(entry.duration / 1000).toFixed(1)} s (${entry.nodes} processes, ${entry.agents} agents, ${entry.steps.length} steps)`)
    }
    summary.ok = summary.scenarios.length > 0 && summary.scenarios.every(s => s.status === 'completed')
    if (keep != null) {
      print('')
      print(`Kept up: ${[...procs.values()].filter(p => p.exitCode === undefined).length} node processes${summary.dashboard != null ? ` and the dashboard: ${summary.dashboard}` : ''}. Ctrl-C stops them.`)
      await keep
    }
  } catch (err) {
    summary.error = String(err?.message ?? err)
    print(`demo failed: ${summary.error}`)
  } finally {
    stopping = true
    await driverNode?.stop().catch(() => {})
    await Promise.all([...procs.values()].map(p => p.stop().catch(() => {})))
    if (tmp != null) await rm(tmp, { recursive: true, force: true }).catch(() => {})
    summary.duration = Date.now() - t0
  }
  return summary
}

/** A timeline line for an event of a node process (undefined: not shown) */
function describe (e) {
  if (typeof e.data?.text === 'string') return e.data.text
  switch (e.event) {
    // every served task's start and end: the agents tell the story themselves
    case 'task-started':
    case 'task-completed':
      return undefined
    case 'task-failed': return `task ${e.data.skill} failed: ${e.data.error?.code ?? ''} ${e.data.error?.message ?? ''}`
    case 'announced': return `agent cards published, capabilities announced in the DHT (${compact(e.data)})`
    default: return `${e.event} ${compact(e.data)}`
  }
}

function compact (data) {
  const s = JSON.stringify(data ?? {})
  return s.length > 160 ? s.slice(0, 157) + '…' : s
}
