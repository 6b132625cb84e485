/**
 * Flow control of the group conversation between separate nodes over TCP
 * on 127.0.0.1 (`spec/teams.md` 10.1-10.5): every transition of the state
 * machine and its refusal, `max_turns` and the deadline ending a
 * conversation, the rule policies (round-robin, moderator, priority), the
 * LLM policy against a local HTTP server (good, malformed and slow
 * answers), a silent speaker losing its turn, and a new sequencer
 * continuing the turn order after the old one stopped.
 */
import { createServer } from 'node:http'
import { afterEach, describe, expect, it } from 'vitest'
import { delay, expectErrorCode, until } from '../../../test/util.js'
import { LlmSpeakerPolicy } from '../src/teams/index.js'
import { FAST, goal, settled, startTeamPeers } from './teams-fixture.js'
import type { FlowOptions, SpeakerPolicy, Team, TeamEvent, TeamsInit } from '../src/teams/index.js'
import type { TeamPeer } from './teams-fixture.js'
import type { Server } from 'node:http'

let closers: Array<() => Promise<unknown>> = []

afterEach(async () => {
  for (const c of closers.reverse()) await c().catch(() => {})
  closers = []
})

/** Form a team of peers[0] (convener) with every other peer, roles r0, r1, … in that order */
async function formAll (peers: TeamPeer[], flow?: FlowOptions, deadline?: number): Promise<Team[]> {
  const [convener, ...others] = peers
  const g = goal('move the outdoor event', ['team.member'])
  const team = await convener.teams.form(convener.agent.did, deadline == null ? g : { ...g, deadline }, {
    roles: others.map((p, i) => ({ role: `r${i}`, capabilities: ['team.member'], candidates: [p.ref] })),
    flow
  })
  await settled(peers, team.id, 1)
  return peers.map(p => p.teams.team(team.id) as Team)
}

/** Collect a team's events of some types */
function collect (team: Team, types: Array<TeamEvent['type']>): TeamEvent[] {
  const seen: TeamEvent[] = []
  const controller = new AbortController()
  closers.push(async () => { controller.abort() })
  void (async () => {
    for await (const e of team.events({ from: 0, signal: controller.signal })) if (types.includes(e.type)) seen.push(e)
  })().catch(() => {})
  return seen
}

/** Wait until every handle holds `length` entries */
async function at (handles: Team[], length: number): Promise<void> {
  await until(() => handles.every(t => t.length >= length) || undefined, { timeout: 20_000, what: `${length} entries` })
}

function types (t: Team): string[] {
  return t.history().map(e => e.msg.payload.type)
}

