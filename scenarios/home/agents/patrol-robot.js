// A patrol robot (R1, R2): skill `security.patrol`. It walks its shipped
// sensor log (data/patrol-*.json: radar motion, thermal, sound, camera frame
// at each stop), reports every reading as task progress, and when a reading
// looks like a warm moving body it raises `home.security.alert` with the
// home server — agent to agent, on the alert right the server delegated to
// it in the patrol task. After its route it stands watch until the patrol
// task ends. While the handler runs the task service renews the server's
// lease on the task with heartbeats: a robot that goes silent (frozen,
// crashed, cut off) stops renewing it, and the server hands the patrol over.
//
// Options: robot ("R1"), role ("primary" | "standby"), log (data file,
// relative to scenarios/home), tickMs (time between two stops of the replay,
// default 200), motionThreshold (default 0.5), thermalDeltaC (degrees above
// ambient, default 6), alertTimeoutMs (default 15000).
import { z } from 'zod'
import { Coord, Did, FrameId, HomeSecurityError, Name, aborted, parseInput, readHomeJson, shortDid, sleep } from './shared.js'

const Reading = z.object({
  t: z.string().max(40),
  zone: Name,
  x: Coord,
  y: Coord,
  motion: z.number().min(0).max(1),
  thermalC: z.number().min(-60).max(200),
  soundDb: z.number().min(0).max(200),
  battery: z.number().min(0).max(100),
  frameId: FrameId
}).strict()

const PatrolLog = z.object({
  robot: Name,
  camera: z.string().max(32),
  site: Name,
  ambientC: z.number().min(-60).max(60),
  readings: z.array(Reading).min(1).max(1_000)
}).passthrough()

/** What the home server sends with a patrol: where to raise alerts, and the right to */
const PatrolInput = z.object({
  site: Name,
  alert: z.object({
    to: Did,
    skill: z.string().min(1).max(128),
    /** A delegation token (audience: this robot) for `skill` */
    token: z.object({ payload: z.object({ aud: Did }).passthrough(), sig: z.instanceof(Uint8Array) }).passthrough()
  }).strict(),
  /** Set when this patrol takes over from another robot */
  takeover: z.object({ from: z.string().max(100), silentForMs: z.number().int().min(0).max(3_600_000) }).strict().optional()
}).strict()

