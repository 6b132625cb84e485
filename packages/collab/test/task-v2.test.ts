/**
 * The task protocol's version 2 (`/ioa/task/2.0.0`, spec/collab-tasks.md
 * section 14) between separate nodes over TCP on 127.0.0.1: a task that ends
 * within the hold-back is answered with one event; a longer one streams
 * deltas (and heartbeats) that the requester rebuilds into the snapshot `get`
 * returns; 1.0.0 peers are served and used; the `trace` field reaches the
 * handler; a request that is not canonical DAG-CBOR is refused.
 */
import { FrameType, decodeFrame, encodeFramePrefixed } from '@ioa/transport'
import { lpStream } from '@libp2p/utils'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { collect, delay, fromHex, rejectionOf, toHex, until } from '../../../test/util.js'
import { delegate } from '../src/auth/delegation.js'
import { createEnvelope } from '../src/auth/envelope.js'
import { approvalPolicy, createApproval } from '../src/auth/policy.js'
import { TASK_PROTOCOL, TASK_PROTOCOL_V2, createTaskService, taskService } from '../src/tasks/service.js'
import { frameBody, prefixed, resolvable, startTaskPair } from './task-pair.js'
import type { Token } from '../src/auth/delegation.js'
import type { ExecutorEvent } from '../src/tasks/api.js'
import type { TaskEvent, TaskService, TraceContext } from '../src/tasks/service.js'
import type { TaskSnapshot } from '../src/tasks/model.js'
import type { HostedAgent, Interconnect } from '@ioa/interconnect'
import type { TransportNode } from '@ioa/transport'