describe('teams flow: the state machine', () => {
  it('discussion, sync, paused and back; each refused transition gets its typed error; every member holds the same state', async () => {
    const peers = await startTeamPeers(closers, 3)
    const [conv, a, b] = await formAll(peers)
    const states = collect(a, ['state'])
    expect(a.flow).toMatchObject({ phase: 'discussion', turn: 0 })
    expect(a.flow.speaker).toBeUndefined()
    await a.say('let us check the weather first')
    // a sync assignment: the conversation waits for it
    await a.post('assign', { mode: 'sync', task: 'task-weather', assignee: b.agent, skill: 'weather.forecast' })
    await until(() => conv.flow.phase === 'sync' || undefined)
    const inSync = await expectErrorCode(conv.say('meanwhile…'), 'ILLEGAL_TRANSITION')
    expect(inSync.name).toBe('IllegalTransitionError')
    await expectErrorCode(a.say('meanwhile…'), 'ILLEGAL_TRANSITION')
    await expectErrorCode(conv.post('assign', { mode: 'async', task: 'task-other', assignee: a.agent, skill: 'x' }), 'ILLEGAL_TRANSITION')
    await expectErrorCode(conv.post('pause', { tasks: ['task-weather'] }), 'ILLEGAL_TRANSITION')
    await expectErrorCode(a.post('vote', { proposal: 1, choice: 'yes' }), 'ILLEGAL_TRANSITION')
    // only the assignee reports
    await expectErrorCode(a.post('progress', { task: 'task-weather', state: 'working' }), 'ILLEGAL_TRANSITION')
    await expectErrorCode(b.post('progress', { task: 'task-unknown', state: 'working' }), 'ILLEGAL_TRANSITION')
    await b.post('progress', { task: 'task-weather', state: 'working', text: 'fetching' })
    await b.post('result', { task: 'task-weather', state: 'completed', output: { rain: 0.8 } })
    await until(() => a.flow.phase === 'discussion' || undefined)
    // a result closes a task once
    await expectErrorCode(b.post('result', { task: 'task-weather', state: 'completed' }), 'ILLEGAL_TRANSITION')
    await expectErrorCode(a.post('assign', { mode: 'sync', task: 'task-weather', assignee: b.agent, skill: 'weather.forecast' }), 'ILLEGAL_TRANSITION')
    // an async assignment runs beside the discussion; a pause waits for it
    await a.post('assign', { mode: 'async', task: 'task-venue', assignee: b.agent, skill: 'venue.booking' })
    expect(conv.flow.phase).toBe('discussion')
    await conv.say('the venue is being booked; what about transport?')
    await expectErrorCode(conv.post('pause', { tasks: ['task-never-assigned'] }), 'ILLEGAL_TRANSITION')
    await conv.post('pause', { tasks: ['task-venue', 'task-weather'] })
    await until(() => b.flow.phase === 'paused' || undefined)
    await expectErrorCode(a.say('are we there yet?'), 'ILLEGAL_TRANSITION')
    await expectErrorCode(a.post('assign', { mode: 'async', task: 'task-new', assignee: b.agent, skill: 'x' }), 'ILLEGAL_TRANSITION')
    await b.post('result', { task: 'task-venue', state: 'completed', output: { venue: 'hall B' } })
    await until(() => a.flow.phase === 'discussion' || undefined)
    // a reassignment of an open sync task: by its assigner or the convener, not by others
    await a.post('assign', { mode: 'sync', task: 'task-transport', assignee: b.agent, skill: 'transport' })
    await until(() => conv.flow.phase === 'sync' || undefined)
    await expectErrorCode(b.post('assign', { mode: 'sync', task: 'task-transport', assignee: a.agent, skill: 'transport' }), 'ILLEGAL_TRANSITION')
    await expectErrorCode(conv.post('assign', { mode: 'async', task: 'task-transport', assignee: a.agent, skill: 'transport' }), 'ILLEGAL_TRANSITION')
    await conv.post('assign', { mode: 'sync', task: 'task-transport', assignee: a.agent, skill: 'transport' })
    // the former assignee no longer reports, nor closes a lapsed lease; the convener does
    await expectErrorCode(b.post('result', { task: 'task-transport', state: 'completed' }), 'ILLEGAL_TRANSITION')
    await expectErrorCode(b.post('result', { task: 'task-transport', state: 'failed', error: { code: 'LEASE_LAPSED' } }), 'ILLEGAL_TRANSITION')
    await conv.post('result', { task: 'task-transport', state: 'failed', error: { code: 'LEASE_LAPSED', message: 'silent' } })
    await until(() => b.flow.phase === 'discussion' || undefined)
    // the sequencer's own decision type cannot be posted
    await expectErrorCode(a.post('turn', { turn: 0, state: 'discussion', policy: 'open', speaker: a.agent }), 'INVALID_MESSAGE')
    await at([conv, a, b], conv.length)
    for (const t of [conv, a, b]) expect({ phase: t.flow.phase, turn: t.flow.turn, open: [...t.flow.tasks.keys()] }).toEqual({ phase: 'discussion', turn: 6, open: [] })
    expect(states.map(e => e.type === 'state' ? e.state : '')).toEqual(['sync', 'discussion', 'paused', 'discussion', 'sync', 'discussion'])
  })

  it('max_turns ends the conversation: the sequencer concludes, later turns are refused', async () => {
    const peers = await startTeamPeers(closers, 3)
    const [conv, a, b] = await formAll(peers, { maxTurns: 3 })
    expect(conv.roster.limits.maxTurns).toBe(3)
    await a.say('one')
    await b.say('two')
    // votes and progress do not take turns
    await conv.post('vote', { proposal: 1, choice: 'yes' })
    await conv.say('three')
    await until(() => b.concluded || undefined, { what: 'concluded at max_turns' })
    const last = b.history().at(-1)
    expect(last?.msg.payload).toMatchObject({ type: 'conclude', from: conv.agent, body: { summary: 'max_turns (3) reached', outcome: 'abandoned' } })
    await expectErrorCode(a.say('four'), 'TEAM_CONCLUDED')
  })

  it('flow options out of their bounds are refused before anyone is invited', async () => {
    const peers = await startTeamPeers(closers, 3)
    for (const flow of [{ maxTurns: 0 }, { policy: 'Not A Name' }, { turnTimeout: 10 }, { priority: [] }, { priority: ['r0', 'r0'] }]) {
      await expectErrorCode(formAll(peers, flow), 'INVALID_TEAM_RECORD')
    }
    expect(peers[1].teams.teams()).toHaveLength(0)
  })

  it('the deadline ends a conversation that waits for a sync assignment', async () => {
    const peers = await startTeamPeers(closers, 3)
    const [, a, b] = await formAll(peers, undefined, Date.now() + 5_000)
    await a.post('assign', { mode: 'sync', task: 'task-slow', assignee: b.agent, skill: 'slow' })
    await until(() => b.flow.phase === 'sync' || undefined)
    await until(() => b.concluded || undefined, { timeout: 20_000, what: 'concluded at the deadline' })
    expect(b.history().at(-1)?.msg.payload).toMatchObject({ type: 'conclude', body: { outcome: 'abandoned' } })
    expect(b.flow.phase).toBe('concluded')
  })
})

