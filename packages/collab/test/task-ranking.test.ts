/**
 * Finished tasks feed the requester's ranking, over TCP on 127.0.0.1 between
 * separate libp2p nodes (issue 9 item 6, spec/interconnect.md 7.1): tasks that
 * complete count for the agent, tasks that time out against it, refusals
 * that are the caller's doing neither way; a fresher card does not outrank
 * the agent whose tasks completed, in the default ranking and in an
 * orchestrator's custom ranker.
 */
import { createIdentity, createInterconnect, historyScore } from '@ioa/interconnect'
import { describe, expect, it } from 'vitest'
import { startNetwork } from '../../../test/harness/index.js'
import { hostAt } from '../../../test/signed-at.js'
import { stopAfterEach } from '../../../test/stop-after-each.js'
import { rejectionOf, until } from '../../../test/util.js'
import { delegate } from '../src/auth/delegation.js'
import { createOrchestrator } from '../src/orchestration/orchestrator.js'
import { createTaskService } from '../src/tasks/service.js'
import { finishedOutcome, unansweredOutcome } from '../src/tasks/feedback.js'
import type { TaskService } from '../src/tasks/service.js'
import type { Interconnect, RankInput } from '@ioa/interconnect'

const extra = stopAfterEach()

const MINUTE = 60_000
const SKILL = 'travel.hotel.booking'

/** A node that never finishes a task (until it is canceled or its deadline passes) */
async function never (_input: unknown, ctx: { signal: AbortSignal }): Promise<never> {
  return await new Promise((_resolve, reject) => { ctx.signal.addEventListener('abort', () => { reject(ctx.signal.reason) }, { once: true }) })
}

/** Resolve once none of the nodes has updated its own peer record for `ms` */
async function quiet (nodes: Array<{ addEventListener: (type: 'self:peer:update', fn: () => void) => void, removeEventListener: (type: 'self:peer:update', fn: () => void) => void }>, ms: number): Promise<void> {
  let last = Date.now()
  const touch = (): void => { last = Date.now() }
  for (const n of nodes) n.addEventListener('self:peer:update', touch)
  try {
    while (Date.now() - last < ms) await new Promise(resolve => setTimeout(resolve, 100))
  } finally {
    for (const n of nodes) n.removeEventListener('self:peer:update', touch)
  }
}