/** @type {import('@ioa/node').AgentModule} */
export default async function patrolRobot ({ node, agent, options, log }) {
  const robot = String(options.robot ?? 'R?').slice(0, 16)
  const role = String(options.role ?? 'primary').slice(0, 16)
  const data = parseInput(PatrolLog, await readHomeJson(String(options.log ?? `./data/patrol-${robot.toLowerCase()}.json`)), 'patrol log')
  const tickMs = clampInt(options.tickMs, 200, 10, 10_000)
  const motionThreshold = clamp(options.motionThreshold, 0.5, 0, 1)
  const thermalDeltaC = clamp(options.thermalDeltaC, 6, 0, 100)
  const alertTimeoutMs = clampInt(options.alertTimeoutMs, 15_000, 500, 120_000)

  const patrol = async (raw, ctx) => {
    const input = parseInput(PatrolInput, raw, 'patrol')
    if (input.site !== data.site) throw new HomeSecurityError('WRONG_SITE', `${robot} patrols ${data.site}, not ${input.site}`)
    if (input.alert.token.payload.aud !== agent.did) throw new HomeSecurityError('UNAUTHORIZED', 'The alert token is not for this robot')
    const server = input.alert.to
    log('patrol-started', {
      text: input.takeover != null
        ? `${robot} takes over the patrol from ${input.takeover.from} (silent for ${input.takeover.silentForMs} ms), heading from ${data.readings[0].zone}`
        : `${robot} (${role}) starts its patrol of ${input.site} at ${data.readings[0].zone}; alerts go to the home server ${shortDid(server)}`,
      robot,
      takeover: input.takeover ?? null,
      server
    })
    // find the server's peer now, not when an intruder is at the wall; the
    // patrol does not wait for it (its readings go back on the task's own stream)
    node.interconnect.resolve(server, { signal: ctx.signal, timeout: 5_000 }).catch(err => {
      // the alert resolves the server again when it is sent
      if (!ctx.signal.aborted) log('resolve-failed', { text: `${robot} could not find the home server yet: ${err?.code ?? ''} ${err?.message ?? err}`, code: err?.code ?? null })
    })

    // heartbeats go on while the task runs; a patrol ends only when it is
    // called off (canceled) or at its deadline
    try {
      const open = new Set()
      let alerts = 0
      let relieved = false
      // wait one tick; a robot that could not run for longer than its lapse
      // window (frozen, suspended) knows the server gave its patrol to another.
      // `awake`: the last moment the robot knows it ran
      let awake = Date.now()
      const tick = async () => {
        await sleep(tickMs, ctx.signal)
        const gap = Date.now() - awake - tickMs
        awake = Date.now()
        if (gap <= 3 * (ctx.task.lease ?? 1_000)) return false
        relieved = true
        log('resumed', { text: `${robot} is back after ${gap} ms without running: its lease has lapsed, the patrol is another robot's now — standing by`, robot, gapMs: gap })
        return true
      }
      for (const r of data.readings) {
        if (await tick()) break
        ctx.progress({ robot, zone: r.zone, x: r.x, y: r.y, motion: r.motion, thermalC: r.thermalC, soundDb: r.soundDb, battery: r.battery, frameId: r.frameId, t: r.t })
        const warm = r.thermalC - data.ambientC
        if (r.motion < motionThreshold || warm < thermalDeltaC) continue
        if (open.has(r.zone)) {
          log('tracking', { text: `${robot} keeps the intruder in view at ${r.zone} (motion ${r.motion}, ${r.thermalC} °C, frame ${r.frameId})`, zone: r.zone })
          continue
        }
        alerts++
        log('alert-sent', {
          text: `${robot}: motion ${r.motion} and ${r.thermalC} °C (${warm.toFixed(1)} above ambient) at ${r.zone}, frame ${r.frameId} — alerting the home server`,
          robot,
          zone: r.zone,
          frameId: r.frameId
        })
        const sentAt = Date.now()
        try {
          const done = await node.tasks.submitAndWait(agent.identity, server, {
            skill: input.alert.skill,
            input: {
              site: input.site,
              robot,
              zone: r.zone,
              x: r.x,
              y: r.y,
              observedAt: r.t,
              frameId: r.frameId,
              camera: data.camera,
              motion: r.motion,
              thermalC: r.thermalC,
              ambientC: data.ambientC,
              soundDb: r.soundDb
            },
            proofs: [input.alert.token],
            deadline: Math.min(ctx.deadline ?? Infinity, sentAt + alertTimeoutMs)
          }, { signal: ctx.signal })
          const answer = done.result ?? {}
          // waiting for the answer is not silence (the task's heartbeats went on)
          awake = Date.now()
          if (answer.confirmed === true) open.add(r.zone)
          log('alert-acknowledged', {
            text: answer.confirmed === true
              ? `${robot}: the server confirmed an intruder at ${r.zone}${answer.drone != null ? `; drone ${answer.drone.droneId} is on station` : ''} (${Date.now() - sentAt} ms) — holding position`
              : `${robot}: the server says ${answer.verdict ?? 'no intruder'} at ${r.zone} (${answer.reason ?? 'dismissed'}) — patrol goes on`,
            robot,
            zone: r.zone,
            frameId: r.frameId,
            confirmed: answer.confirmed === true,
            ms: Date.now() - sentAt
          })
        } catch (err) {
          if (ctx.signal.aborted) throw err
          awake = Date.now()
          log('alert-failed', { text: `${robot}: the alert was not handled: ${err?.code ?? ''} ${err?.message ?? err}`, code: err?.code ?? null })
        }
      }
      if (!relieved) {
        log('standing-watch', { text: `${robot} finished its route (${data.readings.length} stops, ${alerts} alert(s)) and stands watch at ${data.readings.at(-1).zone}` })
        let back = false
        while (!back) back = await tick()
      }
      await aborted(ctx.signal)
    } catch (err) {
      if (!ctx.signal.aborted) throw err
    }
    log('patrol-ended', { text: `${robot}'s patrol ended: ${ctx.signal.reason?.code === 'CANCELED' ? 'called off by the home server' : (ctx.signal.reason?.message ?? 'ended')}`, robot, code: ctx.signal.reason?.code ?? null })
    throw ctx.signal.reason
  }

  return { handlers: { 'security.patrol': patrol } }
}

function clamp (v, def, min, max) {
  return typeof v === 'number' && Number.isFinite(v) ? Math.min(max, Math.max(min, v)) : def
}

function clampInt (v, def, min, max) {
  return Math.round(clamp(v, def, min, max))
}
