/**
 * External agents in teams over `ioa-agent/2` (issue 13, "Using it";
 * spec/node-agents.md 16): a real program hosted by a node, with a convener
 * and another member on separate nodes over TCP. It is invited and accepts
 * (or declines with a reason the convener sees), follows the conversation in
 * order, posts what every member sees, gets typed answers to posts that
 * fail, gets an assignment as a task with its team context, and loses
 * nothing while it reads slowly. A version 1 program still works unchanged.
 */
import { fileURLToPath } from 'node:url'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { expectErrorName, until } from '../../../test/util.js'
import { createIoaNode, startExternalAgent } from '../src/index.js'
import type { ExternalAgent, ExternalAgentInit, IoaNode } from '../src/index.js'
import type { Team } from '@ioa/collab'
import type { HostedAgent } from '@ioa/interconnect'

const TEAM_AGENT = fileURLToPath(new URL('./fixtures/team-agent.mjs', import.meta.url))
const ECHO = fileURLToPath(new URL('./fixtures/echo-agent.mjs', import.meta.url))
const LISTEN = ['/ip4/127.0.0.1/tcp/0']

/** conv: the convener's node; host: the node of the external programs; other: another member's node */
let conv: IoaNode
let host: IoaNode
let other: IoaNode
let organiser: HostedAgent
let weather: HostedAgent
const running: ExternalAgent[] = []
const extraNodes: IoaNode[] = []

beforeAll(async () => {
  // teams it convenes let a member post 1,000 messages a second (the slow reader's test fills pipes quickly)
  conv = await createIoaNode({ listen: LISTEN, teams: { rate: 1_000, burst: 1_000 } })
  host = await createIoaNode({ listen: LISTEN, bootstrap: [conv.addresses()[0]] })
  // connected to both: the program's agent may convene a team with the weather agent
  other = await createIoaNode({ listen: LISTEN, bootstrap: [conv.addresses()[0], host.addresses()[0]] })
  organiser = await conv.host({ key: 'organiser', name: 'Organiser', skills: [{ id: 'event.plan' }] })
  weather = await other.host({ key: 'weather', name: 'Weather', skills: [{ id: 'weather.forecast' }] })
  // invitations dial members by peer id: wait until the bootstrap connections are up
  await connected(conv, host)
  await connected(conv, other)
  await connected(host, other)
}, 60_000)

async function connected (a: IoaNode, b: IoaNode): Promise<void> {
  await until(() => a.transport.getConnections(b.transport.peerId).length > 0 || undefined, { timeout: 20_000, what: 'the nodes are connected' })
}

afterEach(async () => {
  for (const e of running.splice(0)) await e.stop().catch(() => {})
  for (const n of extraNodes.splice(0)) await n.stop().catch(() => {})
})

afterAll(async () => {
  await other?.stop().catch(() => {})
  await host?.stop().catch(() => {})
  await conv?.stop().catch(() => {})
})

interface Program {
  ext: ExternalAgent
  events: Array<{ event: string, data: Record<string, any> }>
  logs: string[]
}

let keys = 0

async function startProgram (on: IoaNode, init: Partial<ExternalAgentInit> = {}, command = [process.execPath, TEAM_AGENT]): Promise<Program> {
  const events: Program['events'] = []
  const logs: string[] = []
  const ext = await startExternalAgent(on, {
    command,
    card: { key: `program-${++keys}`, name: 'Venue', skills: [] },
    onEvent: (event, data) => { events.push({ event, data }) },
    onLog: line => { logs.push(line) },
    ...init
  })
  running.push(ext)
  return { ext, events, logs }
}

function ref (node: IoaNode, agent: { did: string }): { agent: string, peer: string } {
  return { agent: agent.did, peer: node.transport.peerId.toString() }
}

/** A team of the organiser with the program's agent (role venue) and, when asked, the weather agent */
async function formWith (p: Program, text: string, withWeather = false, on: IoaNode = host): Promise<Team> {
  return await conv.teams.form(organiser.did, { text, capabilities: withWeather ? ['venue.booking', 'weather.forecast'] : ['venue.booking'] }, {
    roles: [
      { role: 'venue', capabilities: ['venue.booking'], candidates: [ref(on, p.ext.agent)] },
      ...(withWeather ? [{ role: 'weather', capabilities: ['weather.forecast'], candidates: [ref(other, weather)] }] : [])
    ]
  })
}

const of = (p: Program, event: string, team?: string): Array<Record<string, any>> =>
  p.events.filter(e => e.event === event && (team == null || e.data.team === team)).map(e => e.data)

