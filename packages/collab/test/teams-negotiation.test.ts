/**
 * Negotiation (`/ioa/negotiate/1.0.0`, spec/teams.md section 6) between
 * separate libp2p nodes over TCP on 127.0.0.1: a call to three candidates
 * (one proposes, one declines, one stays silent) resolves at `due` with the
 * right sets; forged proposals are ignored; an award gives a commitment that
 * verifies; open calls are bounded per calling peer and per node
 * (`TOO_MANY_REQUESTS`); every refusal of the candidate has its code.
 */
import { createInterconnect, createIdentity } from '@ioa/interconnect'
import { createTransportNode } from '@ioa/transport'
import { peerIdFromString } from '@libp2p/peer-id'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { rejectionOf, until } from '../../../test/util.js'
import { cidOf, signRecord, verifyRecord } from '../src/teams/records.js'
import { NEGOTIATION_PROTOCOL, createNegotiation, defaultChooser } from '../src/teams/negotiation/index.js'
import { parseCfp, signCfp } from '../src/teams/negotiation/records.js'
import type { Candidate, Negotiation, ReceivedProposal } from '../src/teams/negotiation/index.js'
import type { HostedAgent, Identity, Interconnect } from '@ioa/interconnect'
import type { TransportNode } from '@ioa/transport'

const POLL = { interval: 50, timeout: 20_000 }

async function tcpNode (): Promise<TransportNode> {
  return createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'] })
}

