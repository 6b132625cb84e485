// The `conversation` part of the `team` benchmark group (bench/teams.js):
// spec/teams.md section 10 end to end.
//
// A 5-member team: the convener (the sequencer, the moderator) in this
// process, 4 members on 4 TCP nodes in a child process. A deterministic
// script of 20 turns under the `moderator` policy (`maxTurns` 20: the
// sequencer concludes after the last one): discussion turns, 2 sync
// assignments, 3 async ones and a `pause` for them, and 5 turns that first
// try to repeat an earlier turn (the sender's filter refuses them with
// REPEATED; they take no turn). Every assignment's handler takes a known
// time: a fixed delay plus real work (SHA-256 over a fixed buffer).
//
// Baseline, in the same run: the critical path of task times, i.e. the two
// sync tasks one after the other plus the three async ones at once (the
// pause waits for the longest), as plain task round trips from the convener
// to the same agents, same handlers, same inputs (task protocol, a token
// issued by the convener). Target: wall <= 1.2x the baseline (medians).
// Informative: the messages and bytes the repetition filter kept out of the
// log (`repetitionSaved` over the 5 nodes' `repetitionStats()`) against the
// log's own.
//
// Standalone (after `npx tsc -b`): node --import ./scripts/polyfill.js bench/teams.js [--quick] --conversation
import { createHash } from 'node:crypto'
import { createInterface } from 'node:readline'
import { pathToFileURL } from 'node:url'
import { createTransportNode } from '@ioa/transport'
import { createInterconnect } from '@ioa/interconnect'
import { createAssignmentService, createTaskService, createTeamService, delegate, repetitionSaved } from '@ioa/collab'
import { encode } from '@ipld/dag-cbor'
import { multiaddr } from '@multiformats/multiaddr'
import { startChild } from './child.js'
import { rotate, row } from './measure.js'

const sleep = (ms) => new Promise(resolve => setTimeout(resolve, ms))
const TEAM_INIT = { heartbeat: 1_000, ackInterval: 250, rate: 10_000, burst: 10_000 }
const TURNS = 20

/** Skills of the 4 members in the child (member i serves SKILLS[i]) */
const SKILLS = [['bench.plan'], ['bench.fetch', 'bench.check'], ['bench.fetch'], ['bench.fetch']]

/** The tasks: who runs them, and the known time of their handler (delay in ms + `work` SHA-256 passes over 1 MiB) */
const TASKS = {
  plan: { member: 0, skill: 'bench.plan', mode: 'sync', input: { ms: 600, work: 8 } },
  trains: { member: 1, skill: 'bench.fetch', mode: 'async', input: { ms: 900, work: 8 } },
  hotels: { member: 2, skill: 'bench.fetch', mode: 'async', input: { ms: 1_200, work: 8 } },
  venues: { member: 3, skill: 'bench.fetch', mode: 'async', input: { ms: 1_500, work: 8 } },
  check: { member: 1, skill: 'bench.check', mode: 'sync', input: { ms: 600, work: 8 } }
}

/**
 * The script: turn k is SCRIPT[k]. `by`: 'C' (the convener) or a member's
 * index; `next`: the member the convener hands the turn to; `repeat`: before
 * its line the speaker posts turn `repeat`'s text again, in other case with
 * a word added (a repeat, refused by its own node).
 */
const SCRIPT = [
  { by: 'C', say: 'We meet to plan the spring offsite for the twelve people of the platform team', next: 0 },
  { by: 0, say: 'I can draft a three day schedule with the budget once we agree on the dates' },
  { by: 'C', task: 'plan' },
  { by: 'C', say: 'The schedule is drafted so we need trains hotels and a venue near the lake', next: 1 },
  { by: 1, say: 'Trains from the city leave every hour and the morning ones are cheaper', repeat: 0 },
  { by: 'C', task: 'trains' },
  { by: 'C', task: 'hotels' },
  { by: 'C', task: 'venues' },
  { by: 'C', say: 'While those searches run tell me what matters most for the rooms', next: 2 },
  { by: 2, say: 'Quiet rooms with a desk and breakfast included would suit most of us', repeat: 3 },
  { by: 'C', say: 'And for the venue what size of hall and which equipment do we need', next: 3 },
  { by: 3, say: 'A hall for twenty with a projector and two smaller rooms for workshops', repeat: 1 },
  { by: 'C', pause: ['trains', 'hotels', 'venues'] },
  { by: 'C', say: 'All three searches are back so let us fit them into the schedule', next: 0 },
  { by: 0, say: 'The second day works best for the venue and the hotel is a short walk away', repeat: 13 },
  { by: 'C', task: 'check' },
  { by: 'C', say: 'The check passed and the total stays under the budget we were given', next: 1 },
  { by: 1, say: 'Then I will book the morning trains for the first day as soon as we confirm' },
  { by: 'C', say: 'Confirmed from my side please send the final plan to everyone today', next: 0, repeat: 16 },
  { by: 0, say: 'I will send the final plan with the bookings to the whole team tonight' }
]

