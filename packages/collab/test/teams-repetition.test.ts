/**
 * The repetition filter (`spec/teams.md` 10.7): the `repetition-vectors`
 * block of section 12 against the code, and, between separate nodes over
 * TCP on 127.0.0.1, a repeat refused by the sender's node, a repeat posted
 * by a node that bypasses its filter refused by the sequencer with the same
 * code, a near miss accepted, an entry that repeats refused by a member, and
 * the roster's `limits` turning the filter off or narrowing its window.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { expectErrorCode, prng, readSpecBlock, until } from '../../../test/util.js'
import { RepeatedError, repetitionSaved, shingles, similarity, teamService, words } from '../src/teams/index.js'
import { newId, signRecord } from '../src/teams/records.js'
import { isRepeat, overlap, repeatOverlap } from '../src/teams/repetition.js'
import { goal, settled, startTeamPeers } from './teams-fixture.js'
import type { Team, TeamEvent, TeamServiceComponents, TeamsInit } from '../src/teams/index.js'
import type { Entry } from '../src/teams/records.js'
import type { TeamRuntime } from '../src/teams/team.js'
import type { TeamPeer } from './teams-fixture.js'

interface Vectors {
  threshold: number
  pairs: Array<{ a: string, b: string, shared: number, union: number, similarity: number, repeat: boolean }>
  words: Array<{ text: string, words: string[] }>
}

let closers: Array<() => Promise<unknown>> = []

afterEach(async () => {
  for (const c of closers.reverse()) await c().catch(() => {})
  closers = []
})

const PLAN = 'Move the concert to Saturday: the forecast says storms on Friday.'

async function team3 (init: TeamsInit = {}): Promise<{ peers: TeamPeer[], handles: Team[] }> {
  const peers = await startTeamPeers(closers, 3, () => ({ init }))
  const [convener, ...others] = peers
  const team = await convener.teams.form(convener.agent.did, goal('move the outdoor event', ['team.member']), {
    roles: others.map((p, i) => ({ role: `r${i}`, capabilities: ['team.member'], candidates: [p.ref] }))
  })
  await settled(peers, team.id, 1)
  return { peers, handles: peers.map(p => p.teams.team(team.id) as Team) }
}

/** A message of a member signed by its own key, as a node that skips its own filter would post it */
async function rawMessage (peer: TeamPeer, team: Team, text: string): Promise<unknown> {
  return await signRecord('message', { v: 1 as const, team: team.id, from: peer.agent.did, id: newId(), type: 'discuss' as const, body: { text }, ts: Date.now() }, peer.agent.identity)
}

