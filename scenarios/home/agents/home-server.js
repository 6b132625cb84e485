// The home server agent. Skills:
//
// - `home.security.arm` (from the homeowner): guard the site. The server finds
//   the patrol robots (primary first), delegates to the first one the right
//   to raise `home.security.alert` and has it patrol, watching the patrol's
//   lease. A robot that goes silent (no heartbeat for 3 leases) or whose
//   patrol fails is relieved — its alert right revoked — and the next robot
//   takes over. The task ends when an incident has been handled and patrol
//   coverage is back after a takeover, or after `watchMs`; its result is the
//   report. Patrols and drone dispatches run on the homeowner's authority: the
//   arm task's delegation chain is passed on as their proofs.
// - `home.security.alert` (from a robot on duty): confirm the alert by calling
//   the camera MCP server's `analyze_frame` tool; if it is an intruder,
//   dispatch a drone with a deadline of `deadlineMs` after the alert.
//
// Options: site (data file, default ./data/site.json), mcpServer (default
// ./camera-mcp-server.js), cameras (ids checked when arming), confirmThreshold
// (default 0.8), minPatrols (robots to wait for when arming, default 2),
// discoveryWaitMs (default 8000). Paths are relative to scenarios/home.
import { anySignal } from 'any-signal'
import { capabilityFor, createRevocation } from '@ioa/collab'
import { z } from 'zod'
import { CameraTools } from './camera-tools.js'
import { Coord, FrameId, HomeSecurityError, Name, homePath, parseInput, readHomeJson, shortDid, sleep } from './shared.js'

const PATROL = 'security.patrol'
const ALERT = 'home.security.alert'
const DRONE = 'drone.dispatch'
const TERMINAL = new Set(['completed', 'failed', 'canceled', 'rejected'])

const ArmInput = z.object({
  site: Name,
  /** Time from an intruder alert to the drone on station, ms */
  deadlineMs: z.number().int().min(500).max(60_000).default(8_000),
  /** Longest time the site is guarded before the report, ms */
  watchMs: z.number().int().min(1_000).max(600_000).default(20_000)
}).strict()

const AlertInput = z.object({
  site: Name,
  robot: Name,
  zone: Name,
  x: Coord,
  y: Coord,
  observedAt: z.string().max(40),
  frameId: FrameId,
  camera: z.string().max(32),
  motion: z.number().min(0).max(1),
  thermalC: z.number().min(-60).max(200),
  ambientC: z.number().min(-60).max(60),
  soundDb: z.number().min(0).max(200)
}).strict()

/** @type {import('@ioa/node').AgentModule} */
export default async function homeServer ({ node, agent, options, log }) {
  const siteMap = await readHomeJson(String(options.site ?? './data/site.json'))
  const config = {
    site: parseInput(Name, siteMap.site, 'site map'),
    cameras: Array.isArray(options.cameras) ? options.cameras.slice(0, 16).map(String) : [],
    threshold: typeof options.confirmThreshold === 'number' ? Math.min(1, Math.max(0.01, options.confirmThreshold)) : 0.8,
    minPatrols: Number.isInteger(options.minPatrols) ? Math.min(16, Math.max(1, options.minPatrols)) : 2,
    discoveryWaitMs: Number.isInteger(options.discoveryWaitMs) ? Math.min(60_000, Math.max(0, options.discoveryWaitMs)) : 8_000
  }
  const script = homePath(String(options.mcpServer ?? './camera-mcp-server.js'))
  const tools = new CameraTools({ script })
  /** @type {Map<string, Session>} armed sites */
  const sessions = new Map()
  const env = { node, agent, log, tools, config }

  return {
    handlers: {
      'home.security.arm': async (raw, ctx) => {
        const input = parseInput(ArmInput, raw, 'arm')
        if (input.site !== config.site) throw new HomeSecurityError('UNKNOWN_SITE', `This server guards ${config.site}, not ${input.site}`)
        if (sessions.has(input.site)) throw new HomeSecurityError('ALREADY_ARMED', `${input.site} is armed already`)
        if (capabilityFor(ctx.chain, PATROL) == null) {
          throw new HomeSecurityError('UNAUTHORIZED', `The homeowner's delegation does not cover ${PATROL}: the server may not task the robots`)
        }
        const session = new Session(env, input, ctx)
        sessions.set(input.site, session)
        try {
          return await session.run()
        } finally {
          session.close()
          sessions.delete(input.site)
        }
      },
      [ALERT]: async (raw, ctx) => {
        const input = parseInput(AlertInput, raw, 'alert')
        // only the alert right this server delegated counts
        if (ctx.chain.root !== agent.did) throw new HomeSecurityError('UNAUTHORIZED', 'Alerts need the alert right delegated by this server')
        const session = sessions.get(input.site)
        if (session == null) throw new HomeSecurityError('NOT_ARMED', `${input.site} is not armed`)
        return await session.alert(input, ctx)
      }
    },
    start () {
      // the MCP server comes up beside the node (the first tool call waits for it, or starts it again)
      tools.connect().then(
        names => { log('mcp-ready', { text: `Camera MCP server up (pid ${tools.pid}), tools: ${names.join(', ')}`, tools: names, pid: tools.pid }) },
        err => { log('mcp-failed', { text: `Camera MCP server did not start: ${err?.message ?? err}`, code: err?.code ?? null }) }
      )
    },
    async stop () {
      for (const s of sessions.values()) s.close()
      await tools.close()
    }
  }
}

