// Scenario "home-security" of `npm run demo` (contract: scenarios/README.md).
//
// The homeowner arms the home server (a task on their delegation, which also
// allows patrols and drone dispatch). The server tasks patrol robot R1; R1
// raises two alerts agent-to-agent: a fox (the camera MCP tool says animal:
// dismissed) and a person at the north wall (confirmed: drone D1, an
// external program, is dispatched with a deadline). Once R1 has its answer
// the scenario freezes R1's process (SIGSTOP): its heartbeats stop, the
// server's lease on the patrol lapses, R1's alert right is revoked and R2
// takes over. The arm task's result is the report the checks look at. Four
// seconds after the freeze R1 resumes (SIGCONT) and must stand by: it knows
// it was out for longer than its lapse window.
import { anySignal } from 'any-signal'
import { delegate } from '@ioa/collab'
import { sleep } from './agents/shared.js'

const SITE = 'home'
/** Drone on station within this long of a confirmed alert */
const DEADLINE_MS = 8_000
/** Longest the site stays armed before the report (an upper bound: the report comes once R2 covers the site) */
const WATCH_MS = 30_000
/** Longest wait for the whole arm task */
const ARM_TIMEOUT = 38_000
/** How long R1 stays frozen at least, ms (well over its lapse window of 3 × 1000 ms) */
const FREEZE_MS = 4_000
/** Longest run of the scenario, ms: it fails (checks false) rather than hang */
const RUN_BUDGET = 50_000

/** The delegation the homeowner gives the home server: arm it, task the robots, dispatch the drone — for this site only */
export async function homeownerGrant (identity, serverDid, { ttl = 600_000 } = {}) {
  return await delegate(identity, {
    audience: serverDid,
    capabilities: [
      { skill: 'home.security.arm', constraints: { site: SITE } },
      { skill: 'security.patrol', constraints: { site: SITE } },
      { skill: 'drone.dispatch', constraints: { site: SITE } }
    ],
    expiresAt: Date.now() + ttl
  })
}

/** Wait until `node` (an IoaNode) can reach agent `did` through the DHT */
export async function reachable (node, did, signal, timeout = 15_000) {
  const until = Date.now() + timeout
  while (true) {
    try {
      return await node.interconnect.resolve(did, { cache: false, timeout: 3_000, signal })
    } catch (err) {
      if (signal?.aborted === true || Date.now() > until) throw err
    }
    await sleep(250, signal)
  }
}

/**
 * Submit the arm task as the homeowner and follow it; resolves to the final
 * snapshot (never rejects for a failed task: its state says so)
 */
export async function armSite (node, identity, serverDid, { deadlineMs = DEADLINE_MS, watchMs = WATCH_MS, proofs, signal, onEvent } = {}) {
  let last
  for await (const e of node.tasks.submit(identity, serverDid, {
    skill: 'home.security.arm',
    input: { site: SITE, deadlineMs, watchMs },
    proofs,
    deadline: Date.now() + ARM_TIMEOUT
  }, { signal })) {
    onEvent?.(e)
    if (e.type === 'lapsed') throw Object.assign(new Error(`The home server went silent: ${e.error.message}`), { code: 'LEASE_LAPSED' })
    if (e.type === 'status') last = e.task
  }
  return last
}

