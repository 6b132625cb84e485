/**
 * What a fast task of `/ioa/task/2.0.0` costs on the wire (spec/collab-tasks.md
 * 14.1, 14.3): between separate nodes over TCP on 127.0.0.1, in session mode,
 * a task that ends within the hold-back is one socket write at each end: the
 * requester's submit, and the executor's final snapshot (one ITEM) with the
 * call's END in the same write. Counted as the writes node:net hands to the
 * kernel (`Socket#_write` / `_writev`, one syscall each).
 */
import net from 'node:net'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { delegate } from '../src/auth/delegation.js'
import { createTaskService } from '../src/tasks/service.js'
import { resolvable, startTaskPair } from './task-pair.js'
import type { Token } from '../src/auth/delegation.js'
import type { TaskService } from '../src/tasks/service.js'
import type { HostedAgent } from '@ioa/interconnect'
import type { TransportNode } from '@ioa/transport'

type Writer = (...args: unknown[]) => unknown

/** Socket writes while `fn` runs: by the executor's end (its listening port) and in all */
async function socketWrites (executorPort: number, fn: () => Promise<void>): Promise<{ executor: number, all: number }> {
  const proto = net.Socket.prototype as unknown as Record<'_write' | '_writev', Writer>
  const write = vi.spyOn(proto, '_write')
  const writev = vi.spyOn(proto, '_writev')
  try {
    await fn()
    const sockets = [...write.mock.contexts, ...writev.mock.contexts] as net.Socket[]
    return { executor: sockets.filter(s => s.localPort === executorPort).length, all: sockets.length }
  } finally {
    write.mockRestore()
    writev.mockRestore()
  }
}

describe('a fast 2.0.0 task on the wire', () => {
  const closers: Array<() => Promise<unknown>> = []
  let executor: TransportNode
  let caller: HostedAgent
  let worker: HostedAgent
  let token: Token
  let tsR: TaskService

  beforeAll(async () => {
    const pair = await startTaskPair(closers)
    executor = pair.executor
    worker = await pair.icE.host({ key: 'worker', name: 'Worker', skills: [{ id: 'test.fast' }] })
    caller = await pair.icR.host({ key: 'caller', name: 'Caller', skills: [{ id: 'test.none' }] })
    token = await delegate(caller.identity, { audience: caller.did, capabilities: [{ skill: 'test.*' }], expiresAt: Date.now() + 3_600_000 })
    const tsE = createTaskService(pair.icE, {})
    tsR = createTaskService(pair.icR, {})
    closers.push(async () => tsE.stop(), async () => tsR.stop())
    await tsE.serve(worker.did, 'test.fast', (input) => input)
    await resolvable(pair.icR, worker.did)
  })

  afterAll(async () => {
    for (const close of closers.reverse()) await close().catch(() => {})
  })

  it('is one socket write at each end: the submit, and the final snapshot with END', async () => {
    // warm: the session binding is made, the version known
    for (let n = 0; n < 10; n++) expect((await tsR.submitAndWait(caller.identity, worker.did, { skill: 'test.fast', input: n, proofs: [token] })).result).toBe(n)
    const port = Number(/\/tcp\/(\d+)/.exec(executor.getMultiaddrs()[0].toString())?.[1])
    const calls = 40
    const writes = await socketWrites(port, async () => {
      for (let n = 0; n < calls; n++) {
        const events = []
        for await (const e of tsR.submit(caller.identity, worker.did, { skill: 'test.fast', input: n, proofs: [token] })) events.push(e)
        expect(events.map(e => e.type === 'status' ? e.task.state : e.type)).toEqual(['completed'])
      }
    })
    // an END in a write of its own would make it 2 a call at the executor, 3 in all
    expect(writes.executor / calls).toBeLessThanOrEqual(1.25)
    expect(writes.all / calls).toBeLessThanOrEqual(2.5)
  })
})