/** One armed period of a site */
class Session {
  constructor (env, input, ctx) {
    this.env = env
    this.input = input
    this.ctx = ctx
    this.site = input.site
    this.armedAt = Date.now()
    this.root = ctx.chain.root
    // the homeowner's delegation, passed on to the robots and the drone
    this.proofs = ctx.chain.path
    this.droneAllowed = capabilityFor(ctx.chain, DRONE) != null
    this.controller = new AbortController()
    this.signal = this.controller.signal
    this.onAbort = () => { this.controller.abort(ctx.signal.reason) }
    ctx.signal.addEventListener('abort', this.onAbort, { once: true })
    this.candidates = []
    this.assignments = []
    this.alerts = []
    this.incident = null
    this.takeover = null
    this.coverageLost = false
    this.wake = undefined
  }

  get log () { return this.env.log }

  /** Wake the run loop: something changed */
  notify () {
    const w = this.wake
    this.wake = undefined
    w?.()
  }

  close () {
    this.ctx.signal.removeEventListener('abort', this.onAbort)
    if (!this.signal.aborted) this.controller.abort(new HomeSecurityError('DISARMED', 'The session ended'))
    this.notify()
  }

  async run () {
    const { input, ctx } = this
    this.log('armed', {
      text: `Armed site ${input.site} for the homeowner (${shortDid(this.root)}): drone on station within ${input.deadlineMs} ms of a confirmed alert; drone dispatch ${this.droneAllowed ? 'allowed' : 'NOT allowed'} by the homeowner`,
      root: this.root,
      deadlineMs: input.deadlineMs,
      droneAllowed: this.droneAllowed
    })
    ctx.progress({ stage: 'armed', site: input.site })
    await Promise.all([this.findPatrols(), this.checkReadiness()])
    if (this.candidates.length === 0) throw new HomeSecurityError('NO_PATROL', `No agent offers ${PATROL} in ${this.env.node.interconnect.domain}`)
    void this.assign(this.candidates[0], null)

    const until = this.armedAt + input.watchMs
    let endedBy
    while (endedBy == null) {
      this.signal.throwIfAborted()
      if (this.incident?.finished === true && this.takeover?.coverageAt != null) endedBy = 'takeover-complete'
      else if (this.coverageLost) endedBy = 'coverage-lost'
      else if (Date.now() >= until) endedBy = 'watch-elapsed'
      else {
        await new Promise(resolve => {
          const done = () => {
            clearTimeout(t)
            this.signal.removeEventListener('abort', done)
            this.wake = undefined
            resolve()
          }
          const t = setTimeout(done, Math.max(0, until - Date.now()))
          this.signal.addEventListener('abort', done, { once: true })
          this.wake = done
        })
      }
    }
    const report = this.report(endedBy)
    this.standDown()
    this.log('report', {
      text: `Report for the homeowner: ${report.confirmed ? `intruder at ${report.intruder.zone} confirmed by ${report.mcp.tool}` : 'no confirmed intruder'}` +
        `${report.drone?.arrivedInMs != null ? `, drone ${report.drone.droneId} on station ${report.drone.arrivedInMs} ms after the alert (deadline ${report.drone.deadlineMs} ms)` : ''}` +
        `${report.takeover != null ? `, ${report.takeover.to} took over from ${report.takeover.from}` : ''} (${endedBy})`,
      endedBy
    })
    return report
  }