describe('task outcomes feed the ranking over TCP', () => {
  it('after tasks to A complete and tasks to B time out, A ranks above B although B\'s card is fresher', async () => {
    // 0: the requester; 1: host of agent A; 2: host of agent B
    const net = await startNetwork({ size: 3, transport: 'tcp', topology: 'full' })
    extra.push(net)
    await net.waitForRoutingTables(1, { timeout: 20_000 })
    const ics: Interconnect[] = await Promise.all(net.nodes.map(async (n, i) => createInterconnect(n, { domain: 'test.example', requestTimeout: 5_000, ...(i > 0 ? { publish: false } : {}) })))
    extra.push(...ics)
    const services: TaskService[] = ics.map(ic => createTaskService(ic))
    extra.push(...services)
    const [icR, icA, icB] = ics
    const [tsR, tsA, tsB] = services

    // the task protocol first: registering it changes the peer's record, and the hosts re-sign their cards then
    await Promise.all(services.map(async ts => ts.start()))
    // kad-dht's first self-query now starts at once, and its mode switch changes the peer record: let the
    // records settle before the cards are signed at a chosen time (a later update re-signs them, fresh)
    await quiet(net.nodes, 1_500)
    const requester = await icR.host({ key: 'car', name: 'Car', skills: [{ id: 'vehicle.assistant' }] })
    // A's card was re-signed 9 minutes ago; B's is issued 20 s ahead (within the clock skew): fresher
    const a = await hostAt(icA, -9 * MINUTE, { key: 'a', name: 'Hotel Booker', skills: [{ id: SKILL }, { id: 'travel.hotel.private' }] })
    const b = await hostAt(icB, 20_000, { key: 'b', name: 'Hotel Booker', skills: [{ id: SKILL }] })
    expect(b.card.card.issuedAt - a.card.card.issuedAt).toBeGreaterThan(9 * MINUTE)
    await tsA.serve(a.did, SKILL, (input) => ({ booked: input }))
    // a skill whose policy refuses everyone: a refusal that is the caller's doing
    await tsA.serve(a.did, 'travel.hotel.private', () => 'never', { policy: { decide: () => ({ effect: 'deny', reason: 'members only' }) } })
    await tsB.serve(b.did, SKILL, never)
    await Promise.all([icA.announced(), icB.announced()])

    const user = await createIdentity()
    const grant = await delegate(user, { audience: requester.did, capabilities: [{ skill: 'travel.*' }], expiresAt: Date.now() + 10 * MINUTE })
    for (const did of [a.did, b.did]) {
      await until(async () => icR.resolve(did, { cache: false, timeout: 3_000 }).catch(() => undefined), { timeout: 30_000, interval: 200, what: `resolve ${did}` })
    }

    for (let i = 0; i < 3; i++) {
      const done = await tsR.submitAndWait(requester.identity, a.did, { skill: SKILL, input: i, proofs: [grant] })
      expect(done.result).toEqual({ booked: i })
    }
    const timedOut = await Promise.all([0, 1, 2].map(async i => rejectionOf(
      tsR.submitAndWait(requester.identity, b.did, { skill: SKILL, input: i, proofs: [grant], deadline: Date.now() + 1_500 })
    )))
    for (const err of timedOut) expect(err.code).toBe('DEADLINE_EXCEEDED')
    const denied = await rejectionOf(tsR.submitAndWait(requester.identity, a.did, { skill: 'travel.hotel.private', input: null, proofs: [grant] }))
    expect(denied.code).toBe('POLICY_DENIED')

    // completed tasks count for A, timed-out ones against B, the refusal not at all
    expect(icR.historyOf(a.did)).toMatchObject({ successes: 3, failures: 0 })
    expect(icR.historyOf(b.did)).toMatchObject({ successes: 0, failures: 3 })

    const found = await until(async () => {
      const r = await icR.discoverAll({ capability: SKILL }, { cache: false, timeout: 10_000 })
      return r.length >= 2 ? r : undefined
    }, { timeout: 30_000, interval: 200, what: 'both hotel agents' })
    expect(found.map(r => r.card.id)).toEqual([a.did, b.did])
    expect(found[0].score).toBeGreaterThan(found[1].score)
    expect(Date.now() - found[0].card.issuedAt).toBeGreaterThanOrEqual(9 * MINUTE)
    expect(found[1].card.issuedAt).toBeGreaterThan(Date.now())

    // an orchestrator's own ranker sees the same record
    const seen = new Map<string, RankInput['history']>()
    const orchestrator = createOrchestrator({
      ic: icR,
      tasks: tsR,
      agent: requester,
      ranker: {
        score: (c) => {
          seen.set(c.card.id, c.history)
          return historyScore(c)
        }
      }
    })
    extra.push(orchestrator)
    const out = await orchestrator.runToCompletion({
      id: 'book',
      goal: { intent: 'book a room', input: {} },
      steps: [{ id: 'book', capability: SKILL, input: { night: 'tonight' }, dependsOn: [] }],
      output: 'book'
    }, { proofs: [grant] })
    expect(out.result).toEqual({ booked: { night: 'tonight' } })
    expect(seen.get(a.did)).toMatchObject({ successes: 3, failures: 0 })
    expect(seen.get(b.did)).toMatchObject({ failures: 3 })
  }, 120_000)
})

describe('which task outcomes count (spec/interconnect.md 7.1)', () => {
  it('completed counts for the agent, failures and silence against it, refusals and the caller\'s own ends not at all', () => {
    expect(finishedOutcome('completed')).toEqual({ ok: true })
    for (const code of ['HANDLER_ERROR', 'DEADLINE_EXCEEDED', 'INTERRUPTED', 'NO_ROOM', undefined]) expect(finishedOutcome('failed', code)).toEqual({ ok: false })
    expect(finishedOutcome('failed', 'BUDGET_EXCEEDED')).toBeUndefined()
    for (const code of ['POLICY_DENIED', 'APPROVAL_REQUIRED', 'REVOKED']) expect(finishedOutcome('rejected', code)).toBeUndefined()
    for (const code of ['CANCELED', 'ABANDONED']) expect(finishedOutcome('canceled', code)).toBeUndefined()
    for (const code of ['TIMEOUT', 'DIAL_FAILED', 'STREAM_CLOSED', 'PROTOCOL_NOT_SUPPORTED', 'LEASE_LAPSED', 'HANDLER_ERROR']) expect(unansweredOutcome(code)).toEqual({ ok: false })
    for (const code of ['UNAUTHORIZED', 'REVOKED', 'REPLAY', 'INVALID_ENVELOPE', 'TOO_MANY_REQUESTS', 'NOT_EXPORTED', 'RATE_LIMITED', undefined]) expect(unansweredOutcome(code)).toBeUndefined()
  })
})