describe('external agents in teams (ioa-agent/2)', () => {
  it('is invited and accepts, follows the conversation in order, and posts what every member sees', async () => {
    const venue = await startProgram(host)
    const welcome = await until(() => of(venue, 'welcome')[0], { what: 'welcome' })
    expect(welcome.protocol).toBe('ioa-agent/2')
    expect(welcome.env).toBe('ioa-agent/2 ioa-agent/1')

    const team = await formWith(venue, 'move the concert indoors', true)
    expect(team.roster.members.map(m => m.agent).sort()).toEqual([organiser.did, venue.ext.agent.did, weather.did].sort())
    const invite = of(venue, 'team-invite')[0]
    expect(invite).toMatchObject({ team: team.id, from: organiser.did, role: 'venue', goal: 'move the concert indoors' })
    const weatherTeam = await until(() => other.teams.team(team.id), { timeout: 20_000, what: 'the weather node holds the team' })

    const ping = await team.say('ping')
    // the program answers "pong <seq>" as itself; the convener's and the other member's logs hold it
    for (const t of [team, weatherTeam]) {
      const pong = await until(() => t.history().find(e => e.msg.payload.type === 'discuss' && e.msg.payload.body.text === `pong ${ping.seq}`), { timeout: 20_000, what: 'the pong in every log' })
      expect(pong.msg.payload.from).toBe(venue.ext.agent.did)
      expect(pong.msg.payload.re).toBe(ping.seq)
    }
    const posted = await until(() => of(venue, 'team-posted', team.id)[0], { what: 'team-posted' })
    const pongSeq = team.history().findIndex(e => e.msg.payload.body.text === `pong ${ping.seq}`)
    expect(posted).toMatchObject({ id: 'p1', seq: pongSeq })
    await weatherTeam.say('rain from 18:00')

    // every entry, in log order, with its sender and kind, its own post included
    await until(() => of(venue, 'team-message', team.id).length >= team.length || undefined, { timeout: 20_000, what: 'every entry reaches the program' })
    const got = of(venue, 'team-message', team.id)
    expect(got.map(m => m.seq)).toEqual(team.history().map(e => e.seq))
    expect(got.map(m => [m.kind, m.from])).toEqual(team.history().map(e => [e.msg.payload.type, e.msg.payload.from]))
    expect(got[0]).toMatchObject({ kind: 'roster', body: { version: 1 } })
    expect(got.at(-1)).toMatchObject({ kind: 'discuss', from: weather.did, body: { text: 'rain from 18:00' } })
    expect(venue.ext.protocolErrors).toBe(0)

    // the convener concludes: the conclude entry, then team-ended
    await team.conclude('the concert moves to hall B')
    const ended = await until(() => of(venue, 'team-ended', team.id)[0], { timeout: 20_000, what: 'team-ended' })
    expect(ended).toMatchObject({ reason: 'concluded', next: team.length })
    expect(of(venue, 'team-message', team.id).at(-1)).toMatchObject({ kind: 'conclude', body: { summary: 'the concert moves to hall B' } })
  }, 90_000)

  it('declines an invitation with a reason that the convener sees; no answer in time declines BUSY', async () => {
    const venue = await startProgram(host, { options: { declineReason: 'the hall is closed for works' }, inviteAnswerTimeout: 1_000 })
    const err = await expectErrorName(formWith(venue, 'please decline this'), 'TeamFormationError')
    expect(err.failures[0].tried).toEqual([{ agent: venue.ext.agent.did, outcome: 'declined', code: 'POLICY', reason: 'the hall is closed for works' }])

    const silent = await expectErrorName(formWith(venue, 'a silent one'), 'TeamFormationError')
    expect(silent.failures[0].tried[0]).toMatchObject({ outcome: 'declined', code: 'BUSY' })
    expect(silent.failures[0].tried[0].reason).toContain('did not answer within 1000 ms')
    expect(venue.logs.some(l => l.includes('no team-answer within 1000 ms'))).toBe(true)
    expect(venue.ext.protocolErrors).toBe(0)

    // a malformed answer and one for an invitation never sent are protocol errors; the invitation waits for its timeout
    const garbled = await expectErrorName(formWith(venue, 'a garbled answer'), 'TeamFormationError')
    expect(garbled.failures[0].tried[0]).toMatchObject({ outcome: 'declined', code: 'BUSY' })
    expect(venue.ext.protocolErrors).toBe(2)
    expect(venue.logs).toContain('protocol error: team-answer.accept must be a boolean')
    expect(venue.logs).toContain('protocol error: Unknown invitation never-sent')
    expect(of(venue, 'team-invite').length).toBe(3)
    expect(host.teams.teams().filter(t => t.agent === venue.ext.agent.did)).toEqual([])
  }, 60_000)

  it('accepts an unanswered invitation when inviteDefault is accept; a bad inviteDefault is a TypeError', async () => {
    await expectErrorName(startExternalAgent(host, { command: [process.execPath, TEAM_AGENT], card: { key: 'bad-default', name: 'Bad', skills: [] }, inviteDefault: 'maybe' as any }), 'TypeError')
    const venue = await startProgram(host, { inviteDefault: 'accept', inviteAnswerTimeout: 300 })
    const team = await formWith(venue, 'a silent but willing venue')
    expect(team.roster.members.map(m => m.agent)).toContain(venue.ext.agent.did)
    await until(() => of(venue, 'team-message', team.id)[0], { timeout: 20_000, what: 'the roster reaches the program' })
  }, 60_000)

  it('answers posts that fail with typed errors, and bounds the posts in flight', async () => {
    const venue = await startProgram(host, { maxConcurrentPosts: 2 })
    const team = await formWith(venue, 'test the posts')
    await team.say('bad')
    const errors = await until(() => of(venue, 'team-post-error').length >= 3 ? of(venue, 'team-post-error') : undefined, { timeout: 20_000, what: 'three post errors' })
    // refused by the node (malformed, not a member), and by the team's sequencer (the body does not fit discuss)
    expect(errors.map(e => [e.id, e.code]).sort()).toEqual([['x1', 'INVALID_POST'], ['y2', 'UNKNOWN_TEAM'], ['z3', 'INVALID_MESSAGE']])
    // a malformed post counts as a protocol error (as a malformed call does); one to another team does not
    expect(venue.ext.protocolErrors).toBe(1)

    await team.say('burst 4')
    await until(() => of(venue, 'team-posted').length + of(venue, 'team-post-error').length >= 7 || undefined, { timeout: 20_000, what: 'four answers' })
    expect(of(venue, 'team-posted').map(p => p.id).sort()).toEqual(['b4', 'b5'])
    expect(of(venue, 'team-post-error').filter(e => e.code === 'TOO_MANY_POSTS').map(e => e.id).sort()).toEqual(['b6', 'b7'])
    await until(() => team.history().filter(e => e.msg.payload.from === venue.ext.agent.did).length >= 2 || undefined, { timeout: 20_000, what: 'the posts ordered' })

    // it leaves: answered team-posted (no seq), the roster drops it, and the program is told the team ended for it
    await team.say('leave')
    const left = await until(() => of(venue, 'team-ended', team.id)[0], { timeout: 20_000, what: 'team-ended' })
    expect(left.reason).toBe('left')
    expect(of(venue, 'team-posted').find(p => p.id === 'l8')).toMatchObject({ team: team.id, epoch: 0 })
    await until(() => team.roster.members.every(m => m.agent !== venue.ext.agent.did) || undefined, { timeout: 20_000, what: 'the roster without the program' })
    expect(left.next).toBe(team.history().findIndex(e => e.msg.payload.type === 'roster' && e.seq > 0) + 1)
  }, 60_000)

  it('forms a team as convener with team-form; a formation that fails comes back with its failures', async () => {
    const goal = { text: 'find a forecast for the concert', capabilities: ['weather.forecast'] }
    const roles = [{ role: 'weather', capabilities: ['weather.forecast'], candidates: [ref(other, weather)] }]
    const flow = { maxTurns: 40, turnTimeout: 20_000 }
    const venue = await startProgram(host, { options: { form: { goal, roles, flow } } })
    const formed = await until(() => of(venue, 'team-formed')[0], { timeout: 30_000, what: 'team-formed' })
    const member = await until(() => other.teams.team(formed.team), { timeout: 20_000, what: 'the weather node holds the team' })
    expect(member.roster.convener).toBe(venue.ext.agent.did)
    // the program's flow options are the first roster's limits, on every member
    expect(member.roster.limits).toMatchObject(flow)
    await member.say('sunny until 17:00')
    await until(() => of(venue, 'team-message', formed.team).find(m => m.body?.text === 'sunny until 17:00'), { timeout: 20_000, what: 'the member\'s message reaches the convening program' })

    // a role whose only candidate is not there: FORMATION_FAILED with the role's failures
    const nobody = { agent: organiser.did, peer: host.transport.peerId.toString() }
    const failing = await startProgram(host, { options: { form: { goal, roles: [{ role: 'weather', capabilities: ['weather.forecast'], candidates: [nobody] }] } } })
    const err = await until(() => of(failing, 'team-form-error')[0], { timeout: 30_000, what: 'team-form-error' })
    expect(err).toMatchObject({ id: 'f1', code: 'FORMATION_FAILED', failures: [{ role: 'weather', tried: [{ agent: organiser.did, outcome: 'failed' }] }] })
    expect(failing.ext.protocolErrors).toBe(0)

    // a flow with a field the teams spec does not name: INVALID_FORM and a protocol error
    const odd = await startProgram(host, { options: { form: { goal, roles, flow: { policy: 'open', speed: 'fast' } } } })
    const refused = await until(() => of(odd, 'team-form-error')[0], { timeout: 30_000, what: 'the refused flow' })
    expect(refused).toMatchObject({ id: 'f1', code: 'INVALID_FORM' })
    expect(odd.ext.protocolErrors).toBe(1)
    // a value the teams spec refuses (maxTurns 1 to 1,000,000): INVALID_TEAM_RECORD, not a protocol error
    const zero = await startProgram(host, { options: { form: { goal, roles, flow: { maxTurns: 0 } } } })
    const bad = await until(() => of(zero, 'team-form-error')[0], { timeout: 30_000, what: 'the refused maxTurns' })
    expect(bad).toMatchObject({ id: 'f1', code: 'INVALID_TEAM_RECORD' })
    expect(zero.ext.protocolErrors).toBe(0)
  }, 90_000)

  it('tells the program of an entry too large for a line: it comes without its body, with its size', async () => {
    const venue = await startProgram(host, { maxLineBytes: 4_096 })
    const team = await formWith(venue, 'long speeches')
    const long = await team.say('z'.repeat(6_000))
    await team.say('short')
    await until(() => of(venue, 'team-message', team.id).length >= 3 || undefined, { timeout: 20_000, what: 'three entries' })
    const [, cut, short] = of(venue, 'team-message', team.id)
    expect(cut).toMatchObject({ seq: long.seq, kind: 'discuss', from: organiser.did, body: null })
    expect(cut.cut).toBeGreaterThan(6_000)
    expect(short).toMatchObject({ seq: long.seq + 1, body: { text: 'short' } })
    expect(venue.logs.some(l => l.includes('exceeds maxLineBytes (4096)'))).toBe(true)
  }, 60_000)

  it('gets an assignment as a task whose team field names the assign entry', async () => {
    const venue = await startProgram(host)
    const did = venue.ext.agent.did
    const team = await formWith(venue, 'book a hall')
    const taskId = `assign-${Date.now()}`
    const assign = await team.post('assign', { mode: 'async', task: taskId, assignee: did, skill: 'venue.booking', input: { hall: 'B' } })
    await until(() => of(venue, 'team-message', team.id).find(m => m.kind === 'assign'), { timeout: 20_000, what: 'the assign entry reaches the program' })
    await host.interconnect.announced()
    await until(async () => await conv.interconnect.resolve(did, { cache: false, timeout: 5_000 }).then(() => true, () => undefined), { timeout: 30_000, interval: 200, what: 'the program agent resolves' })
    const token = await conv.delegate(organiser, { audience: did, capabilities: [{ skill: 'venue.booking' }], expiresAt: Date.now() + 300_000 })
    const done = await conv.tasks.submitAndWait(organiser.identity, did, { skill: 'venue.booking', input: { hall: 'B' }, proofs: [token], taskId })
    expect(done.state).toBe('completed')
    expect(done.result).toEqual({ booked: { hall: 'B' }, team: { id: team.id, seq: assign.seq, mode: 'async', assigner: organiser.did } })
    // a task no assign entry names has no team field
    const plain = await conv.tasks.submitAndWait(organiser.identity, did, { skill: 'venue.booking', input: {}, proofs: [token] })
    expect(plain.result).toEqual({ booked: {}, team: null })
  }, 90_000)

  it('loses nothing and repeats nothing when the program reads slowly (the node does not queue for it), and still tells a task its team', async () => {
    // a node whose events() readers overflow soon, so that the re-read from the log is exercised
    const slowHost = await createIoaNode({ listen: LISTEN, bootstrap: [conv.addresses()[0]], teams: { maxBufferedEvents: 4 } })
    extraNodes.push(slowHost)
    await connected(conv, slowHost)
    const venue = await startProgram(slowHost, { maxTeamBacklogBytes: 1_024 })
    const did = venue.ext.agent.did
    await slowHost.interconnect.announced()
    await until(async () => await conv.interconnect.resolve(did, { cache: false, timeout: 5_000 }).then(() => true, () => undefined), { timeout: 30_000, interval: 200, what: 'the program agent resolves' })
    const team = await formWith(venue, 'a long discussion', false, slowHost)
    await team.say('sleep 8000')
    await until(() => of(venue, 'team-message', team.id).find(m => m.body.text === 'sleep 8000'), { timeout: 20_000, what: 'the program stops reading' })
    // 100 messages of 8,000 characters: more than the socket pair and the program's own input buffer hold while it does not read
    for (let i = 0; i < 100; i++) await team.say(`${i} ${'x'.repeat(8_000)}`)
    // an assignment while the program is behind: its task still names the assign entry
    const taskId = `slow-${Date.now()}`
    const assign = await team.post('assign', { mode: 'sync', task: taskId, assignee: did, skill: 'venue.booking' })
    // the program's node holds the entry (written to the program or not)
    await (slowHost.teams.team(team.id) as Team).waitFor(assign.seq)
    expect(of(venue, 'team-message', team.id).length).toBeLessThan(assign.seq)
    const token = await conv.delegate(organiser, { audience: did, capabilities: [{ skill: 'venue.booking' }], expiresAt: Date.now() + 300_000 })
    const done = await conv.tasks.submitAndWait(organiser.identity, did, { skill: 'venue.booking', input: {}, proofs: [token], taskId })
    expect(done.result).toEqual({ booked: {}, team: { id: team.id, seq: assign.seq, mode: 'sync', assigner: organiser.did } })

    await until(() => of(venue, 'team-message', team.id).length >= team.length || undefined, { timeout: 30_000, what: 'every entry reaches the program' })
    const got = of(venue, 'team-message', team.id)
    expect(got.map(m => m.seq)).toEqual(team.history().map(e => e.seq))
    expect(got.filter(m => m.kind === 'discuss' && m.body.text !== 'sleep 8000').map(m => Number(m.body.text.split(' ')[0]))).toEqual([...Array(100).keys()])
  }, 90_000)
})