/** The checks of the scenario, from the report and the nodes' events */
export function homeChecks ({ report, frozenAt, resumedAt, homeowner, droneEvents = [], robot1Events = [], robot2Events = [] }) {
  const checks = []
  const check = (name, ok, detail) => { checks.push({ name, ok: ok === true, detail }) }
  const r = report ?? {}
  const dismissed = (r.alerts ?? []).filter(a => a.confirmed === false)
  check('false alarm dismissed through MCP', dismissed.length > 0 && dismissed.every(a => a.verdict !== 'person'),
    dismissed.map(a => `${a.robot} at ${a.zone}: ${a.verdict} (${a.confidence})`).join('; ') || 'no dismissed alert')
  check('intruder confirmed through MCP analyze_frame', r.confirmed === true && r.mcp?.tool === 'analyze_frame' && r.mcp?.verdict === 'person' && r.mcp?.intruder === true,
    r.mcp != null ? `${r.mcp.frameId}: ${r.mcp.verdict}, score ${r.mcp.confidence}, reported by ${r.intruder?.detectedBy}` : 'no confirmed intruder')
  const d = r.drone ?? {}
  check('drone dispatched within the deadline',
    typeof d.acceptedInMs === 'number' && typeof d.arrivedInMs === 'number' && d.arrivedInMs <= DEADLINE_MS && d.acceptedInMs <= d.arrivedInMs && d.withinDeadline === true,
    d.arrivedInMs != null ? `${d.droneId} accepted +${d.acceptedInMs} ms, on station +${d.arrivedInMs} ms after the alert (deadline ${d.deadlineMs} ms)` : `no drone on station${d.error != null ? `: ${d.error.code}` : ''}`)
  const droneTask = droneEvents.find(e => e.event === 'task-started' && e.data?.skill === 'drone.dispatch')
  check('drone acted on the homeowner\'s delegation', homeowner != null && droneTask?.data?.root === homeowner,
    droneTask != null ? `chain root ${String(droneTask.data.root).slice(0, 20)}…` : 'the drone ran no dispatch')
  const t = r.takeover
  check('takeover after silence',
    t != null && frozenAt != null && t.from === 'Patrol robot R1' && t.to === 'Patrol robot R2' && t.reason === 'lease-lapsed' &&
      t.lapsedAt >= frozenAt && t.takeoverAt != null && t.takeoverAt >= t.lapsedAt && t.detectedAfterMs >= 3 * (t.leaseMs ?? 0) - 50,
    t != null
      ? `R1 frozen at +0; lease lapsed +${t.lapsedAt - frozenAt} ms (silent ${t.detectedAfterMs} ms, lease ${t.leaseMs} ms); ${t.to} patrolling +${t.takeoverAt != null ? t.takeoverAt - frozenAt : '?'} ms`
      : 'no takeover')
  const r2 = robot2Events.find(e => e.event === 'patrol-started' && e.data?.takeover != null)
  check('R2 patrols after the takeover', r2 != null && t?.coverageAt != null, r2 != null ? r2.data.text : 'R2 never started')
  // once back, R1 neither patrols nor alerts on its own
  const back = robot1Events.filter(e => resumedAt != null && e.at >= resumedAt - 50)
  const resumed = back.find(e => e.event === 'resumed')
  check('R1 stands by when it comes back', resumed != null && !back.some(e => ['alert-sent', 'tracking'].includes(e.event)),
    resumed != null ? resumed.data.text : 'R1 did not report back')
  return checks
}