  /** Discover the patrol robots of this domain, primary first, and find their peers now */
  async findPatrols () {
    const { node } = this.env
    const started = Date.now()
    let found
    for (let attempt = 0; ; attempt++) {
      found = await node.discover({ capability: PATROL, domain: node.interconnect.domain }, { cache: attempt === 0, timeout: 3_000, signal: this.signal })
      if (found.length >= this.env.config.minPatrols || Date.now() - started > this.env.config.discoveryWaitMs) break
      await sleep(250, this.signal)
    }
    const rank = d => {
      const tags = d.skills.flatMap(s => s.tags ?? [])
      return tags.includes('primary') ? 0 : tags.includes('standby') ? 1 : 2
    }
    found.sort((a, b) => rank(a) - rank(b) || b.score - a.score)
    this.candidates = found.map(d => ({ did: d.card.id, name: d.card.name, role: ['primary', 'standby', 'other'][rank(d)] }))
    this.log('discovered', {
      text: `Found ${found.length} patrol robot(s) by capability ${PATROL}: ${this.candidates.map(c => `${c.name} (${c.role})`).join(', ') || 'none'} in ${Date.now() - started} ms`,
      capability: PATROL,
      agents: this.candidates
    })
    await Promise.all(this.candidates.map(c => node.interconnect.resolve(c.did, { signal: this.signal, timeout: 3_000 }).catch(() => {})))
  }

  /** Cameras online (MCP) and a drone ready, before anything happens */
  async checkReadiness () {
    const { node, tools, config } = this.env
    const cams = await Promise.all(config.cameras.map(camera =>
      tools.call('get_camera_status', { camera }, { signal: this.signal }).then(s => `${camera} ${s.online ? 'online' : 'OFFLINE'}`, err => `${camera} unknown (${err.code})`)))
    if (cams.length > 0) this.log('mcp-call', { text: `MCP get_camera_status: ${cams.join(', ')}`, tool: 'get_camera_status' })
    if (!this.droneAllowed) return
    const started = Date.now()
    let drones = []
    for (let attempt = 0; drones.length === 0 && Date.now() - started < config.discoveryWaitMs; attempt++) {
      if (attempt > 0) await sleep(250, this.signal)
      drones = await node.discover({ capability: DRONE, domain: node.interconnect.domain }, { cache: attempt === 0, timeout: 3_000, signal: this.signal })
    }
    this.log('discovered', {
      text: drones.length > 0 ? `Drone ready: ${drones.map(d => d.card.name).join(', ')} (${DRONE}) in ${Date.now() - started} ms` : `No ${DRONE} provider found yet`,
      capability: DRONE,
      agents: drones.map(d => ({ did: d.card.id, name: d.card.name }))
    })
    await Promise.all(drones.map(d => node.interconnect.resolve(d.card.id, { signal: this.signal, timeout: 3_000 }).catch(() => {})))
  }

