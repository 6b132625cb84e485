/**
 * The task protocol between separate nodes over TCP on 127.0.0.1: delegated
 * tasks, every authorization failure, policy and approval, cancel, deadlines,
 * idempotency, resubscribe, lease lapse when the executor dies, and bad input.
 * Also the task state machine and store.
 */
import { createInterconnect, createIdentity } from '@ioa/interconnect'
import { createTransportNode } from '@ioa/transport'
import { MemoryDatastore } from 'datastore-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { dhtRoutingTableSize } from '../../../test/harness/index.js'
import { collect, delay, rejectionOf, until } from '../../../test/util.js'
import { delegate, tokenCid } from '../src/auth/delegation.js'
import { createEnvelope } from '../src/auth/envelope.js'
import { fromRemote } from '../src/errors.js'
import { approvalPolicy, constraintPolicy, createApproval } from '../src/auth/policy.js'
import { TASK_PROTOCOL, createTaskService } from '../src/tasks/service.js'
import { InvalidTransitionError, TERMINAL_STATES, TRANSITIONS, TaskStore, canTransition, transition } from '../src/tasks/model.js'
import { offlineInterconnect } from './task-pair.js'
import type { Token } from '../src/auth/delegation.js'
import type { TaskEvent, TaskService } from '../src/tasks/service.js'
import type { TaskRecord, TaskSnapshot, TaskState } from '../src/tasks/model.js'
import type { HostedAgent, Identity, Interconnect } from '@ioa/interconnect'
import type { TransportNode } from '@ioa/transport'

const LEASE = 200

/** How `until` polls in these tests */
const POLL = { interval: 100 }

function lastStatus (events: TaskEvent[]): TaskSnapshot {
  const s = events.filter((e): e is Extract<TaskEvent, { task: TaskSnapshot }> => e.type === 'status' || e.type === 'artifact')
  return s[s.length - 1].task
}

function states (events: TaskEvent[]): TaskState[] {
  return events.filter(e => e.type === 'status').map(e => (e as { task: TaskSnapshot }).task.state)
}

async function tcpNode (): Promise<TransportNode> {
  return createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'] })
}

