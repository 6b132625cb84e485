#!/usr/bin/env node
// Drone D1: an external agent program. It joins its node over the local agent
// protocol `ioa-agent/1` (JSON lines on stdin/stdout, spec/node-agents.md) and
// uses nothing but Node's built-ins, as a program in any other language could:
// the node holds its key, publishes its card and turns network tasks into
// `task` lines; the program answers with `progress`, `result` or `error`.
//
// Skill `drone.dispatch`: fly from the dock to a point of the site and hold
// there with the camera and spotlight on. The flight is simulated in real
// time: take-off, then cruise at `cruiseSpeed` m/s. A dispatch the drone
// cannot finish before the task's deadline is refused at once
// (CANNOT_MEET_DEADLINE); one at a time (BUSY).
//
// Options (config `options`, also in IOA_AGENT_OPTIONS):
//   droneId      "D1"
//   dock         { x, y, z } metres in the site frame (data/site.json)
//   cruiseSpeed  m/s (default 20)
//   takeoffMs    time to climb to patrol altitude (default 400)
//   maxRangeM    farthest target from the dock (default 200)
const PROTOCOL = 'ioa-agent/1'
/** Longest line read from the node, in bytes; a longer one is dropped */
const MAX_LINE = 1_048_576
const MAX_TEXT = 64

const send = (msg) => { process.stdout.write(JSON.stringify(msg) + '\n') }
const log = (event, data) => { send({ type: 'log', event, data }) }

let options = parseOptions(process.env.IOA_AGENT_OPTIONS)
let self = null
/** The running dispatch: { task, timers } */
let flight = null

function parseOptions (raw) {
  let o
  try {
    o = raw != null && raw !== '' ? JSON.parse(raw) : {}
  } catch {
    o = {}
  }
  const num = (v, def, min, max) => (typeof v === 'number' && Number.isFinite(v) && v >= min && v <= max ? v : def)
  const dock = o?.dock ?? {}
  return {
    droneId: typeof o?.droneId === 'string' && o.droneId.length <= MAX_TEXT ? o.droneId : 'D1',
    dock: { x: num(dock.x, 0, -1000, 1000), y: num(dock.y, 0, -1000, 1000), z: num(dock.z, 0, 0, 100) },
    cruiseSpeed: num(o?.cruiseSpeed, 20, 1, 60),
    takeoffMs: num(o?.takeoffMs, 400, 0, 60_000),
    maxRangeM: num(o?.maxRangeM, 200, 1, 10_000)
  }
}

class InputError extends Error {
  code = 'INVALID_INPUT'
}

/** The dispatch input: { site, incident?, reason?, target: { zone, x, y } } */
function parseInput (input) {
  if (input == null || typeof input !== 'object' || Array.isArray(input)) throw new InputError('input must be an object')
  const t = input.target
  if (t == null || typeof t !== 'object') throw new InputError('input.target { zone, x, y } is required')
  const coord = v => typeof v === 'number' && Number.isFinite(v) && Math.abs(v) <= 1000
  if (!coord(t.x) || !coord(t.y)) throw new InputError('target.x and target.y must be numbers within ±1000 m')
  const text = (v, what) => {
    if (v == null) return null
    if (typeof v !== 'string' || v.length > 128) throw new InputError(`${what} must be a string of at most 128 characters`)
    return v
  }
  return {
    site: text(input.site, 'site'),
    incident: text(input.incident, 'incident'),
    reason: text(input.reason, 'reason'),
    target: { zone: text(t.zone, 'target.zone') ?? 'unnamed', x: t.x, y: t.y }
  }
}