  /** Delegate the alert right to a robot and have it patrol; watch the lease until the patrol is lost */
  async assign (cand, takeover) {
    const { node, agent } = this.env
    const a = { ...cand, taskId: null, token: null, startedAt: null, submittedAt: Date.now(), lastSeenAt: Date.now(), lease: null, state: 'starting', readings: 0, lastReading: null, takeover }
    this.assignments.push(a)
    let ended
    try {
      a.token = await node.delegate(agent, {
        audience: cand.did,
        capabilities: [{ skill: ALERT, constraints: { site: this.site } }],
        expiresAt: this.ctx.deadline ?? Date.now() + 600_000
      })
      this.log('delegated', {
        text: `Delegated ${ALERT} (site ${this.site}) to ${cand.name} and asked it to patrol, on the homeowner's authority`,
        to: cand.did,
        robot: cand.name
      })
      const input = {
        site: this.site,
        alert: { to: agent.did, skill: ALERT, token: a.token },
        ...(takeover != null ? { takeover: { from: takeover.from, silentForMs: Math.max(0, Date.now() - takeover.lastSeenAt) } } : {})
      }
      for await (const e of node.submit(agent, cand.did, { skill: PATROL, input, proofs: this.proofs }, { signal: this.signal, parent: this.ctx })) {
        if (e.type === 'lapsed') {
          ended = { reason: 'lease-lapsed', lastSeenAt: e.lastSeen }
          break
        }
        a.lastSeenAt = Date.now()
        if (e.type === 'heartbeat') {
          a.lease = e.lease
          continue
        }
        const t = e.task
        a.taskId = t.id
        a.lease = t.lease ?? a.lease
        if (t.state === 'working' && a.startedAt == null) this.patrolling(a)
        const last = t.messages.at(-1)
        if (last != null && last !== a.lastReading && JSON.stringify(last) !== JSON.stringify(a.lastReading)) {
          a.readings++
          a.lastReading = last
          if (a.readings === 1 && a.takeover != null) this.coverageRestored(a, last)
        }
        if (TERMINAL.has(t.state)) {
          ended = { reason: t.state, error: t.error ?? null, lastSeenAt: a.lastSeenAt }
          break
        }
      }
      ended ??= { reason: 'stream-ended', lastSeenAt: a.lastSeenAt }
    } catch (err) {
      if (this.signal.aborted) return
      ended = { reason: 'unreachable', error: { code: err?.code ?? 'ERROR', message: String(err?.message ?? err).slice(0, 200) }, lastSeenAt: a.lastSeenAt }
    }
    if (this.signal.aborted) return
    this.lost(a, ended)
  }

  patrolling (a) {
    a.startedAt = Date.now()
    a.state = 'patrolling'
    if (a.takeover == null) {
      this.log('patrolling', { text: `${a.name} is patrolling; its lease is renewed every ${a.lease} ms`, robot: a.name, leaseMs: a.lease })
      return
    }
    const t = this.takeover
    t.takeoverAt = a.startedAt
    t.silentForMs = a.startedAt - t.lastSeenAt
    t.handoverMs = a.startedAt - t.lapsedAt
    this.log('takeover', {
      text: `Takeover: ${a.name} patrols in place of ${t.from}, ${t.silentForMs} ms after ${t.from}'s last sign of life (silence noticed after ${t.detectedAfterMs} ms = 3 leases of ${t.leaseMs} ms, handover ${t.handoverMs} ms)`,
      from: t.from,
      to: a.name,
      silentForMs: t.silentForMs,
      detectedAfterMs: t.detectedAfterMs,
      handoverMs: t.handoverMs
    })
    this.ctx.progress({ stage: 'takeover', from: t.from, to: a.name })
  }

  coverageRestored (a, reading) {
    this.takeover.coverageAt = Date.now()
    this.log('coverage-restored', { text: `Patrol coverage back: ${a.name} reports from ${reading?.zone ?? 'its route'}`, robot: a.name })
    this.notify()
  }

  /** A robot's patrol is lost: revoke its alert right and hand the patrol to the next robot */
  lost (a, ended) {
    const { node, agent } = this.env
    const now = Date.now()
    a.state = 'lost'
    a.lostAt = now
    const lastSeenAt = ended.lastSeenAt ?? a.lastSeenAt
    const silentMs = now - lastSeenAt
    this.log(ended.reason === 'lease-lapsed' ? 'lease-lapsed' : 'patrol-lost', {
      text: ended.reason === 'lease-lapsed'
        ? `${a.name} went silent: no heartbeat for ${silentMs} ms (lease ${a.lease} ms × 3) — relieving it`
        : `${a.name}'s patrol ended (${ended.reason}${ended.error != null ? `: ${ended.error.code}` : ''}) — relieving it`,
      robot: a.name,
      reason: ended.reason,
      silentMs,
      leaseMs: a.lease
    })
    if (a.token != null) {
      const token = a.token
      void (async () => {
        const rev = await createRevocation(agent.identity, token)
        // refused here at once; the other nodes learn it from the announcement
        await node.revocationStore.add(rev)
        a.revoked = true
        this.log('revoked', { text: `Revoked ${a.name}'s alert right: if it comes back, its alerts are refused`, robot: a.name })
        await node.revocations.publish(rev, { signal: AbortSignal.timeout(3_000) })
      })().catch(() => {})
    }
    void this.handOver(a, { reason: ended.reason, lastSeenAt, lapsedAt: now, silentMs })
  }