/** A repeat of turn k's text: upper case, a comma, one word more (similarity >= 0.9 at 3-word shingles) */
const repeatOf = (k) => `${SCRIPT[k].say.toUpperCase()}, again`

const BUFFER = new Uint8Array(1024 * 1024).fill(7)

/** The handler of every skill: the known time of its input */
async function knownWork (input) {
  const { ms, work } = input
  await sleep(ms)
  let digest = ''
  for (let i = 0; i < work; i++) digest = createHash('sha256').update(BUFFER).update(digest).digest('hex')
  return { digest }
}

const median = (v) => { const s = [...v].sort((a, b) => a - b); return s[Math.floor((s.length - 1) / 2)] }

/**
 * Resolve `until(cond)` waiters as the team's events come (no polling: a
 * turn is taken as soon as this node has the decision)
 */
function watch (team) {
  const waiters = []
  const controller = new AbortController()
  const check = () => {
    for (let i = waiters.length - 1; i >= 0; i--) {
      if (waiters[i].cond()) { waiters[i].resolve(); waiters.splice(i, 1) }
    }
  }
  ;(async () => {
    for await (const _ of team.events({ from: 0, signal: controller.signal })) check()
  })().catch(() => {})
  return {
    /** Resolve once `cond()` holds; reject after `ms` (a script that went wrong ends the bench instead of hanging it) */
    until: (cond, what, ms = 60_000) => cond()
      ? Promise.resolve()
      : new Promise((resolve, reject) => {
        const timer = setTimeout(() => { reject(new Error(`${what} not within ${ms} ms`)) }, ms)
        waiters.push({ cond, resolve: () => { clearTimeout(timer); resolve() } })
      }),
    stop: () => { controller.abort() }
  }
}

async function expectRepeated (promise) {
  try {
    await promise
  } catch (err) {
    if (err.code === 'REPEATED') return
    throw err
  }
  throw new Error('a repeat was not refused')
}

// ---------------------------------------------------------------------------
// the child: 4 members, each on its own TCP node

async function childMain () {
  const members = []
  for (let i = 0; i < SKILLS.length; i++) {
    const node = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'] })
    const ic = await createInterconnect(node, { requestTimeout: 5_000 })
    const agent = await ic.host({ key: `member-${i}`, name: `member ${i}`, skills: SKILLS[i].map(id => ({ id })) })
    const teams = createTeamService(ic, TEAM_INIT)
    await teams.start()
    const tasks = createTaskService(ic)
    await tasks.start()
    const assignments = createAssignmentService({ logger: node.logger, teams, tasks, interconnect: ic })
    for (const skill of SKILLS[i]) await assignments.serve(agent.did, skill, knownWork)
    members.push({ node, ic, agent, teams, tasks, assignments })
    // take this member's turns of the script as the decisions give them (once per team and turn)
    const joined = new Set()
    ;(async () => {
      for await (const e of teams.events()) {
        if (e.type !== 'team' || joined.has(e.team.id)) continue
        const team = e.team
        joined.add(team.id)
        const taken = new Set()
        ;(async () => {
          for await (const t of team.events({ from: 0 })) {
            if (t.type !== 'turn' || t.speaker !== agent.did || taken.has(t.turn)) continue
            taken.add(t.turn)
            const line = SCRIPT[t.turn]
            if (line?.by !== i) { process.stderr.write(`member ${i}: turn ${t.turn} is not mine in the script\n`); continue }
            try {
              if (line.repeat != null) await expectRepeated(team.say(repeatOf(line.repeat)))
              await team.say(line.say)
            } catch (err) {
              process.stderr.write(`member ${i}: turn ${t.turn}: ${err.message}\n`)
            }
          }
        })().catch((err) => { process.stderr.write(`member ${i}: ${err.message}\n`) })
      }
    })().catch((err) => { process.stderr.write(`member ${i}: ${err.message}\n`) })
  }
  process.stdout.write(JSON.stringify({ refs: members.map(m => ({ agent: m.agent.did, peer: m.node.peerId.toString(), addr: m.node.getMultiaddrs()[0].toString() })) }) + '\n')
  const lines = createInterface({ input: process.stdin })
  for await (const line of lines) {
    const cmd = JSON.parse(line)
    if (cmd.cmd === 'stats') {
      process.stdout.write(JSON.stringify({ stats: members.map(m => m.teams.team(cmd.team)?.repetitionStats()) }) + '\n')
    } else if (cmd.cmd === 'stop') {
      break
    }
  }
  for (const m of members) { await m.assignments.stop(); await m.tasks.stop(); await m.teams.stop(); await m.ic.stop(); await m.node.stop() }
  process.exit(0)
}

