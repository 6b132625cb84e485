/**
 * Assignments as tasks (`spec/teams.md` 10.6) between separate nodes over
 * TCP on 127.0.0.1: a sync assignment's result posted by the assignee; an
 * async assignment while the conversation goes on and a pause that resumes
 * on its results; a silent assignee (a handler that never answers, a node
 * that stops) reassigned or lapsed; an assigner without the authority and a
 * task that names no assignment refused.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { expectErrorCode, until } from '../../../test/util.js'
import { delegate } from '../src/auth/delegation.js'
import { assignmentContext } from '../src/teams/index.js'
import { gate, startAssignPeers } from './assignments-fixture.js'
import { goal, settled } from './teams-fixture.js'
import { createIdentity } from '@ioa/interconnect'
import type { AssignmentsInit, Team, TeamAssignmentEvent, TeamEvent } from '../src/teams/index.js'
import type { AssignPeer, Gate } from './assignments-fixture.js'
import type { SkillHandler, TaskServiceInit } from '../src/tasks/service.js'

let closers: Array<() => Promise<unknown>> = []

afterEach(async () => {
  for (const c of closers.reverse()) await c().catch(() => {})
  closers = []
})

type Peer = AssignPeer

async function startPeers (skills: string[][], init: AssignmentsInit = {}, taskInit?: (i: number) => TaskServiceInit): Promise<Peer[]> {
  return await startAssignPeers(closers, skills, { resultTimeout: 3_000, ...init }, taskInit)
}

/** peer 0 convenes a team with one role per other peer, named after its first skill */
async function form (peers: Peer[]): Promise<Team> {
  const [convener, ...others] = peers
  const caps = [...new Set(others.map(p => p.agent.card.card.skills[0].id))]
  const team = await convener.teams.form(convener.agent.did, goal('move the outdoor event', caps), {
    roles: others.map((p, i) => ({ role: `r${i}`, capabilities: [p.agent.card.card.skills[0].id], candidates: [p.ref] }))
  })
  await settled(peers, team.id, 1)
  return team
}

function on (p: Peer, team: Team): Team {
  return p.teams.team(team.id) as Team
}

/** Collect a team's assignment events on one member from now on */
function record (team: Team): { events: TeamAssignmentEvent[], all: TeamEvent[], stop: () => void } {
  const controller = new AbortController()
  const events: TeamAssignmentEvent[] = []
  const all: TeamEvent[] = []
  void (async () => {
    for await (const e of team.events({ signal: controller.signal })) {
      all.push(e)
      if (e.type === 'assignment') events.push(e)
    }
  })().catch(() => {})
  return { events, all, stop: () => { controller.abort() } }
}

/** A handler that tells `started` and then runs until its task is taken back */
function untilAborted (started: Gate): SkillHandler {
  return async (_, ctx) => {
    started.resolve()
    return await new Promise((resolve, reject) => { ctx.signal.addEventListener('abort', () => { reject(ctx.signal.reason) }) })
  }
}

function entryOf (team: Team, type: string, task: string): { seq: number, from: string, body: Record<string, unknown> } | undefined {
  const e = team.history().find(x => x.msg.payload.type === type && x.msg.payload.body.task === task)
  return e == null ? undefined : { seq: e.seq, from: e.msg.payload.from, body: e.msg.payload.body }
}