  /** Give the patrol of a lost robot to the next one (looked up again if the known ones are used up) */
  async handOver (a, { reason, lastSeenAt, lapsedAt, silentMs }) {
    const unused = () => this.candidates.find(c => !this.assignments.some(x => x.did === c.did))
    if (unused() == null) {
      // a robot may have joined since the site was armed
      const { node } = this.env
      const found = await node.discover({ capability: PATROL, domain: node.interconnect.domain }, { cache: false, timeout: 2_000, signal: this.signal }).catch(() => [])
      for (const d of found) {
        if (!this.candidates.some(c => c.did === d.card.id)) this.candidates.push({ did: d.card.id, name: d.card.name, role: 'other' })
      }
    }
    if (this.signal.aborted) return
    const next = unused()
    if (next == null) {
      this.coverageLost = true
      this.log('coverage-lost', { text: `No other patrol robot to take over from ${a.name}`, robot: a.name })
      this.notify()
      return
    }
    this.takeover ??= {
      from: a.name, fromDid: a.did, to: next.name, toDid: next.did, reason,
      leaseMs: a.lease, lastSeenAt, lapsedAt, detectedAfterMs: silentMs,
      takeoverAt: null, silentForMs: null, handoverMs: null, coverageAt: null
    }
    void this.assign(next, this.takeover)
    this.notify()
  }

  /** Cancel the patrol still running (the site is disarmed) */
  standDown () {
    const { node } = this.env
    for (const a of this.assignments) {
      if (a.state !== 'patrolling' || a.taskId == null) continue
      a.state = 'ended'
      node.tasks.cancel(a.did, a.taskId, { signal: AbortSignal.timeout(2_000) }).then(
        () => { this.log('stand-down', { text: `${a.name} stood down`, robot: a.name }) },
        () => {}
      )
    }
  }