// ---------------------------------------------------------------------------
// the parent: the convener, the baseline and the conversation

/** The critical path of task times as plain task round trips: the sync tasks one after the other, the async ones at once */
async function criticalPath ({ tasks, convener, refs }) {
  const run = async (name) => {
    const t = TASKS[name]
    const to = refs[t.member].agent
    const token = await delegate(convener.identity, { audience: to, capabilities: [{ skill: t.skill }], expiresAt: Date.now() + 3_600_000 })
    const snap = await tasks.submitAndWait(convener.identity, to, { skill: t.skill, input: t.input, proofs: [token] })
    if (snap.state !== 'completed') throw new Error(`baseline task ${name}: ${snap.state} ${JSON.stringify(snap.error)}`)
  }
  const timed = async (fn) => { const t0 = performance.now(); await fn(); return performance.now() - t0 }
  const names = Object.keys(TASKS)
  const parts = {}
  for (const name of names.filter(n => TASKS[n].mode === 'sync')) parts[name] = await timed(() => run(name))
  parts.async = await timed(() => Promise.all(names.filter(n => TASKS[n].mode === 'async').map(run)))
  return { total: Object.values(parts).reduce((a, b) => a + b, 0), parts }
}

/** One run of the script; the wall time from the first turn to the `conclude` entry */
async function converse ({ teams, assignments, convener, refs, round }) {
  const team = await teams.form(convener.did, { text: `bench conversation ${round}`, capabilities: ['bench.plan', 'bench.fetch'], deadline: Date.now() + 3_600_000 }, {
    roles: refs.map((r, i) => ({ role: `m${i}`, capabilities: SKILLS[i], candidates: [{ agent: r.agent, peer: r.peer }] })),
    flow: { policy: 'moderator', maxTurns: TURNS }
  })
  const w = watch(team)
  try {
    // every member holds the roster before the clock starts
    for (let t = 0; team.stable < 0; t++) {
      if (t > 300) throw new Error('the members did not catch up within 30 s')
      await sleep(100)
    }
    const myTurn = (k) => () => team.flow.turn === k && team.flow.speaker === convener.did && team.flow.due == null && team.flow.phase === 'discussion'
    const open = new Map()
    const t0 = performance.now()
    /**
     * where the time goes: waiting for the turn after its own line (`decision`: the rule's `turn` entry) or after a member's
     * (`members`: the decision naming the member, its post, the next decision), and each kind of line
     */
    const spent = { decision: 0, members: 0, say: 0, sync: 0, async: 0, pause: 0, conclude: 0 }
    let mark = t0
    const lap = (what) => { const t = performance.now(); spent[what] += t - mark; mark = t }
    for (let k = 0; k < TURNS; k++) {
      const line = SCRIPT[k]
      if (line.by !== 'C') continue
      await w.until(myTurn(k), `the convener's turn ${k}`)
      lap(k === 0 ? 'decision' : SCRIPT[k - 1].by === 'C' ? 'decision' : 'members')
      if (line.repeat != null) await expectRepeated(team.say(repeatOf(line.repeat)))
      if (line.say != null) {
        await team.post('discuss', { text: line.say, next: refs[line.next].agent })
      } else if (line.task != null) {
        const t = TASKS[line.task]
        const a = await assignments.assign(team, { mode: t.mode, assignee: refs[t.member].agent, skill: t.skill, input: t.input })
        if (t.mode === 'sync') {
          const out = await a.done
          if (out.state !== 'completed') throw new Error(`task ${line.task}: ${out.state} ${JSON.stringify(out.error)}`)
        } else {
          open.set(line.task, a)
        }
      } else if (line.pause != null) {
        const outs = await assignments.pause(team, line.pause.map(n => open.get(n).task))
        for (const out of outs) if (out.state !== 'completed') throw new Error(`task ${out.task}: ${out.state} ${JSON.stringify(out.error)}`)
      }
      lap(line.say != null ? 'say' : line.pause != null ? 'pause' : TASKS[line.task].mode)
    }
    await w.until(() => team.concluded, 'the conclude entry')
    lap('conclude')
    const wall = performance.now() - t0
    const entries = team.history()
    const turns = entries.filter(e => e.msg.payload.type === 'turn').length
    const logBytes = entries.reduce((n, e) => n + encode(e.msg).byteLength, 0)
    const discussion = entries.filter(e => e.msg.payload.type === 'discuss' || e.msg.payload.type === 'propose').length
    if (team.flow.turn !== TURNS) throw new Error(`the conversation took ${team.flow.turn} turns`)
    return { team, wall, spent, turns, logBytes, discussion, entries: entries.length }
  } finally {
    w.stop()
  }
}