describe('team assignments as tasks', () => {
  it('a sync assignment runs as a task at the assignee, whose node posts progress and the result', async () => {
    const peers = await startPeers([['team.member'], ['weather.forecast'], ['venue.search']])
    const [convener, weather, venue] = peers
    await weather.assignments.serve(weather.agent.did, 'weather.forecast', async (input, ctx) => {
      ctx.progress('looking at the sky')
      return { forecast: 'rain', city: (input as { city: string }).city, chain: ctx.chain.path.length }
    })
    const team = await form(peers)
    const seen = record(on(venue, team))
    const a = await convener.assignments.assign(team, { mode: 'sync', assignee: weather.agent.did, skill: 'weather.forecast', input: { city: 'Lyon' } })
    const outcome = await a.done
    expect(outcome).toMatchObject({ task: a.task, state: 'completed', assignee: weather.agent.did, output: { forecast: 'rain', city: 'Lyon', chain: 1 } })
    // the result entry is the assignee's, seen by every member in the same place
    await settled(peers, team.id, outcome.seq + 1)
    for (const p of peers) {
      const r = entryOf(on(p, team), 'result', a.task)
      expect(r).toMatchObject({ seq: outcome.seq, from: weather.agent.did, body: { state: 'completed' } })
      expect(entryOf(on(p, team), 'progress', a.task)?.from).toBe(weather.agent.did)
    }
    // the assigner's side saw the task end through the task protocol too
    const snapshot = await convener.tasks.get(weather.agent.did, a.task)
    expect(snapshot.state).toBe('completed')
    expect(snapshot.contextId).toBe(assignmentContext(team.id, a.seq))
    await until(() => seen.events.some(e => e.phase === 'done') ? true : undefined, { timeout: 10_000, what: 'done event' })
    expect(seen.events.map(e => e.phase)).toEqual(['opened', 'progress', 'done'])
    seen.stop()
  })

  it('a member assigns within its part under a delegated chain: the assignee gets the chain root -> convener -> member -> assignee', async () => {
    const peers = await startPeers([['team.member'], ['venue.search'], ['venue.search']])
    const [convener, assigner, assignee] = peers
    const user = await createIdentity()
    const authority = await delegate(user, { audience: convener.agent.did, capabilities: [{ skill: 'venue.*' }], expiresAt: Date.now() + 3_600_000 })
    let chain: { root: string, length: number } | undefined
    await assignee.assignments.serve(assignee.agent.did, 'venue.search', (_, ctx) => {
      chain = { root: ctx.chain.root, length: ctx.chain.path.length }
      return { hall: 'the old hall' }
    })
    const team = await convener.teams.form(convener.agent.did, goal('move the outdoor event', ['venue.search']), {
      proofs: [authority],
      roles: [{ role: 'a', capabilities: ['venue.search'], candidates: [assigner.ref] }, { role: 'b', capabilities: ['venue.search'], candidates: [assignee.ref] }]
    })
    await settled(peers, team.id, 1)
    const a = await assigner.assignments.assign(on(assigner, team), { assignee: assignee.agent.did, skill: 'venue.search' })
    expect(await a.done).toMatchObject({ state: 'completed', output: { hall: 'the old hall' } })
    expect(chain).toEqual({ root: user.did, length: 3 })
  })

  it('open assignments are bounded per assignee: one more is refused TOO_MANY_ASSIGNMENTS and posts nothing', async () => {
    const peers = await startPeers([['team.member'], ['weather.forecast'], ['venue.search']], { maxOpenPerAssignee: 1 })
    const [convener, weather, venue] = peers
    const open = gate()
    await weather.assignments.serve(weather.agent.did, 'weather.forecast', async () => { await open.promise; return { forecast: 'rain' } })
    await venue.assignments.serve(venue.agent.did, 'venue.search', () => ({ venue: 'hall' }))
    const team = await form(peers)
    const first = await convener.assignments.assign(team, { mode: 'async', assignee: weather.agent.did, skill: 'weather.forecast' })
    const length = team.length
    const err = await expectErrorCode(convener.assignments.assign(team, { mode: 'async', assignee: weather.agent.did, skill: 'weather.forecast' }), 'TOO_MANY_ASSIGNMENTS')
    expect(err.name).toBe('TooManyAssignmentsError')
    expect(team.length).toBe(length)
    // another assignee is not held back, and the slot frees when the task ends
    expect((await (await convener.assignments.assign(team, { mode: 'async', assignee: venue.agent.did, skill: 'venue.search' })).done).state).toBe('completed')
    open.resolve()
    await first.done
    expect((await convener.assignments.assign(team, { mode: 'async', assignee: weather.agent.did, skill: 'weather.forecast' })).task).toBeDefined()
  })

  it('an async assignment runs while the conversation goes on; pause resumes when the listed tasks end', async () => {
    const peers = await startPeers([['team.member'], ['weather.forecast'], ['venue.search']])
    const [convener, weather, venue] = peers
    const gates = { weather: gate(), venue: gate() }
    await weather.assignments.serve(weather.agent.did, 'weather.forecast', async () => { await gates.weather.promise; return { forecast: 'storm' } })
    await venue.assignments.serve(venue.agent.did, 'venue.search', async () => { await gates.venue.promise; return { venue: 'the old hall' } })
    const team = await form(peers)
    const w = await convener.assignments.assign(team, { mode: 'async', assignee: weather.agent.did, skill: 'weather.forecast' })
    const v = await convener.assignments.assign(team, { mode: 'async', assignee: venue.agent.did, skill: 'venue.search' })
    // the conversation goes on while both tasks run
    const said = await on(venue, team).say('meanwhile: who brings the tents?')
    const paused = convener.assignments.pause(team, [w.task, v.task])
    await until(() => team.history().some(e => e.msg.payload.type === 'pause') ? true : undefined, { timeout: 10_000, what: 'pause entry' })
    let resumed = false
    void paused.then(() => { resumed = true })
    gates.weather.resolve()
    await until(() => entryOf(team, 'result', w.task), { timeout: 10_000, what: 'weather result' })
    expect(resumed).toBe(false)
    gates.venue.resolve()
    const results = await paused
    expect(results.map(r => [r.task, r.state, r.assignee])).toEqual([[w.task, 'completed', weather.agent.did], [v.task, 'completed', venue.agent.did]])
    const pauseSeq = team.history().find(e => e.msg.payload.type === 'pause')?.seq as number
    expect(said.seq).toBeGreaterThan(v.seq)
    expect(Math.min(...results.map(r => r.seq))).toBeGreaterThan(pauseSeq)
  })

  it('a handler that never answers: the task is taken back and reassigned to another member with the skill', async () => {
    const peers = await startPeers([['team.member'], ['weather.forecast'], ['weather.forecast']])
    const [convener, stuck, backup] = peers
    const taken = gate()
    await stuck.assignments.serve(stuck.agent.did, 'weather.forecast', async (_, ctx) => {
      ctx.signal.addEventListener('abort', () => { taken.resolve() })
      return await new Promise(() => {}) // never answers, ignores its signal
    })
    await backup.assignments.serve(backup.agent.did, 'weather.forecast', () => ({ forecast: 'sun' }))
    const team = await form(peers)
    const seen = record(team)
    const a = await convener.assignments.assign(team, { assignee: stuck.agent.did, skill: 'weather.forecast', candidates: [backup.agent.did], attemptTimeout: 1_500 })
    const outcome = await a.done
    expect(outcome).toMatchObject({ state: 'completed', assignee: backup.agent.did, output: { forecast: 'sun' }, assignees: [stuck.agent.did, backup.agent.did] })
    expect(entryOf(team, 'result', a.task)?.from).toBe(backup.agent.did)
    await taken.promise // the first assignee's task was canceled
    expect(seen.events.map(e => `${e.phase}:${e.assignee === stuck.agent.did ? 'stuck' : 'backup'}`)).toEqual(['opened:stuck', 'reassigned:backup', 'done:backup'])
    seen.stop()
  })

  it('an assignee that leaves the team: its task is reassigned to a member with the skill', async () => {
    const peers = await startPeers([['team.member'], ['weather.forecast'], ['weather.forecast']])
    const [convener, leaving, backup] = peers
    const started = gate()
    await leaving.assignments.serve(leaving.agent.did, 'weather.forecast', untilAborted(started))
    await backup.assignments.serve(backup.agent.did, 'weather.forecast', () => ({ forecast: 'hail' }))
    const team = await form(peers)
    const a = await convener.assignments.assign(team, { mode: 'async', assignee: leaving.agent.did, skill: 'weather.forecast', candidates: [backup.agent.did] })
    await started.promise
    await on(leaving, team).leave('called away')
    const outcome = await a.done
    expect(outcome).toMatchObject({ state: 'completed', assignee: backup.agent.did, output: { forecast: 'hail' }, assignees: [leaving.agent.did, backup.agent.did] })
    // the reassignment comes after the roster entry without the leaving member
    const left = team.history().find(e => e.msg.payload.type === 'roster' && e.seq > a.seq)?.seq as number
    const reassigned = team.history().filter(e => e.msg.payload.type === 'assign' && e.msg.payload.body.task === a.task).map(e => e.seq)
    expect(reassigned).toHaveLength(2)
    expect(reassigned[1]).toBeGreaterThan(left)
  })

  it('an assigner that is gone: the convener closes its open task with LEASE_LAPSED, and a pause on it ends', async () => {
    const peers = await startPeers([['team.member'], ['venue.search'], ['venue.search']])
    const [convener, assigner, assignee] = peers
    const started = gate()
    await assignee.assignments.serve(assignee.agent.did, 'venue.search', untilAborted(started))
    const team = await form(peers)
    convener.assignments.supervise(team)
    // a member assigns within its own part (venue.search.*)
    const a = await assigner.assignments.assign(on(assigner, team), { mode: 'async', assignee: assignee.agent.did, skill: 'venue.search' })
    await started.promise
    const waiting = convener.assignments.pause(team, [a.task])
    // the assigner's runner goes away with its member
    await assigner.assignments.stop()
    await on(assigner, team).leave('gone')
    const [outcome] = await waiting
    expect(outcome).toMatchObject({ task: a.task, state: 'failed', error: { code: 'LEASE_LAPSED', reason: 'ASSIGNER_GONE' } })
    expect(entryOf(team, 'result', a.task)?.from).toBe(convener.agent.did)
  })

  it('an assignee whose node stops: its lease lapses, the task is reassigned, and with nobody left it lapses', async () => {
    const peers = await startPeers([['team.member'], ['weather.forecast'], ['weather.forecast']])
    const [convener, first, second] = peers
    const started = [gate(), gate()]
    await first.assignments.serve(first.agent.did, 'weather.forecast', async () => { started[0].resolve(); return await new Promise(() => {}) })
    await second.assignments.serve(second.agent.did, 'weather.forecast', async () => { started[1].resolve(); return await new Promise(() => {}) })
    const team = await form(peers)
    const a = await convener.assignments.assign(team, { mode: 'sync', assignee: first.agent.did, skill: 'weather.forecast', candidates: [second.agent.did] })
    await started[0].promise
    await first.node.stop()
    await started[1].promise
    await second.node.stop()
    // nobody left with the skill: the assigner closes the task so that the conversation moves on
    const outcome = await a.done
    // (the reason is the last attempt's: a lapsed lease, or, when the node stopped while task protocol
    // 2.0.0 still held the first event back, the closed stream of a submit that saw no event)
    expect(outcome).toMatchObject({ state: 'failed', assignee: second.agent.did, error: { code: 'LEASE_LAPSED', reason: expect.stringMatching(/^(LEASE_LAPSED|STREAM_CLOSED)$/) } })
    expect(entryOf(team, 'result', a.task)?.from).toBe(convener.agent.did)
    // and the conversation goes on
    await team.say('moving on without a forecast')
  })

  it('an assigner whose team token does not grant the skill posts nothing; a task that names no assignment is refused', async () => {
    const peers = await startPeers([['team.member'], ['weather.forecast'], ['venue.search']])
    const [convener, weather, venue] = peers
    let ran = 0
    await weather.assignments.serve(weather.agent.did, 'weather.forecast', () => { ran++; return { forecast: 'fog' } })
    const team = await form(peers)
    const length = team.length
    // venue's token grants venue.search.* only
    await expectErrorCode(venue.assignments.assign(on(venue, team), { assignee: weather.agent.did, skill: 'weather.forecast' }), 'ESCALATION')
    const stranger = await createIdentity()
    await expectErrorCode(convener.assignments.assign(team, { assignee: stranger.did, skill: 'weather.forecast' }), 'NOT_MEMBER')
    expect(team.length).toBe(length)
    // a task that claims to be assignment 0 of the team (the roster entry) is refused by the assignee's node
    const token = await delegate(convener.agent.identity, { audience: weather.agent.did, capabilities: [{ skill: 'weather.forecast' }], expiresAt: Date.now() + 60_000 })
    await expectErrorCode(convener.tasks.submitAndWait(convener.agent.identity, weather.agent.did, {
      skill: 'weather.forecast', input: {}, proofs: [token], contextId: assignmentContext(team.id, 0)
    }), 'NOT_ASSIGNED')
    expect(ran).toBe(0)
    expect(team.history().some(e => e.msg.payload.type === 'result')).toBe(false)
  })

  it('an assignee whose node does not accept the team chain refuses the task: the assignment lapses with the refusal, nothing hangs', async () => {
    const other = await createIdentity()
    // the weather node accepts chains rooted at another principal only
    const peers = await startPeers([['team.member'], ['weather.forecast'], ['venue.search']], {}, i => i === 1 ? { roots: [other.did] } : {})
    const [convener, weather] = peers
    let ran = 0
    await weather.assignments.serve(weather.agent.did, 'weather.forecast', () => { ran++; return {} })
    const team = await form(peers)
    const a = await convener.assignments.assign(team, { assignee: weather.agent.did, skill: 'weather.forecast', candidates: [] })
    const outcome = await a.done
    expect(outcome.state).toBe('failed')
    expect(outcome.error?.code).toBe('LEASE_LAPSED')
    // the executor's refusal of a chain from an unaccepted root, as the reason
    expect(outcome.error?.reason).toBe('PRINCIPAL_MISMATCH')
    expect(ran).toBe(0)
    expect(entryOf(team, 'result', a.task)?.from).toBe(convener.agent.did)
  })
})