describe('negotiation over TCP', () => {
  const closers: Array<() => Promise<unknown>> = []
  const nodes: TransportNode[] = []
  const ics: Interconnect[] = []
  /** caller, proposer, decliner, silent, limited, forger */
  const negs: Negotiation[] = []
  let caller: Identity
  let proposer: HostedAgent
  let decliner: HostedAgent
  let silent: HostedAgent
  let limited: HostedAgent
  let forgedAgent: Identity
  let forgerKey: Identity
  let forgeMode: 'other-signer' | 'other-from' | 'other-cfp' = 'other-signer'
  const silentSignals: AbortSignal[] = []
  let commitDecision: 'commit' | 'decline' = 'commit'

  const peerOf = (i: number): string => nodes[i].peerId.toString()
  const cand = (agent: { did: string }, i: number): Candidate => ({ agent: agent.did as Candidate['agent'], peer: peerOf(i) })

  beforeAll(async () => {
    for (let i = 0; i < 6; i++) nodes.push(await tcpNode())
    closers.push(...nodes.map(n => async () => n.stop()))
    for (let i = 1; i < nodes.length; i++) await nodes[0].dial(nodes[i].getMultiaddrs())
    await nodes[1].dial(nodes[4].getMultiaddrs())
    for (const n of nodes) ics.push(await createInterconnect(n, { requestTimeout: 3_000 }))
    closers.push(...ics.map(ic => async () => ic.stop()))
    negs.push(createNegotiation(ics[0]))
    negs.push(createNegotiation(ics[1]))
    negs.push(createNegotiation(ics[2]))
    negs.push(createNegotiation(ics[3]))
    negs.push(createNegotiation(ics[4], { maxOpenCfps: 4, maxOpenCfpsPerPeer: 3 }))
    closers.push(...negs.map(n => async () => n.stop()))
    for (const n of negs) await n.start()

    caller = await createIdentity()
    proposer = await ics[1].host({ key: 'proposer', name: 'Proposer', skills: [{ id: 'travel.hotel.booking' }] })
    decliner = await ics[2].host({ key: 'decliner', name: 'Decliner', skills: [{ id: 'travel.hotel.booking' }] })
    silent = await ics[3].host({ key: 'silent', name: 'Silent', skills: [{ id: 'travel.hotel.booking' }] })
    limited = await ics[4].host({ key: 'limited', name: 'Limited', skills: [{ id: 'travel.hotel.booking' }] })

    await negs[1].bid(proposer.did, 'travel.hotel.booking', ({ cfp }) => ({
      offer: { price: { amount: 120, currency: 'EUR' }, eta: 60_000, terms: { room: 'double', breakfast: true, what: cfp.what.slice(0, 32) } }
    }), {
      commit: () => commitDecision === 'commit' ? { commit: true } : { decline: { code: 'BUSY', reason: 'fully booked now' } }
    })
    // the decliner registers no bidder for the skill: its node declines NOT_CAPABLE
    await negs[3].bid(silent.did, 'travel.hotel.booking', async ({ signal }) => {
      silentSignals.push(signal)
      return await new Promise(() => {})
    })
    await negs[4].bid(limited.did, 'travel.hotel.booking', () => ({ offer: { price: { amount: 99, currency: 'EUR' } } }))

    // a node that answers calls with forged proposals, without the service
    forgedAgent = await createIdentity()
    forgerKey = await createIdentity()
    await nodes[5].services.messaging.handle(NEGOTIATION_PROTOCOL, 'cfp', async (payload) => {
      const cfp = parseCfp((payload as { cfp: unknown }).cfp)
      const cfpCid = forgeMode === 'other-cfp' ? await cidOf({ another: 'call' }) : await cidOf(cfp)
      const from = forgeMode === 'other-from' ? forgerKey.did : forgedAgent.did
      return { proposal: await signRecord('proposal', { v: 1, cfp: cfpCid, from, price: { amount: 1, currency: 'EUR' }, exp: cfp.payload.due + 30_000 }, forgerKey) }
    })
  }, 60_000)

  afterAll(async () => {
    for (const close of closers.reverse()) await close().catch(() => {})
  })

  it('a call to three candidates resolves at due: one proposal, one decline, one silent', async () => {
    // the first call dials the candidates' nodes: room for handshakes on a loaded machine
    const due = Date.now() + 6_000
    const answers: string[] = []
    const round = await negs[0].callForProposals(caller, [cand(proposer, 1), cand(decliner, 2), cand(silent, 3)], {
      skill: 'travel.hotel.booking', what: 'a double room near Lyon for tonight', constraints: { maxAmount: 200, currency: 'EUR' }, due, exp: due + 3_600_000
    }, { onAnswer: (a) => answers.push(a.type) })
    expect(Date.now()).toBeGreaterThanOrEqual(due)
    // the two answers were told as they came, the silent candidate only in the round
    expect(answers.sort()).toEqual(['decline', 'proposal'])
    expect(round.due).toBe(due)
    expect(round.proposals.map(p => p.agent)).toEqual([proposer.did])
    expect(round.declines).toEqual([{ ...cand(decliner, 2), decline: { code: 'NOT_CAPABLE', reason: 'no bidder for travel.hotel.booking' } }])
    expect(round.silent).toEqual([cand(silent, 3)])
    expect(round.failed).toEqual([])

    const p = round.proposals[0]
    expect(p.proposal.payload).toMatchObject({ v: 1, cfp: p.cfpCid, from: proposer.did, price: { amount: 120, currency: 'EUR' }, eta: 60_000 })
    expect(p.cid).toBe(await cidOf(p.proposal))
    expect(await verifyRecord('proposal', p.proposal, proposer.did)).toBe(true)
    expect(p.cfp.payload).toMatchObject({ id: round.id, from: caller.did, to: proposer.did, due })
    // the silent bidder was told to stop at due and holds no slot on its node
    await until(() => silentSignals.length === 1 && silentSignals[0].aborted ? true : undefined, POLL)
    await until(() => negs[3].openCfps().total === 0 ? true : undefined, POLL)
    // the proposer holds the call open until it is awarded or its proposal expires
    expect(negs[1].openCfps()).toEqual({ total: 1, peers: 1 })

    const commitment = await negs[0].award(caller, defaultChooser(round.proposals) as ReceivedProposal)
    expect(commitment.payload.from).toBe(proposer.did)
    expect(await verifyRecord('commit', commitment, proposer.did)).toBe(true)
    expect(negs[1].openCfps().total).toBe(0)
  }, 30_000)

  it('resolves before due once every candidate answered', async () => {
    const due = Date.now() + 20_000
    const round = await negs[0].callForProposals(caller, [cand(proposer, 1), cand(decliner, 2)], { skill: 'travel.hotel.booking', what: 'a room', due, exp: due + 60_000 })
    expect(Date.now()).toBeLessThan(due)
    expect(round.proposals).toHaveLength(1)
    expect(round.declines).toHaveLength(1)
    expect(round.silent).toEqual([])
    // a repeated award gets the same commitment; a declined award is a typed error
    const commitment = await negs[0].award(caller, round.proposals[0])
    expect(await verifyRecord('commit', commitment, proposer.did)).toBe(true)
  }, 30_000)

  it('a declined award is DECLINED with the decline; an award of an unknown proposal is UNKNOWN_PROPOSAL', async () => {
    const due = Date.now() + 10_000
    const round = await negs[0].callForProposals(caller, [cand(proposer, 1)], { skill: 'travel.hotel.booking', what: 'a room', due, exp: due + 60_000 })
    const other = { ...round.proposals[0], cid: await cidOf({ not: 'a proposal' }) }
    const unknown = await rejectionOf(negs[0].award(caller, other))
    expect(unknown).toMatchObject({ name: 'UnknownProposalError', code: 'UNKNOWN_PROPOSAL' })
    commitDecision = 'decline'
    try {
      const declined = await rejectionOf(negs[0].award(caller, round.proposals[0]))
      expect(declined).toMatchObject({ name: 'DeclinedError', code: 'DECLINED', decline: { code: 'BUSY', reason: 'fully booked now' } })
    } finally {
      commitDecision = 'commit'
    }
    // only the caller of the call can award it
    const stranger = await createIdentity()
    expect(await rejectionOf(negs[0].award(stranger, round.proposals[0]))).toMatchObject({ code: 'INVALID_ARGUMENT' })
  }, 30_000)

  it('ignores forged proposals: another signer, another agent, another call', async () => {
    for (const [mode, code] of [['other-signer', 'INVALID_SIGNATURE'], ['other-from', 'INVALID_SIGNATURE'], ['other-cfp', 'INVALID_TEAM_RECORD']] as const) {
      forgeMode = mode
      const due = Date.now() + 10_000
      const round = await negs[0].callForProposals(caller, [{ agent: forgedAgent.did, peer: peerOf(5) }, cand(proposer, 1)], { skill: 'travel.hotel.booking', what: 'a room', due, exp: due + 60_000 })
      expect(round.proposals.map(p => p.agent), mode).toEqual([proposer.did])
      expect(round.failed, mode).toEqual([{ agent: forgedAgent.did, peer: peerOf(5), code, message: expect.any(String) }])
      // the honest candidate's call stays open until it lapses; award it to free the slot
      await negs[0].award(caller, round.proposals[0])
    }
  }, 30_000)

  it('bounds open calls per calling peer and per node: TOO_MANY_REQUESTS', async () => {
    const call = (from: Identity): Promise<unknown> => {
      const due = Date.now() + 10_000
      const n = from === caller ? negs[0] : negs[1]
      return n.callForProposals(from, [cand(limited, 4)], { skill: 'travel.hotel.booking', what: 'a room', due, exp: due + 60_000 })
    }
    const first = await Promise.all([call(caller), call(caller), call(caller)]) as Array<{ proposals: ReceivedProposal[] }>
    expect(first.every(r => r.proposals.length === 1)).toBe(true)
    expect(negs[4].openCfps()).toEqual({ total: 3, peers: 1 })
    // a 4th open call from the same peer is over maxOpenCfpsPerPeer (3)
    const over = await call(caller) as { failed: Array<{ code: string }>, proposals: unknown[] }
    expect(over.proposals).toEqual([])
    expect(over.failed.map(f => f.code)).toEqual(['TOO_MANY_REQUESTS'])
    // another peer gets the node's 4th slot, then the node is full (maxOpenCfps 4)
    const callerB = await createIdentity()
    expect((await call(callerB) as { proposals: unknown[] }).proposals).toHaveLength(1)
    expect(negs[4].openCfps()).toEqual({ total: 4, peers: 2 })
    const full = await call(callerB) as { failed: Array<{ code: string }> }
    expect(full.failed.map(f => f.code)).toEqual(['TOO_MANY_REQUESTS'])
    // an award frees a slot
    await negs[0].award(caller, first[0].proposals[0])
    expect(negs[4].openCfps()).toEqual({ total: 3, peers: 2 })
    expect((await call(callerB) as { proposals: unknown[] }).proposals).toHaveLength(1)
  }, 30_000)

  it('a flood of concurrent calls from one peer holds at most maxOpenCfpsPerPeer (8) slots; the rest is TOO_MANY_REQUESTS', async () => {
    await negs[2].bid(decliner.did, 'travel.hotel.quote', () => ({ offer: { price: { amount: 10, currency: 'EUR' } } }))
    try {
      const due = Date.now() + 15_000
      const rounds = await Promise.all(Array.from({ length: 40 }, async () => negs[0].callForProposals(caller, [cand(decliner, 2)], { skill: 'travel.hotel.quote', what: 'a quote', due, exp: due + 60_000 })))
      expect(rounds.filter(r => r.proposals.length === 1)).toHaveLength(8)
      expect(rounds.flatMap(r => r.failed.map(f => f.code))).toEqual(Array(32).fill('TOO_MANY_REQUESTS'))
      expect(negs[2].openCfps()).toEqual({ total: 8, peers: 1 })
    } finally {
      negs[2].unbid(decliner.did, 'travel.hotel.quote')
    }
  }, 30_000)

  it('refuses bad calls on the wire with their codes', async () => {
    const request = async (payload: unknown): Promise<unknown> => nodes[0].services.messaging.request(peerIdFromString(peerOf(1)), NEGOTIATION_PROTOCOL, 'cfp', payload, { timeout: 5_000 })
    const fields = (due: number): Parameters<typeof signCfp>[2] => ({ id: 'c' + 'a'.repeat(26), skill: 'travel.hotel.booking', what: 'a room', due, exp: due + 60_000 })
    const good = await signCfp(caller, proposer.did, fields(Date.now() + 5_000))
    const held = negs[1].openCfps().total

    expect(await rejectionOf(request({ cfp: good, extra: 1 }))).toMatchObject({ code: 'INVALID_TEAM_RECORD' })
    expect(await rejectionOf(request({ cfp: { ...good, payload: { ...good.payload, what: '' } } }))).toMatchObject({ code: 'INVALID_TEAM_RECORD' })
    const stranger = await createIdentity()
    expect(await rejectionOf(request({ cfp: await signCfp(caller, stranger.did, fields(Date.now() + 5_000)) }))).toMatchObject({ code: 'UNKNOWN_AGENT' })
    expect(await rejectionOf(request({ cfp: await signCfp(caller, proposer.did, fields(Date.now() - 1)) }))).toMatchObject({ code: 'EXPIRED' })
    expect(await rejectionOf(request({ cfp: await signCfp(caller, proposer.did, fields(Date.now() + 200_000)) }))).toMatchObject({ code: 'INVALID_TEAM_RECORD' })
    const forged = { ...good, payload: { ...good.payload, from: stranger.did } }
    expect(await rejectionOf(request({ cfp: forged }))).toMatchObject({ code: 'INVALID_SIGNATURE' })
    // none of them took a slot
    expect(negs[1].openCfps().total).toBe(held)
    // the caller checks its own call before sending
    expect(await rejectionOf(negs[0].callForProposals(caller, [{ agent: proposer.did, peer: 'not-a-peer' }], { skill: 'travel.hotel.booking', what: 'x', exp: Date.now() + 200_000 }))).toMatchObject({ code: 'INVALID_ARGUMENT' })
    expect(await rejectionOf(negs[0].callForProposals(caller, [cand(proposer, 1), cand(proposer, 1)], { skill: 'travel.hotel.booking', what: 'x', exp: Date.now() + 200_000 }))).toMatchObject({ code: 'INVALID_ARGUMENT' })
    expect(await rejectionOf(negs[0].callForProposals(caller, [cand(proposer, 1)], { skill: 'travel.hotel.booking', what: 'x', due: Date.now() + 120_000, exp: Date.now() + 200_000 }))).toMatchObject({ code: 'INVALID_ARGUMENT' })
  }, 30_000)
  it('a repeated call gets the same proposal and holds one slot; bad awards are refused on the wire with their codes', async () => {
    const cfpRequest = async (payload: unknown): Promise<any> => nodes[0].services.messaging.request(peerIdFromString(peerOf(1)), NEGOTIATION_PROTOCOL, 'cfp', payload, { timeout: 5_000 })
    const awardRequest = async (payload: unknown): Promise<any> => nodes[0].services.messaging.request(peerIdFromString(peerOf(1)), NEGOTIATION_PROTOCOL, 'award', payload, { timeout: 5_000 })
    const due = Date.now() + 10_000
    const cfp = await signCfp(caller, proposer.did, { id: 'c' + 'b'.repeat(26), skill: 'travel.hotel.booking', what: 'a room', due, exp: due + 60_000 })
    const held = negs[1].openCfps().total
    const [a, b] = await Promise.all([cfpRequest({ cfp }), cfpRequest({ cfp })])
    expect(a.proposal).toBeDefined()
    expect(b).toEqual(a)
    expect(negs[1].openCfps().total).toBe(held + 1)

    const cfpCid = await cidOf(cfp)
    const proposalCid = await cidOf(a.proposal)
    const awardOf = async (signer: Identity, change: Record<string, unknown> = {}): Promise<unknown> => ({
      award: await signRecord('award', { v: 1, cfp: cfpCid, proposal: proposalCid, from: caller.did, to: proposer.did, ts: Date.now(), ...change }, signer)
    })
    const stranger = await createIdentity()
    // signed by another key than the caller's
    expect(await rejectionOf(awardRequest(await awardOf(stranger)))).toMatchObject({ code: 'INVALID_SIGNATURE' })
    // from another caller than the call's
    expect(await rejectionOf(awardRequest(await awardOf(stranger, { from: stranger.did })))).toMatchObject({ code: 'UNKNOWN_PROPOSAL' })
    // for another call
    expect(await rejectionOf(awardRequest(await awardOf(caller, { cfp: proposalCid })))).toMatchObject({ code: 'UNKNOWN_PROPOSAL' })
    // ts outside the clock skew
    expect(await rejectionOf(awardRequest(await awardOf(caller, { ts: Date.now() - 120_000 })))).toMatchObject({ code: 'EXPIRED' })
    // a malformed request, and an agent not hosted there
    expect(await rejectionOf(awardRequest({ award: { payload: {}, sig: new Uint8Array(64) } }))).toMatchObject({ code: 'INVALID_TEAM_RECORD' })
    expect(await rejectionOf(awardRequest(await awardOf(caller, { to: stranger.did })))).toMatchObject({ code: 'UNKNOWN_AGENT' })
    expect(negs[1].openCfps().total).toBe(held + 1)
    // the right award commits, once: a repeat gets the same commitment
    const award = await awardOf(caller)
    const first = await awardRequest(award)
    expect(await verifyRecord('commit', first.commitment, proposer.did)).toBe(true)
    expect(await awardRequest(award)).toEqual(first)
    expect(negs[1].openCfps().total).toBe(held)
  }, 30_000)
})