export async function conversation ({ quick, progress }) {
  const rounds = quick ? 1 : 3
  const child = startChild(import.meta.url, ['--conversation-members'])
  const { next, send } = child
  const node = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'] })
  const ic = await createInterconnect(node, { requestTimeout: 5_000 })
  const teams = createTeamService(ic, TEAM_INIT)
  const tasks = createTaskService(ic)
  const assignments = createAssignmentService({ logger: node.logger, teams, tasks, interconnect: ic })
  try {
    const { refs } = await next()
    progress(`${refs.length} members up in the child process`)
    for (const r of refs) await node.dial(multiaddr(r.addr))
    const convener = await ic.host({ key: 'convener', name: 'convener', skills: [{ id: 'bench.lead' }] })
    await teams.start()
    await tasks.start()
    const ctx = { teams, tasks, assignments, convener, refs }
    // warm-up: one of each
    await criticalPath(ctx)
    await converse({ ...ctx, round: 'warm-up' })
    progress('warmed up')
    const walls = []
    const bases = []
    let last
    for (let r = 0; r < rounds; r++) {
      for (const name of rotate(['conversation', 'baseline'], r)) {
        if (name === 'baseline') {
          const b = await criticalPath(ctx)
          bases.push(b.total)
          progress(`round ${r + 1}/${rounds}: critical path ${b.total.toFixed(0)} ms (${Object.entries(b.parts).map(([k, v]) => `${k} ${v.toFixed(0)}`).join(', ')})`)
        } else {
          last = await converse({ ...ctx, round: r })
          walls.push(last.wall)
          progress(`round ${r + 1}/${rounds}: conversation ${last.wall.toFixed(0)} ms, ${last.entries} entries (${last.turns} decisions), ${last.logBytes} B; ${Object.entries(last.spent).map(([k, v]) => `${k} ${v.toFixed(0)}`).join(', ')}`)
        }
      }
    }
    send({ cmd: 'stats', team: last.team.id })
    const { stats } = await next()
    const saved = repetitionSaved([last.team.repetitionStats(), ...stats], refs.length + 1)
    const share = saved.bytes / (last.logBytes + saved.bytes)
    progress(`repetition filter: ${saved.messages} posts kept out (${saved.bytes} B, ~${saved.wireBytes} B on the wire), ${(share * 100).toFixed(1)}% of the conversation's bytes`)
    send({ cmd: 'stop' })
    return [
      row(`team.conversation-${TURNS}.wall`, median(walls), 'ms', median(bases), { max: 1.2 }),
      row(`team.conversation-${TURNS}.overhead-per-turn`, (median(walls) - median(bases)) / TURNS, 'ms', null),
      row(`team.conversation-${TURNS}.repeats-saved.messages`, saved.messages, 'msg', last.discussion + saved.messages),
      row(`team.conversation-${TURNS}.repeats-saved.bytes`, saved.bytes, 'B', last.logBytes + saved.bytes),
      row(`team.conversation-${TURNS}.repeats-saved.wire-bytes`, saved.wireBytes, 'B')
    ]
  } finally {
    await child.stop()
    await assignments.stop().catch(() => {})
    await tasks.stop().catch(() => {})
    await teams.stop().catch(() => {})
    await ic.stop().catch(() => {})
    await node.stop()
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href && process.argv.includes('--conversation-members')) {
  await childMain()
}