function onTask (msg) {
  const task = msg.task
  const fail = (code, message) => {
    send({ type: 'error', task, code, message })
    log('refused', { text: `Drone ${options.droneId} refuses task ${task.slice(0, 8)}: ${message}`, code })
  }
  if (msg.skill !== 'drone.dispatch') return fail('UNKNOWN_SKILL', `No skill ${String(msg.skill).slice(0, MAX_TEXT)}`)
  let input
  try {
    input = parseInput(msg.input)
  } catch (err) {
    return fail(err.code ?? 'INVALID_INPUT', err.message)
  }
  if (flight != null) return fail('BUSY', `Already flying to ${flight.target.zone}`)
  const { dock, cruiseSpeed, takeoffMs, droneId } = options
  const distanceM = Math.round(Math.hypot(input.target.x - dock.x, input.target.y - dock.y) * 10) / 10
  if (distanceM > options.maxRangeM) return fail('OUT_OF_RANGE', `${distanceM} m is beyond the ${options.maxRangeM} m range`)
  const cruiseMs = Math.round(distanceM / cruiseSpeed * 1000)
  const etaMs = takeoffMs + cruiseMs
  const launchedAt = Date.now()
  if (typeof msg.deadline === 'number' && launchedAt + etaMs > msg.deadline) {
    return fail('CANNOT_MEET_DEADLINE', `ETA ${etaMs} ms, but the deadline is ${msg.deadline - launchedAt} ms away`)
  }

  flight = { task, target: input.target, timers: [] }
  const after = (ms, fn) => { flight.timers.push(setTimeout(fn, ms)) }
  send({ type: 'progress', task, message: { stage: 'accepted', droneId, etaMs, distanceM } })
  log('accepted', {
    text: `Drone ${droneId} accepts: ${input.target.zone} is ${distanceM} m from the dock, ETA ${etaMs} ms${input.incident != null ? ` (incident ${input.incident})` : ''}`,
    etaMs,
    distanceM,
    caller: msg.caller,
    root: msg.root
  })
  after(takeoffMs, () => {
    send({ type: 'progress', task, message: { stage: 'airborne', droneId, altitudeM: 12 } })
    log('airborne', { text: `Drone ${droneId} airborne at 12 m, heading for ${input.target.zone}` })
  })
  after(takeoffMs + Math.round(cruiseMs / 2), () => {
    send({ type: 'progress', task, message: { stage: 'en-route', droneId, remainingM: Math.round(distanceM / 2) } })
  })
  after(etaMs, () => {
    const arrivedAt = Date.now()
    flight = null
    const output = {
      droneId,
      agent: self?.did ?? null,
      target: input.target,
      dock,
      distanceM,
      etaMs,
      launchedAt,
      arrivedAt,
      flightMs: arrivedAt - launchedAt,
      altitudeM: 12,
      spotlight: true,
      liveFeed: `${droneId.toLowerCase()}-live`
    }
    send({ type: 'result', task, output })
    log('on-station', { text: `Drone ${droneId} on station over ${input.target.zone} after ${arrivedAt - launchedAt} ms, spotlight on, streaming ${output.liveFeed}`, flightMs: arrivedAt - launchedAt })
  })
}

function onCancel (msg) {
  if (flight == null || flight.task !== msg.task) return
  for (const t of flight.timers) clearTimeout(t)
  log('recalled', { text: `Drone ${options.droneId} recalled (${String(msg.reason ?? 'canceled').slice(0, MAX_TEXT)}), returning to the dock` })
  flight = null
}

function onMessage (msg) {
  switch (msg?.type) {
    case 'welcome':
      self = msg.agent ?? null
      if (msg.options != null && typeof msg.options === 'object') options = parseOptions(JSON.stringify(msg.options))
      log('ready', { text: `Drone ${options.droneId} docked at (${options.dock.x}, ${options.dock.y}), cruise ${options.cruiseSpeed} m/s` })
      return
    case 'task':
      if (typeof msg.task !== 'string') return
      onTask(msg)
      return
    case 'cancel':
      onCancel(msg)
      return
    case 'shutdown':
      process.exit(0)
      return
    default:
      // other messages (call results, …) are not used by this agent
  }
}

// bounded line reader: a line longer than MAX_LINE is dropped
let buffer = ''
let dropping = false
process.stdin.setEncoding('utf8')
process.stdin.on('data', chunk => {
  buffer += chunk
  let i
  while ((i = buffer.indexOf('\n')) >= 0) {
    const line = buffer.slice(0, i)
    buffer = buffer.slice(i + 1)
    if (dropping) {
      dropping = false
      continue
    }
    if (line.trim() === '') continue
    let msg
    try {
      msg = JSON.parse(line)
    } catch {
      continue
    }
    onMessage(msg)
  }
  if (buffer.length > MAX_LINE) {
    buffer = ''
    dropping = true
  }
})
process.stdin.on('end', () => { process.exit(0) })

send({
  type: 'hello',
  protocol: PROTOCOL,
  name: 'Drone D1',
  description: 'Security drone docked on the garage roof: flies to a point of the site and holds with camera and spotlight',
  skills: [{
    id: 'drone.dispatch',
    name: 'Dispatch',
    description: 'Fly to a point of the site and hold there with camera and spotlight on',
    tags: ['aerial', 'camera', 'security'],
    inputSchema: {
      type: 'object',
      required: ['target'],
      properties: {
        site: { type: 'string' },
        incident: { type: 'string' },
        target: { type: 'object', required: ['x', 'y'], properties: { zone: { type: 'string' }, x: { type: 'number' }, y: { type: 'number' } } }
      }
    }
  }]
})