describe('task protocol over TCP', () => {
  const nodes: TransportNode[] = []
  const ics: Interconnect[] = []
  const services: TaskService[] = []
  let driver: Identity
  let car: HostedAgent
  let payment: HostedAgent
  let hotel: HostedAgent
  let carToken: Token
  let hotelToken: Token
  let tsA: TaskService
  let tsB: TaskService
  let tsC: TaskService
  const revoked = new Set<string>()
  const counted = { n: 0 }
  const slowSignals: AbortSignal[] = []

  beforeAll(async () => {
    for (let i = 0; i < 3; i++) nodes.push(await tcpNode())
    await nodes[0].dial(nodes[1].getMultiaddrs())
    await nodes[0].dial(nodes[2].getMultiaddrs())
    await nodes[1].dial(nodes[2].getMultiaddrs())
    await until(() => nodes.every(n => dhtRoutingTableSize(n) >= 2) ? true : undefined, { ...POLL, timeout: 20_000, what: 'routing tables' })
    for (const n of nodes) ics.push(await createInterconnect(n, { requestTimeout: 3_000 }))

    car = await ics[0].host({ key: 'car', name: 'Car', skills: [{ id: 'vehicle.car.assistant' }] })
    payment = await ics[1].host({ key: 'payment', name: 'Payment', skills: [{ id: 'payment.pay' }, { id: 'test.slow' }, { id: 'test.count' }] })
    hotel = await ics[2].host({ key: 'hotel', name: 'Hotel', skills: [{ id: 'travel.hotel.booking' }] })

    driver = await createIdentity()
    const exp = Date.now() + 3_600_000
    carToken = await delegate(driver, {
      audience: car.did,
      capabilities: [{ skill: 'payment.pay', constraints: { maxAmount: 300, currency: 'EUR' } }, { skill: 'test.*' }],
      expiresAt: exp
    })
    hotelToken = await delegate(car.identity, {
      audience: hotel.did,
      capabilities: [{ skill: 'payment.pay', constraints: { maxAmount: 300, currency: 'EUR' } }],
      expiresAt: exp,
      proofs: [carToken]
    })

    tsA = createTaskService(ics[0], { leaseInterval: LEASE })
    tsB = createTaskService(ics[1], {
      datastore: new MemoryDatastore(),
      leaseInterval: LEASE,
      // every state is streamed (protocol 2.0.0 holds none back): these tests follow each one
      holdBack: 0,
      isRevoked: (cid) => revoked.has(cid),
      policy: constraintPolicy()
    })
    tsC = createTaskService(ics[2], { leaseInterval: LEASE })
    services.push(tsA, tsB, tsC)

    await tsB.serve(payment.did, 'payment.pay', async (input: any, ctx) => {
      ctx.progress({ text: 'charging' })
      ctx.artifact({ receipt: `r-${ctx.task.id}`, amount: input.amount })
      return { paid: input.amount, currency: input.currency, root: ctx.chain.root, caller: ctx.caller }
    }, { policy: approvalPolicy(c => (c.input as { amount: number }).amount > 200, 'payments over 200 need the driver') })
    await tsB.serve(payment.did, 'test.slow', async (input: any, ctx) => {
      slowSignals.push(ctx.signal)
      ctx.progress('started')
      for (const step of input?.steps ?? []) {
        await delay(step, ctx.signal)
        ctx.progress(`after ${step}`)
      }
      await delay(input?.ms ?? 60_000, ctx.signal)
      return 'finished'
    })
    await tsB.serve(payment.did, 'test.count', async (input: any, ctx) => {
      counted.n++
      if (input?.spend != null) ctx.spend(input.spend)
      await delay(100)
      return { n: counted.n, budget: ctx.budget ?? null, deadline: ctx.deadline ?? null }
    })

    // the DHT must know where the payment agent lives
    for (const ic of [ics[0], ics[2]]) {
      await until(async () => ic.resolve(payment.did, { cache: false, timeout: 3_000 }).then(r => r.peers.length > 0 ? r : undefined, () => undefined), { ...POLL, timeout: 30_000, what: 'resolve payment agent' })
    }
  })

  afterAll(async () => {
    for (const s of services) await s.stop().catch(() => {})
    for (const ic of ics) await ic.stop().catch(() => {})
    for (const n of nodes) await Promise.resolve(n.stop()).catch(() => {})
  })

  it('runs a delegated task (driver -> car -> hotel -> payment) and streams its states', async () => {
    const events = await collect(tsC.submit(hotel.did, payment.did, {
      skill: 'payment.pay',
      input: { amount: 120, currency: 'EUR' },
      proofs: [hotelToken, carToken]
    }))
    const final = lastStatus(events)
    expect(final.state).toBe('completed')
    expect(final.result).toEqual({ paid: 120, currency: 'EUR', root: driver.did, caller: hotel.did })
    expect(final.messages).toEqual([{ text: 'charging' }])
    expect(final.artifacts).toEqual([{ receipt: `r-${final.id}`, amount: 120 }])
    expect(final.lease).toBe(LEASE)
    // every state from submitted on, then the progress message, the artifact and the end
    expect(states(events).slice(0, 2)).toEqual(['submitted', 'working'])
    expect(events.map(e => e.type)).toEqual(['status', 'status', 'status', 'artifact', 'status'])
    expect(final.deadline).toBeGreaterThan(Date.now())

    // the submitter can read it back; another peer cannot
    expect(await tsC.get(payment.did, final.id)).toMatchObject({ id: final.id, state: 'completed' })
    const err = await rejectionOf(tsA.get(payment.did, final.id))
    expect(err.name).toBe('UnauthorizedError')

    // the same through submitAndWait, from the car with a one-link chain
    const done = await tsA.submitAndWait(car.did, payment.did, { skill: 'payment.pay', input: { amount: 50, currency: 'EUR' }, proofs: [carToken] })
    expect(done.state).toBe('completed')
    expect(done.result).toMatchObject({ paid: 50, caller: car.did })
  })

  it('refuses a request without a covering capability with UNAUTHORIZED', async () => {
    const testOnly = await delegate(driver, { audience: car.did, capabilities: [{ skill: 'test.*' }], expiresAt: Date.now() + 60_000 })
    let err = await rejectionOf(tsA.submitAndWait(car.did, payment.did, { skill: 'payment.pay', input: { amount: 1, currency: 'EUR' }, proofs: [testOnly] }))
    expect(err.name).toBe('UnauthorizedError')
    expect(err.code).toBe('UNAUTHORIZED')
    err = await rejectionOf(tsA.submitAndWait(car.did, payment.did, { skill: 'payment.pay', input: { amount: 1, currency: 'EUR' }, proofs: [] }))
    expect(err.code).toBe('UNAUTHORIZED')
    // the hotel presents the car's token (granted to the car, not to the hotel)
    err = await rejectionOf(tsC.submitAndWait(hotel.did, payment.did, { skill: 'payment.pay', input: { amount: 1, currency: 'EUR' }, proofs: [carToken] }))
    expect(err.code).toBe('UNAUTHORIZED')
    // a skill the executor does not serve
    err = await rejectionOf(tsA.submitAndWait(car.did, payment.did, { skill: 'test.unknown', input: null, proofs: [carToken] }))
    expect(err.name).toBe('NoProviderError')
  })

  it('refuses an escalating chain with ESCALATION', async () => {
    const wider = await delegate(car.identity, {
      audience: hotel.did,
      capabilities: [{ skill: 'payment.pay', constraints: { maxAmount: 1_000, currency: 'EUR' } }],
      expiresAt: carToken.payload.exp,
      proofs: [carToken]
    }, { verify: false })
    const err = await rejectionOf(tsC.submitAndWait(hotel.did, payment.did, { skill: 'payment.pay', input: { amount: 900, currency: 'EUR' }, proofs: [wider, carToken] }))
    expect(err.name).toBe('EscalationError')
    expect(err.code).toBe('ESCALATION')
  })

  it('refuses a replayed envelope with REPLAY', async () => {
    const body = { input: { amount: 10, currency: 'EUR' } }
    const envelope = await createEnvelope(car.identity, { to: payment.did, skill: 'payment.pay', task: 'replay-1', body, proofs: [carToken] })
    const m = nodes[0].services.messaging
    const first: any[] = []
    for await (const e of m.stream(nodes[1].peerId, TASK_PROTOCOL, 'submit', { envelope, body })) first.push(e)
    expect(first[first.length - 1].task.state).toBe('completed')
    const err = fromRemote(await rejectionOf((async () => {
      for await (const _ of m.stream(nodes[1].peerId, TASK_PROTOCOL, 'submit', { envelope, body })) { /* nothing */ }
    })())) as any
    expect(err.name).toBe('ReplayError')
    expect(err.code).toBe('REPLAY')
  })

  it('refuses an expired token with TOKEN_EXPIRED and a revoked one with REVOKED', async () => {
    const expired = await delegate(driver, { audience: car.did, capabilities: [{ skill: 'test.*' }], expiresAt: Date.now() - 120_000 })
    let err = await rejectionOf(tsA.submitAndWait(car.did, payment.did, { skill: 'test.count', input: null, proofs: [expired] }))
    expect(err.name).toBe('TokenExpiredError')

    const soon = await delegate(driver, { audience: car.did, capabilities: [{ skill: 'test.*' }], expiresAt: Date.now() + 60_000 })
    expect((await tsA.submitAndWait(car.did, payment.did, { skill: 'test.count', input: null, proofs: [soon] })).state).toBe('completed')
    revoked.add((await tokenCid(soon)).toString())
    err = await rejectionOf(tsA.submitAndWait(car.did, payment.did, { skill: 'test.count', input: null, proofs: [soon] }))
    expect(err.name).toBe('RevokedError')
    expect(err.code).toBe('REVOKED')
  })

  it('rejects a payment above the delegated cap: POLICY_DENIED, state rejected', async () => {
    const events = await collect(tsA.submit(car.did, payment.did, { skill: 'payment.pay', input: { amount: 500, currency: 'EUR' }, proofs: [carToken] }))
    const final = lastStatus(events)
    expect(final.state).toBe('rejected')
    expect(final.error?.code).toBe('POLICY_DENIED')
    expect(final.result).toBeUndefined()
    const err = await rejectionOf(tsA.submitAndWait(car.did, payment.did, { skill: 'payment.pay', input: { amount: 100, currency: 'USD' }, proofs: [carToken] }))
    expect(err.name).toBe('PolicyDeniedError')
    expect(err.task.state).toBe('rejected')
  })

  it('waits in auth-required until the root approves; a non-root approval is refused', async () => {
    let approvedAt: TaskSnapshot | undefined
    const events = await collect(tsC.submit(hotel.did, payment.did, {
      skill: 'payment.pay', input: { amount: 250, currency: 'EUR' }, proofs: [hotelToken, carToken]
    }), async (e) => {
      if (e.type !== 'status' || e.task.state !== 'auth-required' || approvedAt != null) return
      const auth = e.task.auth
      expect(auth?.root).toBe(driver.did)
      expect(auth?.reason).toBe('payments over 200 need the driver')
      const id = e.task.id
      // the hotel (not the root) approves: refused, the task keeps waiting
      const bogus = await createApproval(hotel.identity, { task: id, action: auth?.action as string })
      const err = await rejectionOf(tsC.approve(payment.did, id, bogus))
      expect(err.name).toBe('UnauthorizedError')
      // the root approving another action does not count either
      const other = await createApproval(driver, { task: id, action: 'bafyreigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi' })
      expect((await rejectionOf(tsC.approve(payment.did, id, other))).code).toBe('APPROVAL_REQUIRED')
      expect((await tsC.get(payment.did, id)).state).toBe('auth-required')
      // the driver approves; any peer may deliver the approval
      const good = await createApproval(driver, { task: id, action: auth?.action as string })
      approvedAt = await tsA.approve(payment.did, id, good)
    })
    expect(approvedAt?.state).toBe('working')
    expect(states(events)).toEqual(expect.arrayContaining(['auth-required', 'working', 'completed']))
    const final = lastStatus(events)
    expect(final.state).toBe('completed')
    expect(final.result).toMatchObject({ paid: 250 })
    expect(final.auth).toBeUndefined()
  })

  it('cancels a running task: state canceled, the handler signal aborted', async () => {
    let canceled: TaskSnapshot | undefined
    const before = slowSignals.length
    const events = await collect(tsA.submit(car.did, payment.did, { skill: 'test.slow', input: { ms: 30_000 }, proofs: [carToken] }), async (e) => {
      if (e.type === 'status' && e.task.state === 'working' && canceled == null) {
        canceled = await tsA.cancel(payment.did, e.task.id)
      }
    })
    expect(canceled?.state).toBe('canceled')
    expect(lastStatus(events).state).toBe('canceled')
    await until(() => slowSignals.length > before ? true : undefined, { ...POLL, timeout: 5_000, what: 'handler started' })
    expect(slowSignals[before].aborted).toBe(true)
    // cancel again: nothing changes
    expect((await tsA.cancel(payment.did, lastStatus(events).id)).state).toBe('canceled')
  })

  it('fails a task at its deadline with DEADLINE_EXCEEDED and aborts the handler; refuses a past deadline', async () => {
    const before = slowSignals.length
    const started = Date.now()
    const err = await rejectionOf(tsA.submitAndWait(car.did, payment.did, { skill: 'test.slow', input: { ms: 30_000 }, proofs: [carToken], deadline: Date.now() + 700 }))
    expect(err.name).toBe('DeadlineExceededError')
    expect(err.task.state).toBe('failed')
    expect(err.task.error.code).toBe('DEADLINE_EXCEEDED')
    expect(Date.now() - started).toBeLessThan(5_000)
    const signal = slowSignals[before]
    expect(signal.aborted).toBe(true)
    expect((signal.reason as Error).name).toBe('DeadlineExceededError')

    const past = await rejectionOf(tsA.submitAndWait(car.did, payment.did, { skill: 'test.count', input: null, proofs: [carToken], deadline: Date.now() - 1_000 }))
    expect(past.name).toBe('DeadlineExceededError')
  })

  it('passes deadline and budget to the handler; a subtask stays within its parent', async () => {
    const deadline = Date.now() + 30_000
    const ok = await tsA.submitAndWait(car.did, payment.did, { skill: 'test.count', input: { spend: 3 }, proofs: [carToken], budget: 5, deadline })
    expect(ok.result).toMatchObject({ budget: 2, deadline })
    const over = await rejectionOf(tsA.submitAndWait(car.did, payment.did, { skill: 'test.count', input: { spend: 3 }, proofs: [carToken], budget: 2 }))
    expect(over.name).toBe('BudgetExceededError')

    let remaining = 10
    const parent = { deadline: Date.now() + 20_000, get budget () { return remaining }, spend (n: number) { if (n > remaining) throw Object.assign(new Error('over'), { code: 'BUDGET_EXCEEDED' }); remaining -= n } }
    expect((await rejectionOf(tsA.submitAndWait(car.did, payment.did, { skill: 'test.count', input: null, proofs: [carToken], deadline: Date.now() + 60_000 }, { parent }))).name).toBe('DeadlineExceededError')
    expect((await rejectionOf(tsA.submitAndWait(car.did, payment.did, { skill: 'test.count', input: null, proofs: [carToken], budget: 11 }, { parent }))).code).toBe('BUDGET_EXCEEDED')
    const sub = await tsA.submitAndWait(car.did, payment.did, { skill: 'test.count', input: null, proofs: [carToken], budget: 4 }, { parent })
    expect(sub.result).toMatchObject({ budget: 4, deadline: parent.deadline })
    expect(remaining).toBe(6)
  })

  it('runs the handler once per idempotency key', async () => {
    const before = counted.n
    const req = { skill: 'test.count', input: null, proofs: [carToken], idempotencyKey: 'order-42' }
    const a = await tsA.submitAndWait(car.did, payment.did, req)
    const b = await tsA.submitAndWait(car.did, payment.did, req)
    expect(b.id).toBe(a.id)
    expect(b.result).toEqual(a.result)
    // concurrent repeats of a new key
    const req2 = { ...req, idempotencyKey: 'order-43' }
    const [c, d] = await Promise.all([tsA.submitAndWait(car.did, payment.did, req2), tsA.submitAndWait(car.did, payment.did, req2)])
    expect(c.id).toBe(d.id)
    expect(counted.n - before).toBe(2)
    // the same key from another sender is another task
    const hotelReq = { ...req, proofs: [await delegate(driver, { audience: hotel.did, capabilities: [{ skill: 'test.*' }], expiresAt: Date.now() + 60_000 })] }
    const e = await tsC.submitAndWait(hotel.did, payment.did, hotelReq)
    expect(e.id).not.toBe(a.id)
    expect(counted.n - before).toBe(3)
  })

  it('resubscribes to a task after dropping the stream', async () => {
    let id: string | undefined
    for await (const e of tsA.submit(car.did, payment.did, { skill: 'test.slow', input: { steps: [300, 300], ms: 300 }, proofs: [carToken] })) {
      if (e.type === 'status') {
        id = e.task.id
        break // drop the stream; the task goes on
      }
    }
    expect(id).toBeDefined()
    await delay(350)
    const events = await collect(tsA.resubscribe(payment.did, id as string))
    expect(events[0].type).toBe('status')
    expect((events[0] as { task: TaskSnapshot }).task.state).toBe('working')
    const final = lastStatus(events)
    expect(final.state).toBe('completed')
    expect(final.result).toBe('finished')
    expect(final.messages).toEqual(['started', 'after 300', 'after 300'])
    // resubscribing to a finished task gives its final state at once
    const again = await collect(tsA.resubscribe(payment.did, id as string))
    expect(again).toHaveLength(1)
    expect(lastStatus(again).state).toBe('completed')
    const unknown = await rejectionOf(collect(tsA.resubscribe(payment.did, 'no-such-task')))
    expect(unknown.name).toBe('UnknownTaskError')
  })

  it('a slow consumer does not mistake its own delay for a lapsed lease', async () => {
    let held = 0
    const events = await collect(tsA.submit(car.did, payment.did, { skill: 'test.slow', input: { steps: [50, 50], ms: 50 }, proofs: [carToken] }), async () => {
      // hold the first events for longer than 3 lease intervals
      if (held++ < 2) await delay(4 * LEASE)
    })
    expect(events.some(e => e.type === 'lapsed')).toBe(false)
    expect(lastStatus(events).state).toBe('completed')
  })

  it('runs a task for an agent on the same node without the network', async () => {
    await tsA.serve(car.did, 'test.echo', (input) => ({ echo: input }))
    const done = await tsA.submitAndWait(car.did, car.did, { skill: 'test.echo', input: { hi: 1 }, proofs: [carToken] })
    expect(done.result).toEqual({ echo: { hi: 1 } })
    expect((await tsA.get(car.did, done.id)).state).toBe('completed')
  })

  it('answers malformed requests with typed errors and keeps serving', async () => {
    const m = nodes[0].services.messaging
    const target = nodes[1].peerId
    const body = { input: { amount: 10, currency: 'EUR' } }
    const envelope = await createEnvelope(car.identity, { to: payment.did, skill: 'payment.pay', task: 'bad-1', body, proofs: [carToken] })
    const submitCode = async (payload: unknown): Promise<string> => {
      const err = await rejectionOf((async () => {
        for await (const _ of m.stream(target, TASK_PROTOCOL, 'submit', payload)) { /* nothing */ }
      })())
      return err.code
    }
    const sig = new Uint8Array(envelope.sig)
    sig[5] ^= 0xff
    const cases: Array<[unknown, string]> = [
      [null, 'INVALID_ENVELOPE'],
      [42, 'INVALID_ENVELOPE'],
      ['submit', 'INVALID_ENVELOPE'],
      [{}, 'INVALID_ENVELOPE'],
      [{ envelope: null, body }, 'INVALID_ENVELOPE'],
      [{ envelope, body: 'x' }, 'INVALID_ENVELOPE'],
      [{ envelope, body: { input: 1, extra: 2 } }, 'INVALID_ENVELOPE'],
      [{ envelope, body: { input: 'x'.repeat(300_000) } }, 'INVALID_ENVELOPE'],
      [{ envelope, body, more: 1 }, 'INVALID_ENVELOPE'],
      [{ envelope: { ...envelope, payload: { ...envelope.payload, proofs: [{ payload: { v: 1 }, sig: new Uint8Array(64) }] } }, body }, 'INVALID_TOKEN'],
      [{ envelope: { ...envelope, payload: { ...envelope.payload, to: hotel.did } }, body }, 'NO_PROVIDER'],
      [{ envelope: { ...envelope, sig }, body }, 'INVALID_SIGNATURE'],
      [{ envelope, body: { input: { amount: 11, currency: 'EUR' } } }, 'INVALID_ENVELOPE']
    ]
    for (const [payload, code] of cases) {
      expect(await submitCode(payload), JSON.stringify(payload)?.slice(0, 100)).toBe(code)
    }
    for (const method of ['get', 'cancel', 'approve']) {
      for (const payload of [null, 7, { agent: 'x', task: 'y' }, { agent: payment.did, task: '../../etc' }, { agent: payment.did, task: 'nope', extra: 1 }]) {
        expect((await rejectionOf(m.request(target, TASK_PROTOCOL, method, payload))).code).toBe('INVALID_ENVELOPE')
      }
      const ref = method === 'approve' ? { agent: payment.did, task: 'nope', approval: null } : { agent: payment.did, task: 'nope' }
      expect((await rejectionOf(m.request(target, TASK_PROTOCOL, method, ref))).code).toBe('UNKNOWN_TASK')
    }
    // a malformed approval for a task that waits for one
    const waiting = tsA.submit(car.did, payment.did, { skill: 'payment.pay', input: { amount: 280, currency: 'EUR' }, proofs: [carToken] })
    const first = (await waiting.next()).value as { task: TaskSnapshot }
    expect(first.task.state).toBe('submitted')
    const second = (await waiting.next()).value as { task: TaskSnapshot }
    expect(second.task.state).toBe('auth-required')
    for (const approval of [null, 'x', { payload: {}, sig: new Uint8Array(64) }]) {
      expect((await rejectionOf(m.request(target, TASK_PROTOCOL, 'approve', { agent: payment.did, task: first.task.id, approval }))).code).toBe('INVALID_ENVELOPE')
    }
    expect((await tsA.cancel(payment.did, first.task.id)).state).toBe('canceled')
    await waiting.return(undefined)
    // the node still serves
    const done = await tsA.submitAndWait(car.did, payment.did, { skill: 'payment.pay', input: { amount: 10, currency: 'EUR' }, proofs: [carToken] })
    expect(done.state).toBe('completed')
  })

  it('reports a lapsed lease when the executor node stops mid-task', async () => {
    const nodeD = await tcpNode()
    nodes.push(nodeD)
    for (const n of nodes.slice(0, 3)) await nodeD.dial(n.getMultiaddrs())
    const icD = await createInterconnect(nodeD, { requestTimeout: 3_000 })
    ics.push(icD)
    const worker = await icD.host({ key: 'worker', name: 'Worker', skills: [{ id: 'test.hang' }] })
    const tsD = createTaskService(icD, { leaseInterval: LEASE })
    services.push(tsD)
    await tsD.serve(worker.did, 'test.hang', async (_input, ctx) => { await delay(60_000, ctx.signal) })
    await until(async () => ics[0].resolve(worker.did, { cache: false, timeout: 3_000 }).then(r => r, () => undefined), { ...POLL, timeout: 30_000, what: 'resolve worker' })

    let heartbeats = 0
    let stoppedAt = 0
    let lapsedAt = 0
    const events = await collect(tsA.submit(car.did, worker.did, { skill: 'test.hang', input: null, proofs: [carToken] }), (e) => {
      if (e.type === 'heartbeat') heartbeats++
      if (heartbeats >= 2 && stoppedAt === 0) {
        stoppedAt = Date.now()
        void nodeD.stop()
      }
      if (e.type === 'lapsed') lapsedAt = Date.now()
    })
    const last = events[events.length - 1]
    expect(last.type).toBe('lapsed')
    expect(last).toMatchObject({ state: 'working', error: { code: 'LEASE_LAPSED' } })
    expect(heartbeats).toBeGreaterThanOrEqual(2)
    // 3 lease intervals after the last event, plus slack for the retries
    expect(lapsedAt - stoppedAt).toBeLessThan(10 * LEASE + 2_000)
  })
})

