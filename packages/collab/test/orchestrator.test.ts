/**
 * The orchestrator between separate nodes over TCP on 127.0.0.1: sequential
 * plans, fan-out (all / first / quorum), failover when a provider's node
 * dies (the side effect runs once), retry with backoff, a fatal failure that
 * cancels its siblings, the run deadline, hierarchical steps, and resuming a
 * run from its journal after the orchestrator crashed (in-process, and in a
 * child process killed with SIGKILL, from LevelDB).
 */
import { spawn } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { createIdentity, createInterconnect } from '@ioa/interconnect'
import { createTransportNode } from '@ioa/transport'
import { MemoryDatastore } from 'datastore-core'
import { LevelDatastore } from 'datastore-level'
import * as dagCbor from '@ipld/dag-cbor'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { LOOPBACK, delay, rejectionOf, until as poll } from '../../../test/util.js'
import { delegate } from '../src/auth/delegation.js'
import { createOrchestrator } from '../src/orchestration/orchestrator.js'
import { declarativePlanner } from '../src/planning/planners/index.js'
import { createTaskService } from '../src/tasks/service.js'
import type { Token } from '../src/auth/delegation.js'
import type { Orchestrator, OrchestratorEvent } from '../src/orchestration/orchestrator.js'
import type { Plan } from '../src/planning/plan.js'
import type { SkillContext, TaskService } from '../src/tasks/service.js'
import type { HostedAgent, Identity, Interconnect } from '@ioa/interconnect'
import type { TransportNode } from '@ioa/transport'
import type { Datastore, Key } from 'interface-datastore'

const LEASE = 200
const COLLAB = fileURLToPath(new URL('..', import.meta.url))

/** Poll every 100 ms, for up to 30 s unless told otherwise */
async function until<T> (fn: () => Promise<T | undefined> | T | undefined, timeout = 30_000, what = 'condition'): Promise<T> {
  return poll(fn, { timeout, interval: 100, what })
}



function routingTableSize (node: TransportNode): number {
  const dht = node.services.dht as unknown as { routingTable?: { size?: number } }
  return dht.routingTable?.size ?? node.getPeers().length
}

interface Peer {
  node: TransportNode
  ic: Interconnect
  ts: TaskService
  datastore: Datastore
}

async function startPeer (bootstrap: TransportNode[], datastore: Datastore = new MemoryDatastore()): Promise<Peer> {
  const node = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'], datastore, allow: LOOPBACK })
  for (const b of bootstrap) await node.dial(b.getMultiaddrs())
  if (bootstrap.length > 0) await until(() => routingTableSize(node) >= 1 ? true : undefined, 20_000, 'routing table')
  const ic = await createInterconnect(node, { requestTimeout: 3_000, datastore })
  // an orchestrator that crashed re-attaches to its running tasks after its restart, which takes longer than the 3 leases after which an executor cancels a task nobody follows
  const ts = createTaskService(ic, { leaseInterval: LEASE, datastore, abandonAfter: 60_000 })
  return { node, ic, ts, datastore }
}

async function stopPeer (p: Peer): Promise<void> {
  await p.ts.stop().catch(() => {})
  await p.ic.stop().catch(() => {})
  await Promise.resolve(p.node.stop()).catch(() => {})
}

/** As a crash would: the node goes first (nothing more is sent), then the handlers die */
async function killPeer (p: Peer): Promise<void> {
  await Promise.resolve(p.node.stop()).catch(() => {})
  await p.ts.stop().catch(() => {})
  await p.ic.stop().catch(() => {})
}

async function discovered (ic: Interconnect, capability: string, n: number): Promise<void> {
  await until(async () => {
    const found = await ic.discoverAll({ capability }, { cache: false, timeout: 3_000 }).catch(() => [])
    return found.length >= n ? true : undefined
  }, 30_000, `discover ${n} providers of ${capability}`)
}

async function collect (gen: AsyncIterable<OrchestratorEvent>, onEvent?: (e: OrchestratorEvent) => Promise<void> | void): Promise<OrchestratorEvent[]> {
  const out: OrchestratorEvent[] = []
  for await (const e of gen) {
    out.push(e)
    await onEvent?.(e)
  }
  return out
}

function ofType<T extends OrchestratorEvent['type']> (events: OrchestratorEvent[], type: T): Array<Extract<OrchestratorEvent, { type: T }>> {
  return events.filter((e): e is Extract<OrchestratorEvent, { type: T }> => e.type === type)
}