describe('teams flow: members check the sequencer', () => {
  it('a member refuses an entry the machine refuses, even from the sequencer', async () => {
    const peers = await startTeamPeers(closers, 3)
    const [conv, a, b] = await formAll(peers, { policy: 'round-robin' })
    await conv.say('welcome')
    await at([a, b], 3)
    // a sequencer that skips its own flow check orders b's message although it is a's turn
    const rogue = conv as unknown as { flowControl: { check: () => void, apply: () => unknown[] } }
    rogue.flowControl.check = () => {}
    rogue.flowControl.apply = () => []
    const msg = await (b as unknown as { sign: (type: string, body: Record<string, unknown>) => Promise<unknown> }).sign('discuss', { text: 'out of turn' })
    const answer = await peers[2].node.services.messaging.request(peers[0].node.peerId, '/ioa/team/1.0.0', 'post', { team: conv.id, msg }) as { seq: number }
    expect(answer.seq).toBe(3)
    expect(conv.length).toBe(4)
    // the members do not take it: their logs stay at 3 entries, their state at a's turn
    await delay((FAST.heartbeat as number) * 5)
    for (const t of [a, b]) {
      expect(t.length).toBe(3)
      expect(t.flow.speaker).toBe(a.agent)
    }
  })
})

describe('teams flow: rule policies', () => {
  it('round-robin: the convener opens, the turn goes by the successor order, others get NOT_YOUR_TURN; a silent speaker loses its turn', async () => {
    const peers = await startTeamPeers(closers, 3)
    const [conv, a, b] = await formAll(peers, { policy: 'round-robin', turnTimeout: 4_000 })
    const turns = collect(b, ['turn'])
    expect(a.flow.speaker).toBe(conv.agent)
    const early = await expectErrorCode(a.say('me first'), 'NOT_YOUR_TURN')
    expect(early.name).toBe('NotYourTurnError')
    await conv.say('welcome')
    expect(conv.roster.successors).toEqual([conv.agent, a.agent, b.agent])
    await until(() => a.flow.speaker === a.agent || undefined)
    await expectErrorCode(conv.say('and also'), 'NOT_YOUR_TURN')
    await expectErrorCode(b.say('me'), 'NOT_YOUR_TURN')
    await a.say('the forecast says rain')
    await until(() => b.flow.speaker === b.agent || undefined)
    // b stays silent: after turnTimeout the turn passes to the next one
    await until(() => b.flow.speaker === conv.agent || undefined, { timeout: 15_000, what: 'skip of a silent speaker' })
    await conv.say('b is quiet; moving on')
    await until(() => turns.length >= 4 || undefined)
    const decided = turns.map(e => e.type === 'turn' ? [e.speaker, e.policy, e.turn] : [])
    expect(decided).toEqual([[a.agent, 'round-robin', 1], [b.agent, 'round-robin', 2], [conv.agent, 'round-robin', 2], [a.agent, 'round-robin', 3]])
    expect(turns[2]).toMatchObject({ reason: expect.stringContaining('turn timeout') })
    // the decisions are entries of the log, appended by the sequencer right after each turn
    expect(types(b).slice(1, 4)).toEqual(['discuss', 'turn', 'discuss'])
  })

  it('moderator: the moderator names the next speaker; the floor comes back to it', async () => {
    const peers = await startTeamPeers(closers, 3)
    const [conv, a, b] = await formAll(peers, { policy: 'moderator' })
    await conv.post('discuss', { text: 'b, what does the ticketing say?', next: b.agent })
    await until(() => a.flow.speaker === b.agent || undefined)
    await expectErrorCode(a.say('can I?'), 'NOT_YOUR_TURN')
    await b.say('half the tickets are sold')
    await until(() => a.flow.speaker === conv.agent || undefined)
    // without a name the moderator keeps the floor
    await conv.say('noted')
    await until(() => a.flow.turn === 3 && a.flow.speaker === conv.agent || undefined)
    await conv.post('discuss', { text: 'a, your turn', next: a.agent })
    await until(() => b.flow.speaker === a.agent || undefined)
    await a.say('the venue can move to Sunday')
    await until(() => b.flow.speaker === conv.agent || undefined)
  })

  it('priority: the member with the fewest turns speaks, the higher role first', async () => {
    const peers = await startTeamPeers(closers, 3)
    const [conv, a, b] = await formAll(peers, { policy: 'priority', priority: ['r1', 'r0'] })
    const order: string[] = [conv.agent]
    await conv.say('opening')
    for (let k = 0; k < 4; k++) {
      const next = await until(() => conv.flow.speaker ?? undefined)
      order.push(next)
      await [conv, a, b].find(t => t.agent === next)?.say(`turn ${k}`)
      await until(() => conv.flow.turn === k + 2 || undefined)
    }
    // b (r1) before a (r0) before the convener (not listed), each round by fewest turns
    expect(order).toEqual([conv.agent, b.agent, a.agent, b.agent, a.agent])
  })
})