describe('task state machine', () => {
  const snap: TaskSnapshot = { id: 't', contextId: 't', skill: 'x', state: 'submitted', messages: [], artifacts: [], createdAt: 1, updatedAt: 1 }

  it('allows exactly the transitions of the table', () => {
    expect(canTransition('submitted', 'working')).toBe(true)
    expect(canTransition('submitted', 'auth-required')).toBe(true)
    expect(canTransition('auth-required', 'working')).toBe(true)
    expect(canTransition('working', 'completed')).toBe(true)
    expect(canTransition('submitted', 'completed')).toBe(false)
    expect(canTransition('working', 'rejected')).toBe(false)
    expect(canTransition('auth-required', 'completed')).toBe(false)
    for (const t of TERMINAL_STATES) expect(TRANSITIONS[t]).toEqual([])
    const working = transition(snap, 'working', {}, 5)
    expect(working).toMatchObject({ state: 'working', updatedAt: 5 })
    const done = transition(working, 'completed', { result: 42 }, 6)
    expect(done.result).toBe(42)
    expect(() => transition(done, 'working')).toThrow(InvalidTransitionError)
    expect(() => transition(snap, 'completed')).toThrow(InvalidTransitionError)
    const auth = transition(snap, 'auth-required', { auth: { root: 'did:key:z', action: 'a', reason: 'r' } })
    expect(auth.auth).toBeDefined()
    expect(transition(auth, 'working').auth).toBeUndefined()
  })

  it('persists snapshots and idempotency keys; a restarted executor fails what was running', async () => {
    const ds = new MemoryDatastore()
    const store = new TaskStore(ds)
    const agent = (await createIdentity()).did
    const owner = (await createIdentity()).did
    const record: TaskRecord = { v: 1, agent, owner, peer: 'p', body: 'b', root: owner, snapshot: { ...snap, id: 'a:b.c', state: 'working' } }
    await store.put(record)
    await store.putIdempotent(agent, owner, 'key-1', 'a:b.c')
    expect(await store.get(agent, 'a:b.c')).toEqual(record)
    expect(await store.getIdempotent(agent, owner, 'key-1')).toBe('a:b.c')
    expect(await store.getIdempotent(agent, agent, 'key-1')).toBeUndefined()
    expect(await store.get(agent, 'missing')).toBeUndefined()

    // a service starting on this datastore marks the task interrupted
    const svc = createTaskService(offlineInterconnect(), { datastore: ds })
    await svc.start()
    const after = await store.get(agent, 'a:b.c')
    expect(after?.snapshot.state).toBe('failed')
    expect(after?.snapshot.error?.code).toBe('INTERRUPTED')
    await svc.stop()
  })
})