describe('version 1 programs on a version 2 node', () => {
  it('a v1 program is welcomed with ioa-agent/1, its tasks run, it gets no team lines and team-post is a protocol error', async () => {
    const v1 = await startProgram(host, { options: { v1only: true } })
    expect((await until(() => of(v1, 'welcome')[0], { what: 'welcome' })).protocol).toBe('ioa-agent/1')
    // the node's acceptor answers for it (it serves venue.booking: accepted), and it is not told
    const team = await formWith(v1, 'a team with a v1 program')
    await team.say('ping')
    const member = await until(() => host.teams.team(team.id), { timeout: 20_000, what: 'the host holds the team' })
    await member.waitFor(1)
    expect(of(v1, 'team-invite')).toEqual([])
    expect(of(v1, 'team-message')).toEqual([])
    expect(v1.ext.protocolErrors).toBe(1)
    expect(v1.logs).toContain('protocol error: team-post is a message of ioa-agent/2')

    // the echo program of version 1 (unchanged) in a team sees no line it does not know
    const echo = await startProgram(host, {}, [process.execPath, ECHO])
    const team2 = await conv.teams.form(organiser.did, { text: 'upper-case the posters', capabilities: ['text.upper'] }, {
      roles: [{ role: 'text', capabilities: ['text.upper'], candidates: [ref(host, echo.ext.agent)] }]
    })
    await team2.say('hello')
    await until(() => host.teams.team(team2.id), { timeout: 20_000, what: 'the host holds the second team' })
    const did = echo.ext.agent.did
    await host.interconnect.announced()
    await until(async () => await conv.interconnect.resolve(did, { cache: false, timeout: 5_000 }).then(() => true, () => undefined), { timeout: 30_000, interval: 200, what: 'the echo agent resolves' })
    const token = await conv.delegate(organiser, { audience: did, capabilities: [{ skill: 'text.upper' }], expiresAt: Date.now() + 300_000 })
    const done = await conv.tasks.submitAndWait(organiser.identity, did, { skill: 'text.upper', input: { text: 'hi' }, proofs: [token] })
    expect(done.result).toMatchObject({ text: 'HI' })
    expect(echo.logs.filter(l => l.startsWith('unknown message'))).toEqual([])
    expect(echo.ext.protocolErrors).toBe(0)
  }, 90_000)
})