function plan (id: string, steps: Plan['steps'], output?: string, input: Record<string, unknown> = {}): Plan {
  return { id, goal: { intent: id, input }, steps, ...(output != null ? { output } : {}) }
}

describe('orchestrator over TCP', () => {
  const peers: Peer[] = []
  let o: Peer
  let a: Peer
  let b: Peer
  let c: Peer
  let user: Identity
  let orch: HostedAgent
  let userToken: Token
  let orchestrator: Orchestrator
  const seen: Array<{ skill: string, root: string, depth: number, caller: string }> = []
  const slowSignals: AbortSignal[] = []
  const flaky = new Map<string, number>()
  const counters = { one: 0, two: 0 }
  let workerA: HostedAgent
  let workerB: HostedAgent
  let workerC: HostedAgent
  let planner: HostedAgent

  const record = (skill: string, ctx: SkillContext): void => {
    seen.push({ skill, root: ctx.chain.root, depth: ctx.chain.path.length, caller: ctx.caller })
  }

  beforeAll(async () => {
    o = await startPeer([])
    a = await startPeer([o.node])
    b = await startPeer([o.node, a.node])
    c = await startPeer([o.node, a.node, b.node])
    peers.push(o, a, b, c)
    await until(() => peers.every(p => routingTableSize(p.node) >= 3) ? true : undefined, 20_000, 'routing tables')

    user = await createIdentity()
    orch = await o.ic.host({ key: 'orch', name: 'Orchestrator', skills: [{ id: 'test.orchestrate' }] })
    workerA = await a.ic.host({ key: 'wa', name: 'Worker A', skills: [{ id: 'test.add' }, { id: 'test.vote' }, { id: 'test.flaky' }, { id: 'test.count' }, { id: 'test.plan.add' }, { id: 'test.budget' }] })
    workerB = await b.ic.host({ key: 'wb', name: 'Worker B', skills: [{ id: 'test.vote' }, { id: 'test.slow' }, { id: 'test.fail' }, { id: 'test.slowcount' }] })
    workerC = await c.ic.host({ key: 'wc', name: 'Worker C', skills: [{ id: 'test.vote' }] })
    planner = await c.ic.host({ key: 'planner', name: 'Planner', skills: [{ id: 'test.plan' }, { id: 'test.shallow' }] })
    userToken = await delegate(user, { audience: orch.did, capabilities: [{ skill: 'test.*' }], expiresAt: Date.now() + 3_600_000 })

    await a.ts.serve(workerA.did, 'test.add', (input: any, ctx) => {
      record('test.add', ctx)
      return { sum: input.a + input.b }
    })
    await a.ts.serve(workerA.did, 'test.plan.add', (input: any, ctx) => {
      record('test.plan.add', ctx)
      return { sum: input.a + input.b }
    })
    const vote = (name: string) => async (input: any, ctx: SkillContext) => {
      const ms = input?.delays?.[name] ?? 0
      if (ms > 0) {
        try {
          await delay(ms, ctx.signal)
        } catch (err) {
          slowSignals.push(ctx.signal)
          throw err
        }
      }
      return input?.answers?.[name] ?? name
    }
    await a.ts.serve(workerA.did, 'test.vote', vote('a'))
    await b.ts.serve(workerB.did, 'test.vote', vote('b'))
    await c.ts.serve(workerC.did, 'test.vote', vote('c'))
    await a.ts.serve(workerA.did, 'test.budget', (_input, ctx) => ({ budget: ctx.budget ?? null, deadline: ctx.deadline ?? null }))
    await a.ts.serve(workerA.did, 'test.flaky', (input: any) => {
      const n = (flaky.get(input.key) ?? 0) + 1
      flaky.set(input.key, n)
      if (n <= input.failures) throw Object.assign(new Error(`transient failure ${n}`), { code: 'TRANSIENT' })
      return { calls: n }
    })
    await a.ts.serve(workerA.did, 'test.count', async () => {
      await delay(50)
      return { one: ++counters.one }
    })
    await b.ts.serve(workerB.did, 'test.slowcount', async (_input, ctx) => {
      await delay(1_500, ctx.signal)
      return { two: ++counters.two }
    })
    await b.ts.serve(workerB.did, 'test.slow', async (input: any, ctx) => {
      try {
        await delay(input?.ms ?? 30_000, ctx.signal)
      } catch (err) {
        slowSignals.push(ctx.signal)
        throw err
      }
      return 'finished'
    })
    // refused by policy, after a moment (so that its siblings have started)
    await b.ts.serve(workerB.did, 'test.fail', () => 'never', {
      policy: { decide: async () => { await delay(300); return { effect: 'deny', reason: 'test.fail always fails' } } }
    })

    // a sub-orchestrator: plans 'add twice' into two test.plan.add steps
    const subPlanner = declarativePlanner({
      templates: {
        'add twice': [
          { id: 'a1', capability: 'test.plan.add', input: { a: { $input: 'x' }, b: 1 } },
          { id: 'a2', capability: 'test.plan.add', input: { a: { $ref: 'a1.sum' }, b: 1 }, dependsOn: ['a1'] }
        ]
      }
    })
    const sub = createOrchestrator({ ic: c.ic, tasks: c.ts, agent: planner, planner: subPlanner, backoff: { initial: 50, max: 200 } })
    await sub.serveGoals('test.plan')
    const shallow = createOrchestrator({ ic: c.ic, tasks: c.ts, agent: planner, planner: subPlanner, maxDepth: 0 })
    await shallow.serveGoals('test.shallow')

    orchestrator = createOrchestrator({ ic: o.ic, tasks: o.ts, agent: orch, backoff: { initial: 100, max: 1_000 }, confirmTimeout: 1_500 })

    for (const [cap, n] of [['test.add', 1], ['test.vote', 3], ['test.flaky', 1], ['test.slow', 1], ['test.fail', 1], ['test.plan', 1], ['test.plan.add', 1], ['test.count', 1], ['test.slowcount', 1], ['test.shallow', 1], ['test.budget', 1]] as const) {
      await discovered(o.ic, cap, n)
    }
    await discovered(c.ic, 'test.plan.add', 1)
  })

  afterAll(async () => {
    await orchestrator?.stop()
    for (const p of peers) await stopPeer(p)
  })

  it('runs a sequential plan: results flow through $ref, each provider gets an attenuated chain rooted at the user', async () => {
    seen.length = 0
    const p = plan('seq', [
      { id: 's1', capability: 'test.add', input: { a: { $input: 'x' }, b: 1 }, dependsOn: [] },
      { id: 's2', capability: 'test.add', input: { a: { $ref: 's1.sum' }, b: 10 }, dependsOn: ['s1'] },
      { id: 's3', capability: 'test.add', input: { a: { $ref: 's2.sum' }, b: 100 }, dependsOn: ['s2'] }
    ], 's3', { x: 1 })
    const events = await collect(orchestrator.run(p, { proofs: [userToken] }))
    const types = events.map(e => e.type)
    expect(types[0]).toBe('plan')
    expect(types[types.length - 1]).toBe('completed')
    const done = events[events.length - 1] as Extract<OrchestratorEvent, { type: 'completed' }>
    expect(done.result).toEqual({ sum: 112 })
    expect(done.steps.s1).toMatchObject({ state: 'completed', result: { sum: 2 }, providers: [workerA.did] })
    // sequential: s2 starts after s1 completed
    const idx = (t: string, id: string): number => events.findIndex(e => e.type === t && (e as any).stepId === id)
    expect(idx('step-started', 's2')).toBeGreaterThan(idx('step-completed', 's1'))
    expect(idx('step-started', 's3')).toBeGreaterThan(idx('step-completed', 's2'))
    for (const d of ofType(events, 'delegated')) {
      expect(d.capabilities).toEqual([{ skill: 'test.add' }])
      expect(d.provider).toBe(workerA.did)
    }
    // (task protocol 2.0.0: a step that ends within the executor's hold-back reports its final state alone)
    expect(ofType(events, 'step-status').map(e => e.state)).toContain('completed')
    expect(seen).toHaveLength(3)
    for (const s of seen) expect(s).toMatchObject({ skill: 'test.add', root: user.did, depth: 2, caller: orch.did })

    // the journal has it
    const runId = done.runId
    const journaled = await orchestrator.getRun(runId)
    expect(journaled).toMatchObject({ state: 'completed', result: { sum: 112 } })
    expect((await orchestrator.listRuns({ state: 'completed' })).map(r => r.runId)).toContain(runId)
  })

  it('journals each step of a sequential run in two writes, in dag-cbor, each step\'s end before its dependent\'s first write', async () => {
    const writes: Array<{ key: string, record: any }> = []
    class Recording extends MemoryDatastore {
      override async put (key: Key, value: Uint8Array): Promise<Key> {
        const record = dagCbor.decode<any>(value)
        // the spec's format: the bytes are dag-cbor's own encoding of the record
        expect([...dagCbor.encode(record)]).toEqual([...value])
        writes.push({ key: key.toString(), record })
        return await super.put(key, value)
      }
    }
    const journaled = createOrchestrator({ ic: o.ic, tasks: o.ts, agent: orch, datastore: new Recording() })
    try {
      const p = plan('journal-writes', [
        { id: 's1', capability: 'test.add', input: { a: 1, b: 1 }, dependsOn: [] },
        { id: 's2', capability: 'test.add', input: { a: { $ref: 's1.sum' }, b: 1 }, dependsOn: ['s1'] },
        { id: 's3', capability: 'test.add', input: { a: { $ref: 's2.sum' }, b: 1 }, dependsOn: ['s2'] }
      ], 's3')
      const res = await journaled.runToCompletion(p, { proofs: [userToken], runId: 'journal-writes' })
      expect(res.result).toEqual({ sum: 4 })
      const stepWrites = writes.filter(w => w.key.includes('/steps/'))
      for (const id of ['s1', 's2', 's3']) {
        const mine = stepWrites.filter(w => w.record.id === id)
        // the attempt before its request leaves, then the step's end (its attempt's terminal state with it)
        expect(mine.map(w => [w.record.state, w.record.attempts.map((a: any) => a.state)])).toEqual([
          ['running', ['submitting']],
          ['completed', ['completed']]
        ])
      }
      // a step's end is stored before the step that depends on it writes anything
      const at = (id: string, state: string): number => stepWrites.findIndex(w => w.record.id === id && w.record.state === state)
      expect(at('s1', 'completed')).toBeLessThan(at('s2', 'running'))
      expect(at('s2', 'completed')).toBeLessThan(at('s3', 'running'))
      expect(writes.filter(w => w.key.includes('/runs/')).map(w => w.record.state)).toEqual(['running', 'completed'])
    } finally {
      await journaled.stop()
    }
  })

  it('refuses a run whose proofs do not cover a step, and a duplicate run id', async () => {
    const narrow = await delegate(user, { audience: orch.did, capabilities: [{ skill: 'test.add' }], expiresAt: Date.now() + 60_000 })
    const p = plan('narrow', [{ id: 'v', capability: 'test.vote', input: {}, dependsOn: [] }])
    expect((await rejectionOf(orchestrator.runToCompletion(p, { proofs: [narrow] }))).code).toBe('UNAUTHORIZED')
    const ok = plan('dup', [{ id: 's', capability: 'test.add', input: { a: 1, b: 1 }, dependsOn: [] }])
    await orchestrator.runToCompletion(ok, { proofs: [userToken], runId: 'dup-run' })
    expect((await rejectionOf(orchestrator.runToCompletion(ok, { proofs: [userToken], runId: 'dup-run' }))).code).toBe('DUPLICATE_RUN')
  })

  it('fans out: all answers, the first answer (the others are canceled), a quorum of equal answers', async () => {
    const all = await orchestrator.runToCompletion(plan('fan-all', [
      { id: 'v', capability: 'test.vote', input: {}, dependsOn: [], fanout: { mode: 'all', count: 3 } }
    ]), { proofs: [userToken] })
    expect([...(all.result as string[])].sort()).toEqual(['a', 'b', 'c'])
    expect(all.steps.v.providers).toHaveLength(3)

    slowSignals.length = 0
    const events: OrchestratorEvent[] = []
    const first = await orchestrator.runToCompletion(plan('fan-first', [
      { id: 'v', capability: 'test.vote', input: { delays: { a: 3_000, b: 50, c: 3_000 } }, dependsOn: [], fanout: { mode: 'first', count: 3 } }
    ]), { proofs: [userToken], onEvent: e => events.push(e) })
    expect(first.result).toBe('b')
    expect(first.steps.v.providers).toEqual([workerB.did])
    const canceled = ofType(events, 'canceled').filter(e => e.taskId != null)
    expect(canceled).toHaveLength(2)
    expect(canceled.every(e => e.state === 'canceled')).toBe(true)
    await until(() => slowSignals.length >= 2 ? true : undefined, 5_000, 'slow voters aborted')

    const quorum = await orchestrator.runToCompletion(plan('fan-quorum', [
      { id: 'v', capability: 'test.vote', input: { answers: { a: 'x', b: 'x', c: 'y' }, delays: { c: 200 } }, dependsOn: [], fanout: { mode: 'quorum', count: 3, quorum: 2 } }
    ]), { proofs: [userToken] })
    expect(quorum.result).toBe('x')
    expect([...quorum.steps.v.providers].sort()).toEqual([workerA.did, workerB.did].sort())

    const none = await rejectionOf(orchestrator.runToCompletion(plan('fan-noquorum', [
      { id: 'v', capability: 'test.vote', input: {}, dependsOn: [], fanout: { mode: 'quorum', count: 3, quorum: 2 } }
    ]), { proofs: [userToken] }))
    expect(none.code).toBe('STEP_FAILED')
    expect(none.stepId).toBe('v')
  })

  it('retries a transient failure with backoff on the same provider, with a new task id each round', async () => {
    const events: OrchestratorEvent[] = []
    const started = Date.now()
    const out = await orchestrator.runToCompletion(plan('flaky', [
      { id: 'f', capability: 'test.flaky', input: { key: 'k1', failures: 2 }, dependsOn: [] }
    ]), { proofs: [userToken], onEvent: e => events.push(e) })
    expect(out.result).toEqual({ calls: 3 })
    const retries = ofType(events, 'step-retry')
    expect(retries.map(r => [r.round, r.delay])).toEqual([[1, 100], [2, 200]])
    expect(retries[0].error.code).toBe('TRANSIENT')
    expect(Date.now() - started).toBeGreaterThanOrEqual(300)
    expect(new Set(out.steps.f.taskIds).size).toBe(3)

    // more failures than retries: the step fails, its last error named
    const err = await rejectionOf(orchestrator.runToCompletion(plan('flaky2', [
      { id: 'f', capability: 'test.flaky', input: { key: 'k2', failures: 5 }, dependsOn: [] }
    ]), { proofs: [userToken] }))
    expect(err.code).toBe('STEP_FAILED')
    expect(err.lastError.code).toBe('TRANSIENT')
    expect(flaky.get('k2')).toBe(3)
    expect(err.run.state).toBe('failed')
  })

  it('a fatal failure (POLICY_DENIED) fails the run at once and cancels its running siblings', async () => {
    slowSignals.length = 0
    const events: OrchestratorEvent[] = []
    const err = await rejectionOf(orchestrator.runToCompletion(plan('fatal', [
      { id: 'slow', capability: 'test.slow', input: { ms: 30_000 }, dependsOn: [] },
      { id: 'bad', capability: 'test.fail', input: {}, dependsOn: [] },
      { id: 'after', capability: 'test.add', input: { a: 1, b: 2 }, dependsOn: ['slow'] }
    ]), { proofs: [userToken], onEvent: e => events.push(e) }))
    expect(err.code).toBe('POLICY_DENIED')
    expect(err.stepId).toBe('bad')
    // no retry for a fatal error
    expect(ofType(events, 'step-retry')).toHaveLength(0)
    expect(ofType(events, 'step-failed').map(e => e.stepId)).toEqual(['bad'])
    const canceled = ofType(events, 'canceled')
    expect(canceled.some(e => e.stepId === 'slow' && e.taskId != null && e.state === 'canceled')).toBe(true)
    expect(err.run.steps.slow.state).toBe('canceled')
    expect(err.run.steps.after.state).toBe('pending')
    await until(() => slowSignals.length >= 1 ? true : undefined, 5_000, 'sibling handler aborted')
    expect(events[events.length - 1]).toMatchObject({ type: 'failed', error: { code: 'POLICY_DENIED' }, stepId: 'bad' })
  })

  it('shares the run budget out among the subtasks and gives them the run deadline', async () => {
    const deadline = Date.now() + 60_000
    const out = await orchestrator.runToCompletion(plan('budget', [
      { id: 'b1', capability: 'test.budget', input: {}, dependsOn: [] },
      { id: 'b2', capability: 'test.budget', input: {}, dependsOn: [] },
      { id: 'b3', capability: 'test.budget', input: {}, dependsOn: ['b1', 'b2'] }
    ]), { proofs: [userToken], budget: 12, deadline })
    for (const id of ['b1', 'b2', 'b3']) expect(out.steps[id].result).toEqual({ budget: 4, deadline })
  })

  it('fails the run with DEADLINE_EXCEEDED at its deadline and cancels its subtasks', async () => {
    slowSignals.length = 0
    const events: OrchestratorEvent[] = []
    const started = Date.now()
    const err = await rejectionOf(orchestrator.runToCompletion(plan('deadline', [
      { id: 'slow', capability: 'test.slow', input: { ms: 30_000 }, dependsOn: [] }
    ]), { proofs: [userToken], deadline: Date.now() + 1_000, onEvent: e => events.push(e) }))
    expect(err.name).toBe('DeadlineExceededError')
    expect(err.code).toBe('DEADLINE_EXCEEDED')
    expect(Date.now() - started).toBeLessThan(6_000)
    expect(events[events.length - 1]).toMatchObject({ type: 'failed', error: { code: 'DEADLINE_EXCEEDED' } })
    await until(() => slowSignals.length >= 1 ? true : undefined, 5_000, 'subtask handler aborted')
    expect(slowSignals[0].aborted).toBe(true)
    // the subtask carried the run's deadline, and the delegated token expires by then
    const delegated = ofType(events, 'delegated')[0]
    expect(delegated.expiresAt).toBeLessThanOrEqual(started + 1_000 + 50)
  })

  it('cancels a run when its signal aborts', async () => {
    slowSignals.length = 0
    const controller = new AbortController()
    const events: OrchestratorEvent[] = []
    const p = rejectionOf(orchestrator.runToCompletion(plan('cancel', [
      { id: 'slow', capability: 'test.slow', input: { ms: 30_000 }, dependsOn: [] }
    ]), {
      proofs: [userToken],
      signal: controller.signal,
      onEvent: e => {
        events.push(e)
        if (e.type === 'step-status' && e.state === 'working') controller.abort()
      }
    }))
    const err = await p
    expect(err.code).toBe('CANCELED')
    expect(events[events.length - 1]).toMatchObject({ type: 'canceled' })
    expect((events[events.length - 1] as any).stepId).toBeUndefined()
    await until(() => slowSignals.length >= 1 ? true : undefined, 5_000, 'handler aborted')
    expect(err.run.state).toBe('canceled')
  })

  it('hands a sub-goal to an agent that orchestrates it (chain user -> orchestrator -> planner -> worker), within a depth limit', async () => {
    seen.length = 0
    const out = await orchestrator.runToCompletion(plan('hier', [
      { id: 'g', capability: 'test.plan', input: {}, dependsOn: [], goal: { intent: 'add twice', input: { x: { $input: 'x' } } } }
    ], 'g', { x: 5 }), { proofs: [userToken] })
    expect(out.result).toEqual({ sum: 7 })
    expect(out.steps.g.providers).toEqual([planner.did])
    expect(seen.map(s => s.skill)).toEqual(['test.plan.add', 'test.plan.add'])
    for (const s of seen) expect(s).toMatchObject({ root: user.did, depth: 3, caller: planner.did })

    // the agent refuses sub-goals deeper than its limit (INVALID_PLAN: fatal)
    const err = await rejectionOf(orchestrator.runToCompletion(plan('hier-deep', [
      { id: 'g', capability: 'test.shallow', input: {}, dependsOn: [], goal: { intent: 'add twice', input: { x: 1 } } }
    ]), { proofs: [userToken] }))
    expect(err.code).toBe('INVALID_PLAN')
    // and this orchestrator does not delegate beyond its own
    const flat = createOrchestrator({ ic: o.ic, tasks: o.ts, agent: orch, maxDepth: 0 })
    const err2 = await rejectionOf(flat.runToCompletion(plan('hier-flat', [
      { id: 'g', capability: 'test.plan', input: {}, dependsOn: [], goal: { intent: 'add twice', input: { x: 1 } } }
    ]), { proofs: [userToken] }))
    expect(err2.code).toBe('INVALID_PLAN')
  })

  it('fails over when the provider\'s node dies mid-step; the side effect runs exactly once', async () => {
    const k1 = await startPeer([o.node, a.node, b.node])
    const k2 = await startPeer([o.node, a.node, c.node])
    peers.push(k1, k2)
    let effects = 0
    const started: string[] = []
    const serveWork = async (p: Peer, key: string): Promise<HostedAgent> => {
      const agent = await p.ic.host({ key, name: key, skills: [{ id: 'test.work' }] })
      await p.ts.serve(agent.did, 'test.work', async (_input, ctx) => {
        started.push(key)
        await delay(1_500, ctx.signal)
        effects++
        return { by: key }
      })
      return agent
    }
    const w1 = await serveWork(k1, 'k1')
    const w2 = await serveWork(k2, 'k2')
    const byDid = new Map([[w1.did, k1], [w2.did, k2]])
    await discovered(o.ic, 'test.work', 2)

    let killed: string | undefined
    const events = await collect(orchestrator.run(plan('failover', [
      { id: 'w', capability: 'test.work', input: {}, dependsOn: [] }
    ]), { proofs: [userToken] }), async (e) => {
      if (e.type === 'step-status' && e.state === 'working' && killed == null) {
        killed = e.provider
        // the provider's process dies: its task service and its node stop
        await killPeer(byDid.get(e.provider) as Peer)
      }
    })
    const last = events[events.length - 1]
    expect(last.type).toBe('completed')
    const survivor = killed === w1.did ? 'k2' : 'k1'
    expect((last as any).result).toEqual({ by: survivor })
    expect(effects).toBe(1)
    expect(started).toHaveLength(2)
    const failover = ofType(events, 'failover')
    expect(failover).toHaveLength(1)
    expect(failover[0]).toMatchObject({ from: killed, error: { code: 'LEASE_LAPSED' } })
    expect(['unreachable', 'failed', 'canceled']).toContain(failover[0].previous)
  })

  it('resumes a run after the orchestrator crashed: completed steps are not run again, the running one is re-attached', async () => {
    const datastore = new MemoryDatastore()
    let p1 = await startPeer([o.node, a.node, b.node], datastore)
    peers.push(p1)
    const agent1 = await p1.ic.host({ key: 'resumer', name: 'Resumer', skills: [{ id: 'test.resumer' }] })
    const token = await delegate(user, { audience: agent1.did, capabilities: [{ skill: 'test.*' }], expiresAt: Date.now() + 3_600_000 })
    const orch1 = createOrchestrator({ ic: p1.ic, tasks: p1.ts, agent: agent1, datastore })
    const before = { ...counters }
    const thePlan = plan('crash', [
      { id: 's1', capability: 'test.count', input: {}, dependsOn: [] },
      { id: 's2', capability: 'test.slowcount', input: { after: { $ref: 's1.one' } }, dependsOn: ['s1'] }
    ], 's2')
    let runId: string | undefined
    for await (const e of orch1.run(thePlan, { proofs: [token], runId: 'crash-run' })) {
      runId = e.runId
      if (e.type === 'step-status' && e.stepId === 's2' && e.state === 'working') {
        // crash: the orchestrator and its node stop where they are
        await orch1.stop()
        break
      }
    }
    await stopPeer(p1)
    expect(runId).toBe('crash-run')
    expect(counters.one).toBe(before.one + 1)

    // a new orchestrator process: new node on the same datastore (same peer id, same agent key)
    p1 = await startPeer([o.node, a.node, b.node], datastore)
    peers.push(p1)
    const agent2 = await p1.ic.host({ key: 'resumer', name: 'Resumer', skills: [{ id: 'test.resumer' }] })
    expect(agent2.did).toBe(agent1.did)
    const orch2 = createOrchestrator({ ic: p1.ic, tasks: p1.ts, agent: agent2, datastore })
    expect((await orch2.listRuns({ state: 'running' })).map(r => r.runId)).toContain('crash-run')
    const events: OrchestratorEvent[] = []
    const out = await orch2.resumeToCompletion('crash-run', { onEvent: e => events.push(e) })
    expect(out.result).toEqual({ two: before.two + 1 })
    expect(counters.one).toBe(before.one + 1)
    expect(counters.two).toBe(before.two + 1)
    expect(events[0]).toMatchObject({ type: 'plan', resumed: true })
    expect(ofType(events, 'step-completed').find(e => e.stepId === 's1')).toMatchObject({ replayed: true })
    expect(ofType(events, 'step-started').map(e => e.stepId)).toEqual(['s2'])
    expect(ofType(events, 'provider-selected')).toMatchObject([{ stepId: 's2', reattach: true }])
    // a finished run resumes to its journaled end
    const again = await orch2.resumeToCompletion('crash-run')
    expect(again.state).toBe('completed')
    await orch2.stop()
    expect((await rejectionOf(orch2.resumeToCompletion('nope'))).code).toBe('STOPPED')
  })

  it('resumes from LevelDB a run whose orchestrator process was killed with SIGKILL', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ioa-orch-'))
    const bootstrap = [o, a, b].flatMap(p => p.node.getMultiaddrs().map(m => m.toString()))
    const before = { ...counters }
    // the child: an orchestrator on LevelDB that prints its events as JSON lines
    const script = `
      import { createTransportNode } from '@ioa/transport'
      import { createInterconnect } from '@ioa/interconnect'
      import { createTaskService, createOrchestrator } from '@ioa/collab'
      import { LevelDatastore } from 'datastore-level'
      const [dir, bootstrap] = [process.argv[1], JSON.parse(process.argv[2])]
      const datastore = new LevelDatastore(dir)
      await datastore.open()
      const node = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'], datastore, allow: ${JSON.stringify(LOOPBACK)} })
      for (const addr of bootstrap) await node.dial((await import('@multiformats/multiaddr')).multiaddr(addr)).catch(() => {})
      const ic = await createInterconnect(node, { datastore, requestTimeout: 3000 })
      const agent = await ic.host({ key: 'proc-orch', name: 'Process orchestrator', skills: [{ id: 'test.resumer' }] })
      const tasks = createTaskService(ic, { leaseInterval: ${LEASE} })
      const orch = createOrchestrator({ ic, tasks, agent, datastore, retries: 5, backoff: { initial: 300 } })
      const plan = { id: 'proc', goal: { intent: 'proc', input: {} }, output: 's2', steps: [
        { id: 's1', capability: 'test.count', input: {}, dependsOn: [] },
        { id: 's2', capability: 'test.slowcount', input: {}, dependsOn: ['s1'] }
      ] }
      for await (const e of orch.run(plan, { runId: 'proc-run' })) {
        process.stdout.write(JSON.stringify({ type: e.type, stepId: e.stepId, state: e.state, did: agent.did }) + '\\n')
      }
    `
    const child = spawn(process.execPath, ['--input-type=module', '-e', script, dir, JSON.stringify(bootstrap)], { cwd: COLLAB, stdio: ['ignore', 'pipe', 'inherit'] })
    try {
      const lines = createInterface({ input: child.stdout })
      let childDid: string | undefined
      await new Promise<void>((resolve, reject) => {
        child.once('exit', (code) => { reject(new Error(`child exited with ${String(code)} before the kill`)) })
        lines.on('line', (line) => {
          const e = JSON.parse(line)
          childDid = e.did
          if (e.type === 'step-status' && e.stepId === 's2' && e.state === 'working') {
            child.kill('SIGKILL')
            resolve()
          }
        })
      })
      await new Promise(resolve => child.once('exit', resolve))
      expect(counters.one).toBe(before.one + 1)

      // a new orchestrator on the same LevelDB directory
      const datastore = new LevelDatastore(dir)
      await datastore.open()
      const p = await startPeer([o.node, a.node, b.node], datastore)
      try {
        const agent = await p.ic.host({ key: 'proc-orch', name: 'Process orchestrator', skills: [{ id: 'test.resumer' }] })
        expect(agent.did).toBe(childDid)
        const orch2 = createOrchestrator({ ic: p.ic, tasks: p.ts, agent, datastore })
        const events: OrchestratorEvent[] = []
        const out = await orch2.resumeToCompletion('proc-run', { onEvent: e => events.push(e) })
        expect(out.result).toEqual({ two: before.two + 1 })
        expect(counters.one).toBe(before.one + 1)
        expect(counters.two).toBe(before.two + 1)
        expect(ofType(events, 'provider-selected')).toMatchObject([{ stepId: 's2', reattach: true }])
        await orch2.stop()
      } finally {
        await stopPeer(p)
        await datastore.close()
      }
    } finally {
      if (child.exitCode == null) child.kill('SIGKILL')
      await rm(dir, { recursive: true, force: true })
    }
  })
})