const LEASE = 200
const TRACE: TraceContext = { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', tracestate: 'ioa=t1' }

function statuses (events: TaskEvent[]): string[] {
  return events.filter(e => e.type === 'status').map(e => (e as { task: TaskSnapshot }).task.state)
}

function final (events: TaskEvent[]): TaskSnapshot {
  const s = events.filter((e): e is Extract<TaskEvent, { task: TaskSnapshot }> => e.type === 'status' || e.type === 'artifact')
  return s[s.length - 1].task
}

/** What a task's outcome shows, without its id and times */
function outcome (t: TaskSnapshot): unknown {
  return { state: t.state, skill: t.skill, messages: t.messages, artifacts: t.artifacts, result: t.result }
}

async function serveSkills (ts: TaskService, agent: HostedAgent, traces: Array<TraceContext | undefined>): Promise<void> {
  await ts.serve(agent.did, 'test.fast', (input, ctx) => {
    traces.push(ctx.trace)
    return input
  })
  await ts.serve(agent.did, 'test.slow', async (input: any, ctx) => {
    ctx.progress({ step: 1 })
    await delay(120)
    ctx.artifact({ part: 'a' })
    ctx.progress({ step: 2 })
    await delay(input?.wait ?? 200)
    return { done: input?.n ?? null }
  })
}

describe('task protocol 2.0.0 over TCP', () => {
  const closers: Array<() => Promise<unknown>> = []
  let executor: TransportNode
  let requester: TransportNode
  let icE: Interconnect
  let icR: Interconnect
  let worker: HostedAgent
  let caller: HostedAgent
  let token: Token
  let tsE: TaskService
  let tsR: TaskService
  /** a requester forced to 1.0.0 (its executor peer announces only that) */
  let tsV1: TaskService
  const traces: Array<TraceContext | undefined> = []
  const executed: ExecutorEvent[] = []
  let runs = 0

  beforeAll(async () => {
    ;({ executor, requester, icE, icR } = await startTaskPair(closers))
    worker = await icE.host({ key: 'worker', name: 'Worker', skills: [{ id: 'test.fast' }, { id: 'test.slow' }] })
    caller = await icR.host({ key: 'caller', name: 'Caller', skills: [{ id: 'test.none' }] })
    token = await delegate(caller.identity, { audience: caller.did, capabilities: [{ skill: 'test.*' }], expiresAt: Date.now() + 3_600_000 })
    tsE = createTaskService(icE, { leaseInterval: LEASE, holdBack: 50, onEvent: e => { executed.push(e) } })
    tsR = createTaskService(icR, { leaseInterval: LEASE })
    tsV1 = taskService({ leaseInterval: LEASE })({
      peerId: requester.peerId,
      logger: requester.logger,
      messaging: requester.services.messaging,
      interconnect: icR,
      protocolsOf: async () => [TASK_PROTOCOL]
    })
    closers.push(async () => tsE.stop(), async () => tsR.stop(), async () => tsV1.stop())
    await serveSkills(tsE, worker, traces)
    await tsE.serve(worker.did, 'test.approve', () => 'approved', { policy: approvalPolicy(() => true, 'always asks') })
    await tsE.serve(worker.did, 'test.budget', (_input, ctx) => {
      ctx.spend(5)
      return 'spent'
    })
    await tsE.serve(worker.did, 'test.once', () => ++runs)
    await resolvable(icR, worker.did)
  })

  afterAll(async () => {
    for (const close of closers.reverse()) await close().catch(() => {})
  })

  /** A signed submit request for `skill` */
  async function request (skill: string, input: unknown, extra: Record<string, unknown> = {}): Promise<Record<string, unknown>> {
    const body = { input }
    const envelope = await createEnvelope(caller.identity, { to: worker.did, skill, task: globalThis.crypto.randomUUID(), body, proofs: [token] })
    return { envelope, body, ...extra }
  }

  it('answers a task that ends within the hold-back with one event, and streams a longer one as deltas; both rebuild what get returns', async () => {
    const fast = await collect(tsR.submit(caller.identity, worker.did, { skill: 'test.fast', input: { n: 1 }, proofs: [token] }))
    expect(fast.map(e => e.type)).toEqual(['status'])
    expect(statuses(fast)).toEqual(['completed'])
    expect(final(fast).result).toEqual({ n: 1 })
    expect(await tsR.get(worker.did, final(fast).id)).toEqual(final(fast))

    const slow = await collect(tsR.submit(caller.identity, worker.did, { skill: 'test.slow', input: { n: 2 }, proofs: [token] }))
    const done = final(slow)
    expect(outcome(done)).toEqual({ state: 'completed', skill: 'test.slow', messages: [{ step: 1 }, { step: 2 }], artifacts: [{ part: 'a' }], result: { done: 2 } })
    expect(slow.filter(e => e.type === 'artifact')).toHaveLength(1)
    expect(statuses(slow)[0]).toBe('working')
    expect(statuses(slow).at(-1)).toBe('completed')
    expect(await tsR.get(worker.did, done.id)).toEqual(done)

    // on the wire: the first event is the full snapshot, the later ones deltas (and heartbeats)
    const messaging = requester.services.messaging
    const raw = await collect(messaging.stream<Record<string, any>>(executor.peerId, TASK_PROTOCOL_V2, 'submit', await request('test.slow', { n: 3 }), { timeout: 10_000 }))
    expect(raw[0]).toMatchObject({ type: 'status', task: { state: 'working' } })
    const later = raw.slice(1).filter(e => e.type !== 'heartbeat')
    expect(later.length).toBeGreaterThanOrEqual(3)
    expect(later.every(e => e.type === 'delta' && e.task === undefined)).toBe(true)
    expect(later.at(-1)).toMatchObject({ type: 'delta', state: 'completed', result: { done: 3 } })
    // a fast task: one ITEM
    const one = await collect(messaging.stream<Record<string, any>>(executor.peerId, TASK_PROTOCOL_V2, 'submit', await request('test.fast', { n: 4 }), { timeout: 10_000 }))
    expect(one).toHaveLength(1)
    expect(one[0]).toMatchObject({ type: 'status', task: { state: 'completed', result: { n: 4 } } })
  })

  it('inside the hold-back: an approval is asked at once, a budget fails the task, an idempotent repeat follows the first task', async () => {
    // auth-required is sent without waiting: the requester must act
    const stream = tsR.submit(caller.identity, worker.did, { skill: 'test.approve', input: null, proofs: [token] })
    const first = (await stream.next()).value as Extract<TaskEvent, { type: 'status' }>
    expect(first).toMatchObject({ type: 'status', task: { state: 'auth-required', auth: { root: caller.did, reason: 'always asks' } } })
    await tsR.approve(worker.did, first.task.id, await createApproval(caller.identity, { task: first.task.id, action: first.task.auth?.action ?? '' }))
    const rest = await collect(stream)
    expect(statuses(rest)).toEqual(['working', 'completed'])
    expect(final(rest)).toMatchObject({ state: 'completed', result: 'approved' })
    expect(final(rest).auth).toBeUndefined()
    expect(await tsR.get(worker.did, first.task.id)).toEqual(final(rest))

    // over budget: one event, the failed task
    const over = await collect(tsR.submit(caller.identity, worker.did, { skill: 'test.budget', input: null, proofs: [token], budget: 3 }))
    expect(over.map(e => e.type)).toEqual(['status'])
    expect(final(over)).toMatchObject({ state: 'failed', error: { code: 'BUDGET_EXCEEDED' } })

    // the same key twice: the handler runs once, both follow that task
    const before = runs
    const a = await tsR.submitAndWait(caller.identity, worker.did, { skill: 'test.once', input: null, proofs: [token], idempotencyKey: 'v2-once', taskId: 'v2-once-a' })
    const b = await tsR.submitAndWait(caller.identity, worker.did, { skill: 'test.once', input: null, proofs: [token], idempotencyKey: 'v2-once', taskId: 'v2-once-b' })
    expect(runs).toBe(before + 1)
    expect(b).toEqual(a)
    expect(a.id).toBe('v2-once-a')
  })

  it('streams a long task\'s progress and heartbeats on 2.0.0', async () => {
    const events = await collect(tsR.submit(caller.identity, worker.did, { skill: 'test.slow', input: { n: 5, wait: 5 * LEASE }, proofs: [token] }))
    expect(events.filter(e => e.type === 'heartbeat').length).toBeGreaterThanOrEqual(2)
    expect(events.filter(e => e.type === 'status').map(e => (e as { task: TaskSnapshot }).task.messages.length)).toContain(2)
    expect(final(events)).toMatchObject({ state: 'completed', result: { done: 5 } })
  })

  it('serves a requester that speaks only 1.0.0: every state, the same outcome and the same get answer', async () => {
    const fast = await collect(tsV1.submit(caller.identity, worker.did, { skill: 'test.fast', input: { n: 6 }, proofs: [token] }))
    expect(statuses(fast)).toEqual(['submitted', 'working', 'completed'])
    expect(await tsV1.get(worker.did, final(fast).id)).toEqual(final(fast))
    const v1 = final(await collect(tsV1.submit(caller.identity, worker.did, { skill: 'test.slow', input: { n: 7 }, proofs: [token] })))
    const v2 = final(await collect(tsR.submit(caller.identity, worker.did, { skill: 'test.slow', input: { n: 7 }, proofs: [token] })))
    expect(outcome(v1)).toEqual(outcome(v2))
    expect(await tsR.get(worker.did, v2.id)).toEqual(v2)
    expect(await tsV1.get(worker.did, v1.id)).toEqual(v1)
  })

  it('passes the trace to the handler and the executor\'s events; refuses a field out of shape (INVALID_TRACE), ignores an invalid traceparent, refuses any trace on 1.0.0', async () => {
    const done = await tsR.submitAndWait(caller.identity, worker.did, { skill: 'test.fast', input: { n: 8 }, proofs: [token] }, { trace: TRACE })
    expect(traces.at(-1)).toEqual(TRACE)
    expect(executed.filter(e => e.type !== 'task-refused' && e.taskId === done.id).map(e => [e.type, (e as { trace?: unknown }).trace])).toEqual([
      ['task-started', TRACE], ['task-completed', TRACE]
    ])
    await tsR.submitAndWait(caller.identity, worker.did, { skill: 'test.fast', input: { n: 9 }, proofs: [token] })
    expect(traces.at(-1)).toBeUndefined()

    const local = await rejectionOf(tsR.submitAndWait(caller.identity, worker.did, { skill: 'test.fast', input: null, proofs: [token] }, { trace: { traceparent: 'nope' } }))
    expect(local).toMatchObject({ name: 'InvalidTraceError', code: 'INVALID_TRACE' })
    const messaging = requester.services.messaging
    // a field out of shape or bounds is refused
    for (const trace of [
      { traceparent: TRACE.traceparent, tracestate: 'x'.repeat(513) },
      { traceparent: TRACE.traceparent, extra: 1 },
      { traceparent: 'x'.repeat(257) },
      'not a map'
    ]) {
      const err = await rejectionOf(collect(messaging.stream(executor.peerId, TASK_PROTOCOL_V2, 'submit', await request('test.fast', 1, { trace }), { timeout: 10_000 })))
      expect(err).toMatchObject({ code: 'INVALID_TRACE' })
    }
    // a traceparent that is not a W3C one is ignored (W3C trace context): the task runs without a trace
    const seen = traces.length
    const ran = await collect(messaging.stream<Record<string, any>>(executor.peerId, TASK_PROTOCOL_V2, 'submit', await request('test.fast', 2, { trace: { traceparent: '00-00000000000000000000000000000000-00f067aa0ba902b7-01' } }), { timeout: 10_000 }))
    expect(ran.at(-1)).toMatchObject({ type: 'status', task: { state: 'completed', result: 2 } })
    expect(traces.length).toBe(seen + 1)
    expect(traces.at(-1)).toBeUndefined()
    const v1 = await rejectionOf(collect(messaging.stream(executor.peerId, TASK_PROTOCOL, 'submit', await request('test.fast', 1, { trace: TRACE }), { timeout: 10_000 })))
    expect(v1).toMatchObject({ code: 'INVALID_ENVELOPE' })
  })

  it('refuses a request that is not canonical DAG-CBOR (an integral float) with NON_CANONICAL on 2.0.0; 1.0.0 cannot tell', async () => {
    /** The STREAM_REQUEST of a submit whose input's `amount` 240 is written as the float 240.0 */
    const frame = async (): Promise<Uint8Array> => {
      const bytes = encodeFramePrefixed({ type: FrameType.STREAM_REQUEST, id: 1, method: 'submit', payload: await request('test.fast', { amount: 240 }), timeout: 10_000, credit: 16 })
      const body = toHex(frameBody(bytes))
      const int = '66616d6f756e7418f0' // "amount" 240
      expect(body.split(int)).toHaveLength(2)
      const edited = fromHex(body.replace(int, '66616d6f756e74fb406e000000000000'))
      return prefixed(edited)
    }
    const answer = async (protocol: string): Promise<unknown> => {
      const stream = await requester.dialProtocol(executor.peerId, protocol)
      const lp = lpStream(stream)
      stream.send(await frame())
      const got = decodeFrame(await lp.read({ signal: AbortSignal.timeout(10_000) }))
      await stream.close().catch(() => {})
      return got
    }
    expect(await answer(TASK_PROTOCOL_V2)).toMatchObject({ type: FrameType.ERROR, id: 1, code: 'NON_CANONICAL' })
    // version 1 decodes 240.0 as 240 and re-encodes it canonically: the task runs
    expect(await answer(TASK_PROTOCOL)).toMatchObject({ type: FrameType.ITEM, id: 1, payload: { type: 'status' } })
    await until(() => executed.some(e => e.type === 'task-refused' && e.code === 'NON_CANONICAL') || undefined, { timeout: 10_000, what: 'the refusal reported' })
  })
})

describe('a 2.0.0 requester and an executor of 1.0.0 only (TCP)', () => {
  const closers: Array<() => Promise<unknown>> = []

  afterAll(async () => {
    for (const close of closers.reverse()) await close().catch(() => {})
  })

  it('falls back to 1.0.0 and gets every state and the same outcome', async () => {
    const { executor, icE, icR } = await startTaskPair(closers)
    const worker = await icE.host({ key: 'old-worker', name: 'Old worker', skills: [{ id: 'test.fast' }, { id: 'test.slow' }] })
    const caller = await icR.host({ key: 'new-caller', name: 'New caller', skills: [{ id: 'test.none' }] })
    const token = await delegate(caller.identity, { audience: caller.did, capabilities: [{ skill: 'test.*' }], expiresAt: Date.now() + 3_600_000 })
    const tsE = createTaskService(icE, { leaseInterval: LEASE })
    const tsR = createTaskService(icR, { leaseInterval: LEASE })
    closers.push(async () => tsE.stop(), async () => tsR.stop())
    await serveSkills(tsE, worker, [])
    // this executor speaks 1.0.0 only
    await executor.services.messaging.unhandle(TASK_PROTOCOL_V2)
    await resolvable(icR, worker.did)
    const fast = await collect(tsR.submit(caller.identity, worker.did, { skill: 'test.fast', input: { n: 1 }, proofs: [token] }, { trace: TRACE }))
    expect(statuses(fast)).toEqual(['submitted', 'working', 'completed'])
    expect(await tsR.get(worker.did, final(fast).id)).toEqual(final(fast))
    const slow = final(await collect(tsR.submit(caller.identity, worker.did, { skill: 'test.slow', input: { n: 2 }, proofs: [token] })))
    expect(outcome(slow)).toEqual({ state: 'completed', skill: 'test.slow', messages: [{ step: 1 }, { step: 2 }], artifacts: [{ part: 'a' }], result: { done: 2 } })
    expect(await tsR.get(worker.did, slow.id)).toEqual(slow)
  })
})