  /** `home.security.alert` from a robot on duty */
  async alert (input, ctx) {
    const { tools, config } = this.env
    const a = this.assignments.find(x => x.did === ctx.caller)
    if (a == null || a.state === 'lost') throw new HomeSecurityError('NOT_ON_DUTY', `${a?.name ?? shortDid(ctx.caller)} is not on patrol duty here`)
    const receivedAt = Date.now()
    const record = { robot: a.name, zone: input.zone, frameId: input.frameId, observedAt: input.observedAt, receivedAt, confirmed: null, mcp: null }
    if (this.alerts.length < 64) this.alerts.push(record)
    this.log('alert-received', {
      text: `Alert from ${a.name}: warm moving body at ${input.zone} (motion ${input.motion}, ${input.thermalC} °C), frame ${input.frameId} — asking the camera service`,
      robot: a.name,
      zone: input.zone,
      frameId: input.frameId
    })
    const called = Date.now()
    const v = await tools.call('analyze_frame', { frameId: input.frameId, threshold: config.threshold }, { signal: ctx.signal, timeout: 3_000 })
    const ms = Date.now() - called
    record.mcp = { tool: 'analyze_frame', frameId: input.frameId, verdict: v.verdict, label: v.label, confidence: v.confidence, intruder: v.intruder, reason: v.reason, ms }
    this.log('mcp-call', {
      text: `MCP analyze_frame(${input.frameId}) → ${v.verdict}${v.label != null ? ` (${v.label}, score ${v.confidence})` : ''} in ${ms} ms`,
      tool: 'analyze_frame',
      frameId: input.frameId,
      verdict: v.verdict,
      confidence: v.confidence,
      ms
    })
    record.confirmed = v.intruder === true
    if (!record.confirmed) {
      this.log('alert-dismissed', { text: `False alarm at ${input.zone}: ${v.reason} — no dispatch`, zone: input.zone, verdict: v.verdict })
      return { confirmed: false, verdict: v.verdict, reason: v.reason }
    }
    if (this.incident != null) {
      // the same intruder seen again: one incident, one drone
      return { confirmed: true, verdict: v.verdict, incident: this.incident.id, duplicate: true }
    }
    const incident = {
      id: `INC-${new Date(receivedAt).toISOString().slice(0, 10).replaceAll('-', '')}-${String(receivedAt % 100_000).padStart(5, '0')}`,
      robot: a.name,
      zone: input.zone,
      x: input.x,
      y: input.y,
      frameId: input.frameId,
      observedAt: input.observedAt,
      motion: input.motion,
      thermalC: input.thermalC,
      alertAt: receivedAt,
      deadlineAt: receivedAt + this.input.deadlineMs,
      mcp: record.mcp,
      drone: null,
      finished: false
    }
    this.incident = incident
    this.log('decision', {
      text: `Intruder confirmed at ${input.zone} (${v.reason}): dispatching a drone, on station by +${this.input.deadlineMs} ms`,
      incident: incident.id,
      deadlineAt: incident.deadlineAt
    })
    this.ctx.progress({ stage: 'intruder-confirmed', zone: input.zone, incident: incident.id })
    try {
      incident.drone = await this.dispatch(incident, ctx.signal)
    } catch (err) {
      incident.drone = { error: { code: err?.code ?? 'DISPATCH_FAILED', message: String(err?.message ?? err).slice(0, 300) } }
      this.log('dispatch-failed', { text: `Drone dispatch failed: ${incident.drone.error.code} ${incident.drone.error.message}`, code: incident.drone.error.code })
    }
    incident.finished = true
    const d = incident.drone
    const dispatched = d.arrivedAt != null
    this.log('alert-handled', {
      text: dispatched
        ? `Incident ${incident.id} handled: drone ${d.droneId} on station ${d.arrivedInMs} ms after the alert (deadline ${d.deadlineMs} ms, ${d.withinDeadline ? 'met' : 'MISSED'})`
        : `Incident ${incident.id}: intruder confirmed but no drone on station`,
      incident: incident.id,
      confirmed: true,
      dispatched,
      withinDeadline: d.withinDeadline === true,
      ms: Date.now() - receivedAt
    })
    this.ctx.progress({ stage: 'incident-handled', incident: incident.id, dispatched })
    this.notify()
    return {
      confirmed: true,
      verdict: v.verdict,
      incident: incident.id,
      drone: dispatched ? { droneId: d.droneId, arrivedAt: d.arrivedAt, etaMs: d.etaMs } : null,
      ...(dispatched ? {} : { error: d.error })
    }
  }