/** A local OpenAI-compatible endpoint whose answer the test sets */
async function modelServer (): Promise<{ url: string, answer: { content?: string, delay?: number, status?: number }, requests: unknown[] }> {
  const state = { url: '', answer: {} as { content?: string, delay?: number, status?: number }, requests: [] as unknown[] }
  const server: Server = createServer((req, res) => {
    let body = ''
    req.on('data', (c: Buffer) => { body += c.toString() })
    req.on('end', () => {
      state.requests.push(JSON.parse(body))
      const { content = '{}', delay = 0, status = 200 } = state.answer
      const t = setTimeout(() => {
        res.writeHead(status, { 'content-type': 'application/json' })
        res.end(JSON.stringify({ choices: [{ message: { role: 'assistant', content } }] }))
      }, delay)
      res.on('close', () => { clearTimeout(t) })
    })
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  closers.push(async () => { server.closeAllConnections(); await new Promise(resolve => server.close(resolve)) })
  const addr = server.address() as { port: number }
  state.url = `http://127.0.0.1:${addr.port}/v1`
  return state
}

describe('teams flow: the llm policy', () => {
  it('asks the model for the next speaker; a malformed, failing or slow answer falls back to round-robin, and the decision says so; the model can conclude', async () => {
    const model = await modelServer()
    const llm: TeamsInit['llm'] = { url: model.url, model: 'test-model', timeout: 1_000 }
    const peers = await startTeamPeers(closers, 3, (i) => i === 0 ? { init: { llm } } : {})
    const [conv, a, b] = await formAll(peers, { policy: 'llm' })
    const turns = collect(a, ['turn'])
    model.answer = { content: JSON.stringify({ speaker: 'r1', reason: 'ticketing knows the numbers' }) }
    await conv.say('how many tickets are sold?')
    await until(() => a.flow.speaker === b.agent || undefined)
    expect(turns[0]).toMatchObject({ speaker: b.agent, policy: 'llm', reason: 'ticketing knows the numbers' })
    expect(turns[0]).not.toHaveProperty('fallback')
    const asked = model.requests[0] as { model: string, messages: Array<{ content: string }> }
    expect(asked.model).toBe('test-model')
    expect(JSON.parse(asked.messages[1].content)).toMatchObject({ goal: 'move the outdoor event', state: 'discussion', turn: 1, after: conv.agent })
    // not JSON: round-robin after b is the convener
    model.answer = { content: 'I think the venue agent should talk' }
    await b.say('half of them')
    await until(() => turns.length >= 2 || undefined)
    expect(turns[1]).toMatchObject({ speaker: conv.agent, policy: 'llm', fallback: 'round-robin', reason: expect.stringContaining('llm: ') })
    // slower than the timeout
    model.answer = { content: JSON.stringify({ speaker: 'r1' }), delay: 3_000 }
    await conv.say('and the weather?')
    await until(() => turns.length >= 3 || undefined, { timeout: 15_000 })
    expect(turns[2]).toMatchObject({ speaker: a.agent, fallback: 'round-robin', reason: expect.stringContaining('1000 ms') })
    // a speaker that is not a member
    model.answer = { content: JSON.stringify({ speaker: 'the mayor' }) }
    await a.say('rain all day')
    await until(() => turns.length >= 4 || undefined)
    expect(turns[3]).toMatchObject({ speaker: b.agent, fallback: 'round-robin', reason: expect.stringContaining('not a member') })
    // an HTTP error
    model.answer = { status: 500 }
    await b.say('then we move')
    await until(() => turns.length >= 5 || undefined)
    expect(turns[4]).toMatchObject({ speaker: conv.agent, fallback: 'round-robin', reason: expect.stringContaining('HTTP 500') })
    // the model ends the conversation
    model.answer = { content: '```json\n{"conclude": true, "reason": "the event moves to Sunday"}\n```' }
    await conv.say('so Sunday it is')
    await until(() => a.concluded || undefined)
    expect(a.history().at(-1)?.msg.payload).toMatchObject({ type: 'conclude', from: conv.agent, body: { outcome: 'done', summary: 'the llm policy concluded: the event moves to Sunday' } })
    // one request per decision
    expect(model.requests).toHaveLength(6)
  })
})

describe('teams flow: the llm policy\'s options', () => {
  it('are checked when the service is made', () => {
    expect(() => new LlmSpeakerPolicy({ url: '', model: 'm' })).toThrow(TypeError)
    expect(() => new LlmSpeakerPolicy({ url: 'http://127.0.0.1:1/v1', model: '' })).toThrow(TypeError)
    expect(() => new LlmSpeakerPolicy({ url: 'http://127.0.0.1:1/v1', model: 'm', timeout: 0 })).toThrow(TypeError)
    expect(() => new LlmSpeakerPolicy({ url: 'http://127.0.0.1:1/v1', model: 'm', maxResponseBytes: 1.5 })).toThrow(TypeError)
  })
})

describe('teams flow: takeover', () => {
  it('a new sequencer continues the turn order from the log, and makes the decision the old one owed', async () => {
    // the convener's policy never answers: when it stops, a decision is owed
    const hanging: SpeakerPolicy = { decide: async ({ signal }) => await new Promise((_resolve, reject) => { signal.addEventListener('abort', () => { reject(signal.reason) }) }) }
    const peers = await startTeamPeers(closers, 4, (i) => i === 0 ? { init: { policies: { panel: hanging } } } : {})
    const handles = await formAll(peers, { policy: 'panel' })
    const [conv, a, b, c] = handles
    await conv.say('opening, then I hand over')
    await at([a, b, c], 2)
    for (const t of [a, b, c]) expect(t.flow.due).toMatchObject({ kind: 'turn', after: conv.agent })
    expect(a.flow.speaker).toBeUndefined()
    await peers[0].teams.stop()
    await peers[0].node.stop()
    // the next successor (a) takes over and owes the decision: it has no `panel` policy, so round-robin decides
    await until(() => b.flow.speaker === a.agent || undefined, { timeout: 30_000, what: 'the decision after the takeover' })
    expect(b.epoch).toBe(1)
    expect(b.sequencer).toBe(a.agent)
    const decision = b.history().at(-1)?.msg.payload
    expect(decision).toMatchObject({ type: 'turn', from: a.agent, body: { speaker: a.agent, fallback: 'round-robin', turn: 1, reason: expect.stringContaining('no panel policy') } })
    expect(types(b).slice(-3)).toEqual(['discuss', 'epoch', 'turn'])
    // the order goes on: a, then b, then c
    await a.say('I sequence now')
    await until(() => c.flow.speaker === b.agent || undefined, { timeout: 15_000 })
    await b.say('fine by me')
    await until(() => a.flow.speaker === c.agent || undefined, { timeout: 15_000 })
    await at([a, b, c], a.length)
    for (const t of [b, c]) expect(t.history().map(e => e.msg.payload.id)).toEqual(a.history().map(e => e.msg.payload.id))
  })
})