describe('repetition filter', () => {
  it('matches the vectors of spec section 12', () => {
    const v = readSpecBlock<Vectors>('teams.md', 'repetition-vectors')
    expect(v.pairs.length).toBeGreaterThan(5)
    for (const w of v.words) expect(words(w.text)).toEqual(w.words)
    for (const p of v.pairs) {
      const o = overlap(shingles(p.a), shingles(p.b))
      expect({ shared: o.shared, union: o.union }, `${p.a} / ${p.b}`).toEqual({ shared: p.shared, union: p.union })
      expect(similarity(p.a, p.b)).toBe(p.similarity)
      expect(similarity(p.b, p.a)).toBe(p.similarity)
      expect(isRepeat(o, v.threshold), `${p.a} / ${p.b}`).toBe(p.repeat)
      // the early-stopping count the filter uses gives the same verdict at any threshold
      for (const t of [1, 166, 500, 750, 800, 900, 1000]) {
        expect(repeatOverlap(shingles(p.a), shingles(p.b), t) != null, `${p.a} / ${p.b} at ${t}`).toBe(isRepeat(o, t))
      }
    }
    // and on random texts over a small vocabulary (many near repeats)
    const rnd = prng(13)
    const text = (): string => Array.from({ length: 3 + Math.floor(rnd() * 20) }, () => ['hall', 'rain', 'move', 'book', 'noon', 'bus'][Math.floor(rnd() * 6)]).join(' ')
    for (let i = 0; i < 500; i++) {
      const [a, b] = [shingles(text()), shingles(text())]
      const t = 1 + Math.floor(rnd() * 1000)
      expect(repeatOverlap(a, b, t) != null).toBe(isRepeat(overlap(a, b), t))
    }
    // both sides of the threshold are covered
    expect(v.pairs.some(p => p.repeat) && v.pairs.some(p => !p.repeat && p.shared > 0)).toBe(true)
  })

  it('the sender refuses a repeat, the sequencer refuses one whose node did not filter, a near miss passes', async () => {
    const { peers, handles } = await team3()
    const [convener, member, other] = handles
    const events: TeamEvent[] = []
    const ac = new AbortController()
    void (async () => { for await (const e of member.events({ signal: ac.signal })) if (e.type === 'repeated') events.push(e) })().catch(() => {})
    closers.push(async () => { ac.abort() })

    const { seq } = await convener.say(PLAN)
    await settled(peers, convener.id, seq + 1)
    // the same words, other case and punctuation: refused by the member's own node, nothing sent
    const err = await expectErrorCode(member.say('move the concert to saturday -- the forecast says STORMS on friday'), 'REPEATED')
    expect(err).toBeInstanceOf(RepeatedError)
    expect(err.name).toBe('RepeatedError')
    expect(err.seq).toBe(seq)
    expect(err.similarity).toBe(1)
    await until(() => events.length === 1 || undefined, { timeout: 10_000, what: 'repeated event' })
    expect(events[0]).toMatchObject({ type: 'repeated', of: seq, similarity: 1, messageType: 'discuss', by: 'sender' })
    expect(member.repetitionStats().notSent.messages).toBe(1)
    expect(member.repetitionStats().notSent.bytes).toBeGreaterThan(100)
    // a proposal is compared with discussion messages too
    await expectErrorCode(member.post('propose', { text: `${PLAN} Tonight.` }), 'REPEATED')

    // a node that bypasses its own filter: the sequencer refuses to order it, with the code and the seq it repeats
    const bypass = await rawMessage(peers[2], other, 'Move the concert to Saturday: the forecast says storms on Friday night.')
    const refused = await expectErrorCode(peers[2].node.services.messaging.request(peers[0].node.peerId, '/ioa/team/1.0.0', 'post', { team: convener.id, msg: bypass }), 'REPEATED')
    expect(refused.message).toContain(`repeats entry ${seq} (similarity 0.9)`)
    expect(convener.repetitionStats().notOrdered.messages).toBe(1)

    // near misses below the threshold are ordered
    const near = await member.say('Move the concert to Sunday: the forecast says storms on Friday.')
    const near2 = await other.say('The weather agent expects heavy rain after four')
    await other.say('The weather agent expects heavy rain after four, then wind')
    await settled(peers, convener.id, near2.seq + 2)
    expect(convener.history().map(e => e.msg.payload.body.text)).toContain('Move the concert to Sunday: the forecast says storms on Friday.')
    expect(near.seq).toBe(seq + 1)
    // short answers have no shingles and are never repeats
    await member.say('ok, agreed')
    await other.say('ok, agreed')
    // every member holds the same log, without the repeats
    await settled(peers, convener.id, near2.seq + 4)
    const texts = (t: Team): unknown[] => t.history().map(e => e.msg.payload.body.text)
    for (const t of handles) expect(texts(t)).toEqual(texts(convener))
    expect(texts(convener).filter(x => typeof x === 'string' && x.toLowerCase().startsWith('move the concert to saturday'))).toHaveLength(1)
  })

  it('two members say the same at once: one is ordered, the other refused by its node or by the sequencer, never both in the log', async () => {
    const { peers, handles } = await team3()
    const [convener, a, b] = handles
    for (let round = 0; round < 3; round++) {
      const text = `Round ${round}: move the concert to Saturday because storms are expected on Friday`
      const outcomes = await Promise.allSettled([a.say(text), b.say(text)])
      expect(outcomes.filter(o => o.status === 'fulfilled')).toHaveLength(1)
      const refused = outcomes.find(o => o.status === 'rejected') as PromiseRejectedResult
      expect(refused.reason.code).toBe('REPEATED')
      const { seq } = (outcomes.find(o => o.status === 'fulfilled') as PromiseFulfilledResult<{ seq: number }>).value
      expect(refused.reason.seq).toBe(seq)
    }
    // each refusal was counted once, where it happened: at the sender's node or at the sequencer
    const counted = a.repetitionStats().notSent.messages + b.repetitionStats().notSent.messages + convener.repetitionStats().notOrdered.messages
    expect(counted).toBe(3)
    const saved = repetitionSaved(handles.map(t => t.repetitionStats()), 3)
    expect(saved.messages).toBe(3)
    expect(saved.bytes).toBeGreaterThan(3 * 200)
    expect(saved.wireBytes).toBe(saved.bytes * 3)
    await settled(peers, convener.id, 4)
    for (const t of handles) expect(t.history().filter(e => e.msg.payload.type === 'discuss')).toHaveLength(3)
  })

  it('a member refuses an entry that repeats the log, so a sequencer cannot slip one in', async () => {
    const { peers, handles } = await team3()
    const [convener, member] = handles
    const { seq } = await convener.say(PLAN)
    await settled(peers, convener.id, seq + 1)
    const runtime = member as TeamRuntime
    const head = runtime.store.head as string
    const next = (msg: unknown): Entry => ({ seq: runtime.length, epoch: runtime.epoch, prev: head, msg: msg as Entry['msg'] })
    // the sequencer's own member repeats it: a member's entry check refuses it
    const repeat = next(await rawMessage(peers[0], convener, `${PLAN}`))
    const err = await expectErrorCode(runtime.check(repeat), 'REPEATED')
    expect(err.seq).toBe(seq)
    await expectErrorCode(runtime.check(repeat), 'REPEATED')
    // counted once, however often the entry comes again
    expect(member.repetitionStats().refused.messages).toBe(1)
    // the same check passes a message that does not repeat
    await runtime.check(next(await rawMessage(peers[0], convener, 'Tickets for Saturday go on sale at noon')))
    expect(member.length).toBe(seq + 1)
  })

  it('the roster carries the rule: window 0 turns it off, a window of 1 compares with the last message only', async () => {
    const off = await team3({ repeatWindow: 0 })
    expect(off.handles[0].roster.limits.repeatWindow).toBe(0)
    await off.handles[0].say(PLAN)
    const again = await off.handles[1].say(PLAN)
    await settled(off.peers, off.handles[0].id, again.seq + 1)
    expect(off.handles[2].history().filter(e => e.msg.payload.body.text === PLAN)).toHaveLength(2)

    const narrow = await team3({ repeatWindow: 1, repeatThreshold: 500 })
    const [c, m] = narrow.handles
    expect(c.roster.limits).toMatchObject({ repeatWindow: 1, repeatThreshold: 500 })
    await c.say(PLAN)
    // 0.5 reaches a threshold of 500 per mille
    await expectErrorCode(m.say('Move the concert to Sunday: the forecast says storms on Friday.'), 'REPEATED')
    const between = await m.say('Tickets for Saturday go on sale at noon')
    // the plan left the window of one message
    const back = await m.say(PLAN)
    expect(back.seq).toBe(between.seq + 1)
  })

  it('refuses out-of-range options', async () => {
    const components = { logger: { forComponent: () => Object.assign(() => {}, { error: () => {}, trace: () => {} }) } } as unknown as TeamServiceComponents
    for (const init of [{ repeatWindow: 1025 }, { repeatThreshold: 0 }, { repeatThreshold: 1001 }, { repeatWindow: -1 }]) {
      await expectErrorCode(() => teamService(init)(components), 'INVALID_TEAM_RECORD')
    }
    expect(teamService({ repeatWindow: 0 })(components)).toBeDefined()
  })
})