  /** Find a drone and have it fly to the incident before its deadline */
  async dispatch (incident, alertSignal) {
    const { node, agent } = this.env
    if (!this.droneAllowed) throw new HomeSecurityError('UNAUTHORIZED', `The homeowner's delegation does not cover ${DRONE}`)
    const deadlineAt = Math.min(incident.deadlineAt, this.ctx.deadline ?? Infinity)
    const signal = anySignal([alertSignal, this.signal, AbortSignal.timeout(Math.max(1, deadlineAt - Date.now() + 1_000))])
    const searched = Date.now()
    let drones = []
    for (let attempt = 0; drones.length === 0; attempt++) {
      if (attempt > 0) {
        if (Date.now() > deadlineAt - 500) throw new HomeSecurityError('NO_DRONE', `No ${DRONE} provider answered before the deadline`)
        await sleep(200, signal)
      }
      drones = await node.discover({ capability: DRONE, domain: node.interconnect.domain }, { cache: attempt === 0, timeout: Math.min(2_000, Math.max(100, deadlineAt - Date.now())), signal })
    }
    const drone = drones[0]
    this.log('discovered', { text: `Dispatching ${drone.card.name} (${shortDid(drone.card.id)}), found by ${DRONE} in ${Date.now() - searched} ms`, capability: DRONE, agents: [{ did: drone.card.id, name: drone.card.name }] })
    const dispatchedAt = Date.now()
    let acceptedAt = null
    let progress = null
    const input = {
      site: this.site,
      incident: incident.id,
      reason: `person at ${incident.zone} (frame ${incident.frameId})`,
      target: { zone: incident.zone, x: incident.x, y: incident.y }
    }
    for await (const e of node.submit(agent, drone.card.id, { skill: DRONE, input, proofs: this.proofs, deadline: deadlineAt }, { signal })) {
      if (e.type === 'lapsed') throw new HomeSecurityError('DRONE_SILENT', `${drone.card.name} went silent during the dispatch`)
      if (e.type !== 'status') continue
      const t = e.task
      const accepted = t.messages.find(m => m?.stage === 'accepted')
      if (accepted != null && acceptedAt == null) {
        acceptedAt = Date.now()
        progress = accepted
        this.log('dispatched', {
          text: `${drone.card.name} accepted ${acceptedAt - incident.alertAt} ms after the alert: ${accepted.distanceM} m, ETA ${accepted.etaMs} ms; deadline in ${deadlineAt - acceptedAt} ms`,
          drone: drone.card.name,
          acceptedInMs: acceptedAt - incident.alertAt,
          etaMs: accepted.etaMs
        })
      }
      if (t.state === 'completed') {
        const r = t.result ?? {}
        const arrivedAt = typeof r.arrivedAt === 'number' ? r.arrivedAt : Date.now()
        return {
          droneId: r.droneId ?? drone.card.name,
          name: drone.card.name,
          did: drone.card.id,
          dispatchedAt,
          acceptedAt,
          acceptedInMs: acceptedAt != null ? acceptedAt - incident.alertAt : null,
          arrivedAt,
          arrivedInMs: arrivedAt - incident.alertAt,
          etaMs: r.etaMs ?? progress?.etaMs ?? null,
          distanceM: r.distanceM ?? null,
          deadlineMs: deadlineAt - incident.alertAt,
          deadlineAt,
          withinDeadline: arrivedAt <= deadlineAt,
          target: r.target ?? input.target,
          liveFeed: r.liveFeed ?? null
        }
      }
      if (TERMINAL.has(t.state)) throw new HomeSecurityError(t.error?.code ?? 'DISPATCH_FAILED', t.error?.message ?? `Dispatch ${t.state}`)
    }
    throw new HomeSecurityError('DISPATCH_FAILED', 'The dispatch stream ended without a result')
  }

  report (endedBy) {
    const inc = this.incident
    const t = this.takeover
    const active = this.assignments.filter(a => a.state === 'patrolling').map(a => a.name)
    return {
      site: this.site,
      armedAt: this.armedAt,
      endedAt: Date.now(),
      endedBy,
      authority: { root: this.root, droneAllowed: this.droneAllowed },
      patrol: {
        candidates: this.candidates.map(c => ({ name: c.name, did: c.did, role: c.role })),
        assignments: this.assignments.map(a => ({ name: a.name, did: a.did, state: a.state, leaseMs: a.lease, readings: a.readings, startedAt: a.startedAt, lostAt: a.lostAt ?? null, revoked: a.revoked === true })),
        active
      },
      alerts: this.alerts.map(a => ({ robot: a.robot, zone: a.zone, frameId: a.frameId, observedAt: a.observedAt, receivedAt: a.receivedAt, confirmed: a.confirmed, verdict: a.mcp?.verdict ?? null, confidence: a.mcp?.confidence ?? null })),
      confirmed: inc != null,
      intruder: inc != null ? { incident: inc.id, zone: inc.zone, x: inc.x, y: inc.y, observedAt: inc.observedAt, frameId: inc.frameId, detectedBy: inc.robot, motion: inc.motion, thermalC: inc.thermalC, alertAt: inc.alertAt } : null,
      mcp: inc?.mcp ?? null,
      drone: inc?.drone ?? null,
      takeover: t != null
        ? { from: t.from, fromDid: t.fromDid, to: t.to, toDid: t.toDid, reason: t.reason, leaseMs: t.leaseMs, lastSeenAt: t.lastSeenAt, lapsedAt: t.lapsedAt, takeoverAt: t.takeoverAt, coverageAt: t.coverageAt, silentForMs: t.silentForMs, detectedAfterMs: t.detectedAfterMs, handoverMs: t.handoverMs }
        : null
    }
  }
}
