/**
 * Retention of finished tasks (issue 9 item 7): an executor over TCP keeps
 * finished tasks and their idempotency keys by count and by age, never a
 * running task, never a task whose envelope could still be replayed, and
 * trims what a previous process left in its datastore.
 */
import { MemoryDatastore } from 'datastore-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { delay, rejectionOf, until } from '../../../test/util.js'
import { delegate } from '../src/auth/delegation.js'
import { createTaskService } from '../src/tasks/service.js'
import { TaskStore } from '../src/tasks/model.js'
import { offlineInterconnect, resolvable, startTaskPair } from './task-pair.js'
import type { Token } from '../src/auth/delegation.js'
import type { TaskService, TaskServiceInit } from '../src/tasks/service.js'
import type { TaskRecord } from '../src/tasks/model.js'
import type { HostedAgent, Interconnect } from '@ioa/interconnect'
import type { Datastore } from 'interface-datastore'

const POLL = { interval: 100 }
/** Short times so that envelopes stop being replayable quickly */
const TIMES = { clockSkew: 100, replayWindow: 2_000 }

async function count (ds: Datastore, prefix: string): Promise<number> {
  let n = 0
  for await (const _ of ds.queryKeys({ prefix })) n++
  return n
}

describe('retention of finished tasks over TCP', () => {
  const closers: Array<() => Promise<unknown>> = []
  let icE: Interconnect
  let icR: Interconnect
  let worker: HostedAgent
  let caller: HostedAgent
  let token: Token
  let tsR: TaskService
  const runs = { n: 0 }

  async function executorService (ds: Datastore, init: TaskServiceInit): Promise<TaskService> {
    const ts = createTaskService(icE, { datastore: ds, leaseInterval: 200, ...TIMES, ...init })
    closers.push(async () => ts.stop())
    await ts.serve(worker.did, 'test.quick', async (input: any, ctx) => {
      runs.n++
      await delay(input?.ms ?? 1, ctx.signal)
      return { n: runs.n }
    })
    return ts
  }

  beforeAll(async () => {
    ;({ icE, icR } = await startTaskPair(closers))
    worker = await icE.host({ key: 'worker', name: 'Worker', skills: [{ id: 'test.quick' }] })
    caller = await icR.host({ key: 'caller', name: 'Caller', skills: [{ id: 'test.none' }] })
    token = await delegate(caller.identity, { audience: caller.did, capabilities: [{ skill: 'test.*' }], expiresAt: Date.now() + 3_600_000 })
    tsR = createTaskService(icR, { leaseInterval: 200 })
    closers.push(async () => tsR.stop())
    await resolvable(icR, worker.did)
  })

  afterAll(async () => {
    for (const close of closers.reverse()) await close().catch(() => {})
  })

  const run = async (extra: Record<string, unknown> = {}): Promise<string> =>
    (await tsR.submitAndWait(caller.did, worker.did, { skill: 'test.quick', input: null, proofs: [token], ttl: 500, ...extra })).id

  it('keeps at most maxTasks finished tasks, oldest removed first; a running task stays', async () => {
    const ds = new MemoryDatastore()
    const ts = await executorService(ds, { retention: { maxTasks: 5, sweepInterval: 100 } })
    const slow = tsR.submitAndWait(caller.did, worker.did, { skill: 'test.quick', input: { ms: 4_000 }, proofs: [token], ttl: 500 })
    const ids: string[] = []
    for (let i = 0; i < 12; i++) ids.push(await run())
    // the 12 finished ones are trimmed to 5 once their envelopes expired; the running one is kept too
    await until(async () => await count(ds, '/ioa/tasks/') === 6, { ...POLL, timeout: 15_000, what: 'trimmed to 5 finished + 1 running' })
    expect((await tsR.get(worker.did, ids[11])).state).toBe('completed')
    expect((await rejectionOf(tsR.get(worker.did, ids[0]))).name).toBe('UnknownTaskError')
    expect((await slow).state).toBe('completed')
    await ts.stop()
  })

  it('keeps an idempotency key as long as its task; past maxAge both go and the key runs anew', async () => {
    const ds = new MemoryDatastore()
    const ts = await executorService(ds, { retention: { maxAge: 1_500, sweepInterval: 100 } })
    const before = runs.n
    const first = await run({ idempotencyKey: 'keep-1' })
    expect(await run({ idempotencyKey: 'keep-1' })).toBe(first)
    expect(runs.n - before).toBe(1)
    expect(await count(ds, '/ioa/task-keys/')).toBe(1)
    await until(async () => await count(ds, '/ioa/tasks/') === 0 && await count(ds, '/ioa/task-keys/') === 0, { ...POLL, timeout: 15_000, what: 'task and key removed' })
    const again = await run({ idempotencyKey: 'keep-1' })
    expect(again).not.toBe(first)
    expect(runs.n - before).toBe(2)
    await ts.stop()
  })

  it('never removes a task whose envelope could still be replayed', async () => {
    const ds = new MemoryDatastore()
    const ts = await executorService(ds, { replayWindow: 60_000, retention: { maxTasks: 1, sweepInterval: 100 } })
    // envelopes valid for 50 s: a replay within that must find its task (the replay cache is not persisted)
    const ids = [await run({ ttl: 50_000 }), await run({ ttl: 50_000 }), await run({ ttl: 50_000 })]
    await delay(500)
    for (const id of ids) expect((await tsR.get(worker.did, id)).state).toBe('completed')
    expect(await count(ds, '/ioa/tasks/')).toBe(3)
    await ts.stop()
  })

  it('trims the finished tasks a previous process left in the datastore', async () => {
    const ds = new MemoryDatastore()
    const store = new TaskStore(ds)
    const old = Date.now() - 3_600_000
    for (let i = 0; i < 20; i++) {
      const record: TaskRecord = {
        v: 1, agent: worker.did, owner: caller.did, peer: 'p', body: 'b', root: caller.did,
        snapshot: { id: `old-${i}`, contextId: `old-${i}`, skill: 'test.quick', state: i === 19 ? 'working' : 'completed', messages: [], artifacts: [], createdAt: old + i, updatedAt: old + i }
      }
      await store.put(record)
    }
    // a service without a network: starting trims
    const svc = createTaskService(offlineInterconnect(), { datastore: ds, ...TIMES, retention: { maxTasks: 4, sweepInterval: 100 } })
    await svc.start()
    await until(async () => await count(ds, '/ioa/tasks/') === 4, { ...POLL, timeout: 10_000, what: 'trimmed at start' })
    // the newest are kept, the interrupted one among them
    const kept: string[] = []
    for await (const r of store.all()) kept.push(r.snapshot.id)
    expect(kept.sort()).toEqual(['old-16', 'old-17', 'old-18', 'old-19'])
    expect((await store.get(worker.did, 'old-19'))?.snapshot.error?.code).toBe('INTERRUPTED')
    await svc.stop()
  })
})