export default {
  name: 'home-security',
  title: 'Home security: robot alert → MCP confirmation → drone within the deadline; standby robot takes over a silent one',
  userKey: 'keys/homeowner.json',
  timeout: 60_000,
  nodes: [
    { name: 'home-server', config: 'home/home-server.json' },
    { name: 'robot-1', config: 'home/robot-1.json' },
    { name: 'robot-2', config: 'home/robot-2.json' },
    { name: 'drone', config: 'home/drone.json' }
  ],

  async run (ctx) {
    const t0 = Date.now()
    const steps = []
    const step = (name, at = Date.now()) => { steps.push({ name, ms: at - t0 }) }
    const server = ctx.node('home-server')
    const r1 = ctx.node('robot-1')
    const r2 = ctx.node('robot-2')
    const drone = ctx.node('drone')
    const identity = ctx.driver.identity
    // the whole run, whatever happens
    const signal = anySignal([ctx.signal, AbortSignal.timeout(RUN_BUDGET)])
    const left = () => Math.max(1, t0 + RUN_BUDGET - Date.now())
    let frozenAt
    let resumedAt
    let report
    try {
      if (identity == null) throw new Error('The home-security scenario needs the homeowner key (userKey)')
      const serverDid = server.did('server')
      const grant = await homeownerGrant(identity, serverDid)
      ctx.timeline('homeowner', `arms the house and lets the home server task the robots and dispatch the drone (site ${SITE}, drone within ${DEADLINE_MS} ms)`)
      // under load a node may announce its agents well after its ready line
      await reachable(ctx.driver.node, serverDid, signal, 20_000)
      step('home server reachable')

      const arming = armSite(ctx.driver.node, identity, serverDid, { proofs: [grant], signal })
      // a failure of the arm task is looked at below; it must not go unhandled meanwhile
      arming.catch(() => {})
      // R1 has its answer about the intruder: now it goes silent
      const ack = await Promise.race([
        r1.waitForEvent(e => e.event === 'alert-acknowledged' && e.data?.confirmed === true, left(), 'R1 acknowledging the confirmed alert'),
        arming.then(s => { throw new Error(`The arm task ended (${s?.state}: ${s?.error?.code ?? ''}) before R1's alert was handled`) })
      ])
      step('R1 acknowledged', ack.at)
      frozenAt = Date.now()
      r1.kill('SIGSTOP')
      ctx.timeline('scenario', `R1 freezes (SIGSTOP to pid ${r1.pid}): no more heartbeats from it`)
      step('R1 frozen', frozenAt)
      const snapshot = await arming
      if (snapshot?.state !== 'completed') throw new Error(`The arm task ended ${snapshot?.state}: ${snapshot?.error?.code ?? ''} ${snapshot?.error?.message ?? ''}`)
      report = snapshot.result
      ctx.timeline('homeowner', `report received: ${report.confirmed ? `intruder at ${report.intruder.zone}` : 'no intruder'}, drone ${report.drone?.droneId ?? '—'}, takeover ${report.takeover != null ? `${report.takeover.from} → ${report.takeover.to}` : '—'}`)
      // R1 comes back after a while: it must see that its patrol is gone
      // a timer may fire a millisecond before Date.now() says it is due
      while (Date.now() < frozenAt + FREEZE_MS) await sleep(Math.max(1, frozenAt + FREEZE_MS - Date.now()), signal)
      r1.kill('SIGCONT')
      resumedAt = Date.now()
      ctx.timeline('scenario', `R1 resumes (SIGCONT) after ${resumedAt - frozenAt} ms frozen`)
      await r1.waitForEvent(e => e.event === 'resumed', Math.min(3_000, left()), 'R1 standing by').then(e => { step('R1 back, standing by', e.at) }, () => {})
    } catch (err) {
      ctx.timeline('scenario', `failed: ${err?.message ?? err}`)
      return {
        steps,
        checks: [{ name: 'scenario ran to the end', ok: false, detail: String(err?.message ?? err) }, ...homeChecks({ frozenAt })],
        outcome: null
      }
    } finally {
      // let R1 run again, so that it stops like the others
      if (frozenAt != null && resumedAt == null) r1.kill('SIGCONT')
    }

    // the milestones, from the server's events
    for (const [name, event] of [['patrol delegated to R1', 'delegated'], ['false alarm dismissed', 'alert-dismissed'], ['intruder confirmed (MCP)', 'decision'],
      ['drone dispatched', 'dispatched'], ['drone on station', 'alert-handled'], ['R1 lease lapsed', 'lease-lapsed'], ['R2 took over', 'takeover'], ['report', 'report']]) {
      const when = server.events.find(e => e.event === event)?.at
      if (when != null) step(name, when)
    }
    steps.sort((a, b) => a.ms - b.ms)
    const checks = homeChecks({ report, frozenAt, resumedAt, homeowner: identity.did, droneEvents: drone.events, robot1Events: r1.events, robot2Events: r2.events })
    return { steps, checks, outcome: { ...report, frozenAt, resumedAt } }
  }
}
