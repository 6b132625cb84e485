/**
 * The home-security scenario's pieces (scenarios/home): the camera analysis
 * and its MCP server, the drone's external agent program on its own, and the
 * whole story over TCP — the home server, R2 and the drone's node in this
 * process, R1 in a child process so that it can really go silent (SIGSTOP),
 * the homeowner on a driver node. The story is run through the scenario's own
 * `run(ctx)`, with a context shaped like the demo runner's.
 *
 * Uses the built packages (`@ioa/node`, as the agent modules do): run
 * `npx tsc -b` first.
 */
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { delegate } from '@ioa/collab'
import { createIoaNode, loadConfig, readKeyFile, startFromConfig } from '@ioa/node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { LOOPBACK, expectErrorCode, until } from '../util.js'
import type { Identity } from '@ioa/interconnect'
import type { IoaNode, NodeLogEvent, StartedNode } from '@ioa/node'
import type { ChildProcessWithoutNullStreams } from 'node:child_process'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const HOME = join(ROOT, 'scenarios', 'home')

/** A module of scenarios/home (plain JavaScript, untyped) */
async function load (relative: string): Promise<any> {
  return await import(pathToFileURL(join(HOME, relative)).href)
}

describe('camera analysis (data/frames.json)', () => {
  it('gives each frame a deterministic verdict', async () => {
    const { analyzeFrame, loadFrames, cameraStatus } = await load('camera-analysis.js')
    const data = loadFrames()
    const fox = analyzeFrame(data, 'r1-000213')
    expect(fox).toMatchObject({ verdict: 'animal', label: 'fox', intruder: false })
    const person = analyzeFrame(data, 'r1-000216')
    expect(person).toMatchObject({ verdict: 'person', label: 'person', intruder: true, camera: 'r1-front' })
    // 0.93 × (0.7 + 0.3 × 0.86)
    expect(person.confidence).toBe(0.891)
    expect(analyzeFrame(data, 'r1-000216')).toEqual(person)
    // a stricter threshold turns the same frame into "not an intruder"
    expect(analyzeFrame(data, 'r1-000216', { threshold: 0.95 }).intruder).toBe(false)
    expect(analyzeFrame(data, 'r1-000211')).toMatchObject({ verdict: 'clear', intruder: false })
    expect(analyzeFrame(data, 'r1-000210')).toMatchObject({ verdict: 'clear', reason: 'nothing in view' })
    expect(() => analyzeFrame(data, 'r1-999999')).toThrow(expect.objectContaining({ code: 'UNKNOWN_FRAME' }))
    expect(() => analyzeFrame(data, '../../etc/passwd')).toThrow(expect.objectContaining({ code: 'UNKNOWN_FRAME' }))
    expect(() => analyzeFrame(data, 'toString')).toThrow(expect.objectContaining({ code: 'UNKNOWN_FRAME' }))
    expect(cameraStatus(data, 'r2-front')).toMatchObject({ camera: 'r2-front', online: true, robot: 'R2', frames: 5 })
    expect(() => cameraStatus(data, 'garage-cam')).toThrow(expect.objectContaining({ code: 'UNKNOWN_FRAME' }))
  })

  it('refuses malformed frame metadata, naming the frame', async () => {
    const { loadFrames } = await load('camera-analysis.js')
    const dir = mkdtempSync(join(tmpdir(), 'frames-'))
    try {
      const file = join(dir, 'frames.json')
      writeFileSync(file, JSON.stringify({ cameras: { c: {} }, frames: { 'c-000001': { camera: 'c', lux: 1, sharpness: 2, detections: [] } } }))
      expect(() => loadFrames(file)).toThrow(expect.objectContaining({ code: 'INVALID_FRAME_DATA', message: expect.stringContaining('c-000001') }))
      writeFileSync(file, '{ not json')
      expect(() => loadFrames(file)).toThrow(expect.objectContaining({ name: 'FrameDataError' }))
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})

describe('camera MCP server (stdio, @modelcontextprotocol/sdk)', () => {
  it('serves analyze_frame and get_camera_status to the home server\'s MCP client', async () => {
    const { CameraTools } = await load('agents/camera-tools.js')
    const tools = new CameraTools({ script: join(HOME, 'camera-mcp-server.js') })
    try {
      expect(await tools.connect()).toEqual(['analyze_frame', 'get_camera_status'])
      const pid: number = tools.pid
      expect(pid).toBeGreaterThan(0)
      expect(pid).not.toBe(process.pid)
      const v = await tools.call('analyze_frame', { frameId: 'r1-000216', threshold: 0.8 })
      expect(v).toMatchObject({ frameId: 'r1-000216', verdict: 'person', intruder: true, confidence: 0.891 })
      expect(await tools.call('get_camera_status', { camera: 'r1-front' })).toMatchObject({ online: true, model: 'Arducam IMX462 starlight' })
      // the tool's own error, and the SDK's input validation
      await expectErrorCode(tools.call('analyze_frame', { frameId: 'r1-999999' }), 'TOOL_FAILED')
      await expectErrorCode(tools.call('analyze_frame', { frameId: 'x'.repeat(5_000) }), 'TOOL_FAILED')
      await expectErrorCode(tools.call('analyze_frame', { frameId: 'r1-000216', threshold: 7 }), 'TOOL_FAILED')
    } finally {
      await tools.close()
    }
    await expectErrorCode(tools.call('analyze_frame', { frameId: 'r1-000216' }), 'TOOLS_CLOSED')
  })
})

describe('drone program (ioa-agent/1 on stdio, node built-ins only)', () => {
  it('says hello, accepts a dispatch it can make in time, refuses the others', async () => {
    const child = spawn(process.execPath, [join(HOME, 'drone-agent.js')], { stdio: ['pipe', 'pipe', 'pipe'] })
    const lines: any[] = []
    createInterface({ input: child.stdout }).on('line', l => { lines.push(JSON.parse(l)) })
    const next = async (match: (m: any) => boolean, what: string): Promise<any> => await until(() => lines.find(match), { timeout: 5_000, what })
    const send = (m: unknown): void => { child.stdin.write(JSON.stringify(m) + '\n') }
    try {
      const hello = await next(m => m.type === 'hello', 'hello')
      expect(hello).toMatchObject({ protocol: 'ioa-agent/1', skills: [{ id: 'drone.dispatch' }] })
      send({ type: 'welcome', protocol: 'ioa-agent/1', agent: { did: 'did:key:z6MkDrone' }, options: { droneId: 'D9', dock: { x: 0, y: 0, z: 3 }, cruiseSpeed: 20, takeoffMs: 100 } })
      await next(m => m.type === 'log' && m.event === 'ready', 'ready')

      const started = Date.now()
      send({ type: 'task', task: 't1', skill: 'drone.dispatch', input: { site: 'home', target: { zone: 'gate', x: 30, y: 40 } }, caller: 'did:key:z6Mka', root: 'did:key:z6Mkb', deadline: started + 5_000 })
      // 50 m at 20 m/s plus take-off
      expect((await next(m => m.type === 'progress' && m.task === 't1', 'accepted')).message).toMatchObject({ stage: 'accepted', droneId: 'D9', distanceM: 50, etaMs: 2_600 })
      // one at a time
      send({ type: 'task', task: 't2', skill: 'drone.dispatch', input: { target: { x: 1, y: 1 } }, deadline: null })
      expect(await next(m => m.type === 'error' && m.task === 't2', 'busy')).toMatchObject({ code: 'BUSY' })
      const result = await next(m => m.type === 'result' && m.task === 't1', 'result')
      expect(result.output).toMatchObject({ droneId: 'D9', agent: 'did:key:z6MkDrone', distanceM: 50, target: { zone: 'gate' } })
      expect(result.output.arrivedAt - started).toBeGreaterThanOrEqual(2_550)
      expect(result.output.arrivedAt).toBeLessThanOrEqual(started + 5_000)

      // a deadline it cannot meet, bad input, a recall
      send({ type: 'task', task: 't3', skill: 'drone.dispatch', input: { target: { x: 30, y: 40 } }, deadline: Date.now() + 1_000 })
      expect(await next(m => m.type === 'error' && m.task === 't3', 'deadline refusal')).toMatchObject({ code: 'CANNOT_MEET_DEADLINE' })
      send({ type: 'task', task: 't4', skill: 'drone.dispatch', input: { target: { x: 'north', y: 1 } } })
      expect(await next(m => m.type === 'error' && m.task === 't4', 'input refusal')).toMatchObject({ code: 'INVALID_INPUT' })
      send({ type: 'task', task: 't5', skill: 'drone.dispatch', input: { target: { x: 3, y: 4 } } })
      await next(m => m.type === 'progress' && m.task === 't5', 't5 accepted')
      send({ type: 'cancel', task: 't5', reason: 'canceled' })
      await next(m => m.type === 'log' && m.event === 'recalled', 'recalled')
      await new Promise(resolve => setTimeout(resolve, 500))
      expect(lines.some(m => m.type === 'result' && m.task === 't5')).toBe(false)

      const exited = once(child, 'exit')
      send({ type: 'shutdown' })
      expect((await exited)[0]).toBe(0)
    } finally {
      if (child.exitCode == null) child.kill('SIGKILL')
    }
  })
})

describe('the scenario\'s checks', () => {
  const good = {
    alerts: [{ robot: 'Patrol robot R1', zone: 'west-patio', confirmed: false, verdict: 'animal', confidence: 0.8 }],
    confirmed: true,
    intruder: { detectedBy: 'Patrol robot R1', zone: 'north-wall' },
    mcp: { tool: 'analyze_frame', frameId: 'r1-000216', verdict: 'person', intruder: true, confidence: 0.9 },
    drone: { droneId: 'D1', acceptedInMs: 50, arrivedInMs: 1_800, deadlineMs: 8_000, withinDeadline: true },
    takeover: { from: 'Patrol robot R1', to: 'Patrol robot R2', reason: 'lease-lapsed', leaseMs: 300, lastSeenAt: 990, lapsedAt: 1_900, takeoverAt: 2_000, coverageAt: 2_200, detectedAfterMs: 910 }
  }
  const events = {
    homeowner: 'did:key:z6MkOwner',
    droneEvents: [{ at: 1, source: 'd1', event: 'task-started', data: { skill: 'drone.dispatch', root: 'did:key:z6MkOwner' } }],
    robot2Events: [{ at: 2, source: 'r2', event: 'patrol-started', data: { takeover: { from: 'Patrol robot R1' }, text: 'R2 takes over' } }],
    resumedAt: 3_000,
    robot1Events: [
      { at: 900, source: 'r1', event: 'tracking', data: { text: 'before the freeze' } },
      { at: 3_010, source: 'r1', event: 'resumed', data: { text: 'R1 is back', gapMs: 2_000 } }
    ]
  }

  it('hold for a good report and fail for each broken promise', async () => {
    const { homeChecks } = await load('scenario.js')
    const failed = (report: any, extra: any = {}): string[] => homeChecks({ report, frozenAt: 1_000, ...events, ...extra }).filter((c: any) => !c.ok).map((c: any) => c.name)
    expect(failed(good)).toEqual([])
    expect(failed({ ...good, drone: { ...good.drone, arrivedInMs: 8_400, withinDeadline: false } })).toEqual(['drone dispatched within the deadline'])
    expect(failed({ ...good, mcp: { ...good.mcp, verdict: 'animal', intruder: false } })).toEqual(['intruder confirmed through MCP analyze_frame'])
    expect(failed({ ...good, alerts: [] })).toEqual(['false alarm dismissed through MCP'])
    // a "takeover" before the robot went silent, or one that was not about silence
    expect(failed({ ...good, takeover: { ...good.takeover, lapsedAt: 900 } })).toEqual(['takeover after silence'])
    expect(failed({ ...good, takeover: { ...good.takeover, reason: 'failed' } })).toEqual(['takeover after silence'])
    expect(failed({ ...good, takeover: null })).toEqual(['takeover after silence', 'R2 patrols after the takeover'])
    expect(failed(good, { droneEvents: [{ ...events.droneEvents[0], data: { skill: 'drone.dispatch', root: 'did:key:z6MkSomeoneElse' } }] })).toEqual(['drone acted on the homeowner\'s delegation'])
    // R1 back on patrol by itself, or silent about its return
    expect(failed(good, { robot1Events: [...events.robot1Events, { at: 3_200, source: 'r1', event: 'tracking', data: {} }] })).toEqual(['R1 stands by when it comes back'])
    expect(failed(good, { robot1Events: events.robot1Events.slice(0, 1) })).toEqual(['R1 stands by when it comes back'])
    expect(failed(undefined, { frozenAt: undefined, resumedAt: undefined, droneEvents: [], robot1Events: [], robot2Events: [] })).toHaveLength(7)
  })
})

// ---------------------------------------------------------------------------
// the whole story

/** What the scenario's `run(ctx)` sees of a node (as the demo runner gives it) */
interface ScenarioNode {
  name: string
  ready: { peerId: string, addresses: string[], agents: Array<{ key: string, did: string, name: string }> }
  pid: number
  events: NodeLogEvent[]
  did(key: string): string
  kill(signal: NodeJS.Signals): void
  waitForEvent(match: (e: NodeLogEvent) => boolean, timeout?: number, what?: string): Promise<NodeLogEvent>
}

function scenarioNode (name: string, ready: ScenarioNode['ready'], pid: number, events: NodeLogEvent[], kill: (s: NodeJS.Signals) => void): ScenarioNode {
  return {
    name,
    ready,
    pid,
    events,
    did: key => {
      const a = ready.agents.find(x => x.key === key)
      if (a == null) throw new Error(`${name} hosts no agent ${key}`)
      return a.did
    },
    kill,
    waitForEvent: async (match, timeout = 15_000, what = 'event') => await until(() => events.find(match), { timeout, interval: 20, what: `${name}: ${what}` })
  }
}

/** A node of a config started in this process */
async function inProcess (name: string, file: string, bootstrap: string, timeline: string[]): Promise<{ started: StartedNode, view: ScenarioNode }> {
  const events: NodeLogEvent[] = []
  const config = await loadConfig(join(HOME, file))
  const started = await startFromConfig({ ...config, bootstrap: [bootstrap] }, {
    onEvent: e => {
      events.push(e)
      if (typeof e.data.text === 'string') timeline.push(`${name}/${e.source}: ${e.data.text}`)
    }
  })
  const ready = {
    peerId: started.node.transport.peerId.toString(),
    addresses: started.node.addresses(),
    agents: started.agents.map(a => ({ key: a.config.key, did: a.agent.did, name: a.config.name }))
  }
  return { started, view: scenarioNode(name, ready, process.pid, events, () => { throw new Error(`${name} runs in the test process`) }) }
}

/** `ioa start` in miniature: a node of a config in a child process, printing its ready line and events as JSON lines */
const LAUNCHER = `
import { loadConfig, startFromConfig } from '@ioa/node'
const [file, bootstrap] = process.argv.slice(1)
const out = m => { process.stdout.write(JSON.stringify(m) + '\\n') }
const config = await loadConfig(file)
const started = await startFromConfig({ ...config, bootstrap: [bootstrap] }, { onEvent: e => out({ type: 'event', ...e }) })
out({ type: 'ready', peerId: started.node.transport.peerId.toString(), addresses: started.node.addresses(), agents: started.agents.map(a => ({ key: a.config.key, did: a.agent.did, name: a.config.name })) })
process.on('SIGTERM', () => { started.stop().finally(() => process.exit(0)) })
`

async function childProcess (name: string, file: string, bootstrap: string, timeline: string[]): Promise<{ child: ChildProcessWithoutNullStreams, view: ScenarioNode }> {
  const child = spawn(process.execPath, ['--input-type=module', '-e', LAUNCHER, join(HOME, file), bootstrap], { cwd: ROOT, stdio: ['pipe', 'pipe', 'pipe'] })
  const events: NodeLogEvent[] = []
  let stderr = ''
  child.stderr.setEncoding('utf8').on('data', (c: string) => { stderr = (stderr + c).slice(-2_000) })
  let ready: ScenarioNode['ready'] | undefined
  createInterface({ input: child.stdout }).on('line', line => {
    const m = JSON.parse(line)
    if (m.type === 'ready') ready = m
    if (m.type === 'event') {
      const { type: _type, ...e } = m
      events.push(e)
      if (typeof e.data?.text === 'string') timeline.push(`${name}/${e.source}: ${e.data.text}`)
    }
  })
  const r = await until(() => {
    if (child.exitCode != null) throw new Error(`${name} exited with ${child.exitCode}: ${stderr}`)
    return ready
  }, { timeout: 20_000, what: `${name} ready` })
  return { child, view: scenarioNode(name, r, child.pid!, events, s => { if (child.exitCode == null) child.kill(s) }) }
}

describe('home security across nodes over TCP (R1 in its own process)', () => {
  const timeline: string[] = []
  let seed: IoaNode
  let driver: IoaNode
  let homeowner: Identity
  const nodes: StartedNode[] = []
  let r1: { child: ChildProcessWithoutNullStreams, view: ScenarioNode }
  const views = new Map<string, ScenarioNode>()

  beforeAll(async () => {
    seed = await createIoaNode({ domain: 'seed.example', transport: { allow: LOOPBACK } })
    const bootstrap = seed.addresses()[0]
    const [server, r2, drone, robot1] = await Promise.all([
      inProcess('home-server', 'home-server.json', bootstrap, timeline),
      inProcess('robot-2', 'robot-2.json', bootstrap, timeline),
      inProcess('drone', 'drone.json', bootstrap, timeline),
      childProcess('robot-1', 'robot-1.json', bootstrap, timeline)
    ])
    nodes.push(server.started, r2.started, drone.started)
    r1 = robot1
    for (const v of [server.view, r2.view, drone.view, r1.view]) views.set(v.name, v)
    homeowner = (await readKeyFile(join(ROOT, 'scenarios', 'keys', 'homeowner.json'), ROOT)).identity
    driver = await createIoaNode({ domain: 'people.example', bootstrap: [bootstrap], transport: { allow: LOOPBACK } })
  }, 60_000)

  afterAll(async () => {
    if (r1?.child.exitCode == null) {
      r1?.child.kill('SIGCONT')
      r1?.child.kill('SIGKILL')
    }
    await driver?.stop()
    await Promise.all(nodes.map(async n => { await n.stop() }))
    await seed?.stop()
  })

  it('the configs start the agents the story needs, the drone as an external program', async () => {
    const kinds = nodes.flatMap(n => n.agents.map(a => `${a.config.key}:${a.kind}`))
    expect(kinds).toEqual(['server:module', 'r2:module', 'd1:command'])
    expect(views.get('robot-1')!.ready.agents).toMatchObject([{ key: 'r1', name: 'Patrol robot R1' }])
    expect(views.get('robot-1')!.pid).not.toBe(process.pid)
    // the MCP server is up, in its own process
    const mcp = await views.get('home-server')!.waitForEvent(e => e.event === 'mcp-ready' || e.event === 'mcp-failed', 15_000, 'the MCP server')
    expect(mcp.event).toBe('mcp-ready')
    expect(mcp?.data).toMatchObject({ tools: ['analyze_frame', 'get_camera_status'] })
    expect(mcp?.data.pid).not.toBe(process.pid)
  })

  it('refuses to arm without the right delegation or for another site', async () => {
    const { homeownerGrant, reachable } = await load('scenario.js')
    const serverDid = views.get('home-server')!.did('server')
    await reachable(driver, serverDid, undefined, 30_000)
    // arm only: the server may not task the robots on this authority
    const armOnly = await delegate(homeowner, { audience: serverDid, capabilities: [{ skill: 'home.security.arm', constraints: { site: 'home' } }], expiresAt: Date.now() + 60_000 })
    await expectErrorCode(driver.tasks.submitAndWait(homeowner, serverDid, { skill: 'home.security.arm', input: { site: 'home' }, proofs: [armOnly] }), 'UNAUTHORIZED')
    // the grant is for site "home" and the server enforces constraints
    const grant = await homeownerGrant(homeowner, serverDid)
    await expectErrorCode(driver.tasks.submitAndWait(homeowner, serverDid, { skill: 'home.security.arm', input: { site: 'cabin' }, proofs: [grant] }), 'POLICY_DENIED')
    // only robots the server delegated to may raise alerts
    const alertInput = { site: 'home', robot: 'R9', zone: 'north-wall', x: 0, y: 14, observedAt: 'now', frameId: 'r1-000216', camera: 'r1-front', motion: 0.9, thermalC: 30, ambientC: 9, soundDb: 40 }
    const selfMade = await delegate(homeowner, { audience: serverDid, capabilities: [{ skill: 'home.security.alert', constraints: { site: 'home' } }], expiresAt: Date.now() + 60_000 })
    await expectErrorCode(driver.tasks.submitAndWait(homeowner, serverDid, { skill: 'home.security.alert', input: alertInput, proofs: [selfMade] }), 'UNAUTHORIZED')
    await expectErrorCode(driver.tasks.submitAndWait(homeowner, serverDid, { skill: 'home.security.arm', input: { site: 'home', deadlineMs: 'soon' }, proofs: [grant] }), 'INVALID_INPUT')
  })

  it('alert → MCP confirmation → drone within the deadline; R1 frozen → R2 takes over', async () => {
    const scenario = (await load('scenario.js')).default
    expect(scenario.nodes.map((n: any) => n.name)).toEqual(['home-server', 'robot-1', 'robot-2', 'drone'])
    const ctx = {
      node: (name: string) => {
        const v = views.get(name)
        if (v == null) throw new Error(`No node ${name}`)
        return v
      },
      driver: { node: driver, identity: homeowner },
      timeline: (who: string, text: string) => { timeline.push(`${who}: ${text}`) },
      signal: AbortSignal.timeout(45_000),
      deadline: (ms: number) => AbortSignal.timeout(ms)
    }
    const started = Date.now()
    const result = await scenario.run(ctx)
    const wall = Date.now() - started
    const explain = `${JSON.stringify(result.checks, null, 1)}\n${timeline.join('\n')}`
    for (const c of result.checks) expect(c.ok, `${c.name}: ${c.detail}\n${explain}`).toBe(true)
    expect(result.checks.map((c: any) => c.name)).toEqual([
      'false alarm dismissed through MCP',
      'intruder confirmed through MCP analyze_frame',
      'drone dispatched within the deadline',
      'drone acted on the homeowner\'s delegation',
      'takeover after silence',
      'R2 patrols after the takeover',
      'R1 stands by when it comes back'
    ])
    // lapse (3 leases) and R1's freeze (4 s at least) included; an upper bound, not a speed target
    expect(wall).toBeLessThan(25_000)

    const report = result.outcome
    // the fox first, then the person, both from R1's camera
    expect(report.alerts.map((a: any) => [a.frameId, a.verdict, a.confirmed])).toEqual([['r1-000213', 'animal', false], ['r1-000216', 'person', true]])
    expect(report.intruder).toMatchObject({ zone: 'north-wall', detectedBy: 'Patrol robot R1', frameId: 'r1-000216' })
    expect(report.mcp).toMatchObject({ tool: 'analyze_frame', verdict: 'person', intruder: true, confidence: 0.891 })
    expect(report.authority).toEqual({ root: homeowner.did, droneAllowed: true })

    const drone = report.drone
    expect(drone).toMatchObject({ droneId: 'D1', name: 'Drone D1', deadlineMs: 8_000, withinDeadline: true, target: { zone: 'north-wall', x: 2.5, y: 14.3 } })
    expect(drone.acceptedInMs).toBeLessThanOrEqual(drone.arrivedInMs)
    expect(drone.arrivedInMs).toBeLessThanOrEqual(drone.deadlineMs)
    expect(drone.arrivedAt).toBeLessThanOrEqual(drone.deadlineAt)
    // the simulated flight: 26 m at 20 m/s plus 400 ms of take-off
    expect(drone.etaMs).toBe(1_700)
    expect(drone.arrivedAt - drone.dispatchedAt).toBeGreaterThanOrEqual(1_650)

    const t = report.takeover
    // the robots' lease, as their configs set it
    const lease: number = (await loadConfig(join(HOME, 'robot-1.json'))).tasks?.leaseInterval ?? 1_000
    expect(t).toMatchObject({ from: 'Patrol robot R1', to: 'Patrol robot R2', reason: 'lease-lapsed', leaseMs: lease })
    // R1's last news came before it froze (a heartbeat may still have been on its way); the lapse after it
    expect(t.lastSeenAt).toBeLessThanOrEqual(report.frozenAt + lease)
    expect(t.lapsedAt).toBeGreaterThanOrEqual(report.frozenAt)
    // silence is noticed after 3 leases, not much later
    expect(t.detectedAfterMs).toBeGreaterThanOrEqual(3 * lease - 50)
    expect(t.lapsedAt - report.frozenAt).toBeLessThan(3 * lease + 1_800)
    expect(t.takeoverAt).toBeGreaterThanOrEqual(t.lapsedAt)
    expect(t.takeoverAt - report.frozenAt).toBeLessThan(3 * lease + 3_800)
    expect(t.silentForMs).toBeGreaterThan(t.detectedAfterMs)
    expect(report.endedBy).toBe('takeover-complete')
    expect(report.patrol.assignments.map((a: any) => [a.name, a.state])).toEqual([['Patrol robot R1', 'lost'], ['Patrol robot R2', 'patrolling']])

    // the robots' and the drone's side of it
    const server = views.get('home-server')!
    const r2 = views.get('robot-2')!
    const r1v = views.get('robot-1')!
    expect(r1v.events.filter(e => e.event === 'alert-acknowledged').map(e => e.data.confirmed)).toEqual([false, true])
    const droneTask = views.get('drone')!.events.find(e => e.event === 'task-started')
    expect(droneTask?.data).toMatchObject({ skill: 'drone.dispatch', root: homeowner.did, caller: server.did('server') })
    const r2Task = r2.events.find(e => e.event === 'task-started')
    expect(r2Task?.data).toMatchObject({ skill: 'security.patrol', root: homeowner.did })
    // R1's alert right is revoked, and R2 is told to stand down when the report is in
    await server.waitForEvent(e => e.event === 'revoked', 5_000, 'revocation of R1\'s alert right')
    const down = await r2.waitForEvent(e => e.event === 'task-failed' && e.data.skill === 'security.patrol', 5_000, 'R2 standing down')
    expect(down.data.error).toMatchObject({ code: 'CANCELED' })
    expect(r2.events.find(e => e.event === 'patrol-ended')?.data).toMatchObject({ robot: 'R2', code: 'CANCELED' })
    // R1, running again, notices it was out for longer than its lapse window and stands by
    const resumed = r1v.events.find(e => e.event === 'resumed')
    expect(resumed?.data.gapMs).toBeGreaterThan(3 * lease)
    expect(report.resumedAt - report.frozenAt).toBeGreaterThanOrEqual(4_000)
    expect(r1v.events.filter(e => e.event === 'alert-sent')).toHaveLength(2)
    const order = ['armed', 'discovered', 'delegated', 'alert-received', 'alert-dismissed', 'decision', 'dispatched', 'alert-handled', 'lease-lapsed', 'takeover', 'coverage-restored', 'report']
    const seen = order.map(name => server.events.findIndex(e => e.event === name))
    expect(seen.every(i => i >= 0), JSON.stringify(Object.fromEntries(order.map((n, i) => [n, seen[i]])))).toBe(true)
    expect([...seen].sort((a, b) => a - b)).toEqual(seen)
  }, 60_000)
})
