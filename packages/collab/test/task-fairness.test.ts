/**
 * Hostile requesters against one executor over TCP on loopback (issue 9,
 * items 2 and 8): fair-share admission per peer, per caller agent and per
 * remote address (bare libp2p peers dial from 127.0.0.2, so their connections
 * have another source address than the bystander's 127.0.0.1), tasks whose
 * requester went away, and concurrent submits that share an idempotency key.
 */
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { createIdentity, createInterconnect } from '@ioa/interconnect'
import { createTransportNode, messaging } from '@ioa/transport'
import { tcp } from '@libp2p/tcp'
import { createLibp2p } from 'libp2p'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { collect, delay, rejectionOf, until } from '../../../test/util.js'
import { delegate } from '../src/delegation.js'
import { createEnvelope } from '../src/envelope.js'
import { fromRemote } from '../src/errors.js'
import { TASK_PROTOCOL, createTaskService } from '../src/task-service.js'
import type { Token } from '../src/delegation.js'
import type { TaskEvent, TaskService } from '../src/task-service.js'
import type { TaskSnapshot } from '../src/tasks.js'
import type { HostedAgent, Identity, Interconnect } from '@ioa/interconnect'
import type { Messaging, TransportNode } from '@ioa/transport'
import type { Libp2p } from '@libp2p/interface'
import type { Multiaddr } from '@multiformats/multiaddr'

const LEASE = 300
const POLL = { interval: 100 }

/** Small limits so that the test fills them quickly */
const LIMITS = { maxActiveTasks: 40, maxActiveTasksPerPeer: 8, maxActiveTasksPerCaller: 8, maxActiveTasksPerAddress: 16 }

type BareNode = Libp2p<{ messaging: Messaging }>

/** A bare libp2p peer (no DHT, no interconnect) whose connections come from `localAddress` */
async function bareNode (localAddress: string): Promise<BareNode> {
  return createLibp2p({
    transports: [tcp({ dialOpts: { localAddress } })],
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()],
    services: { messaging: messaging() }
  })
}

/** A caller with a self-signed token (no `roots` on the executor: any root is accepted) */
async function selfSigned (): Promise<{ identity: Identity, token: Token }> {
  const identity = await createIdentity()
  const token = await delegate(identity, { audience: identity.did, capabilities: [{ skill: 'test.*' }], expiresAt: Date.now() + 3_600_000 })
  return { identity, token }
}

interface Held {
  /** The first event, or the submit's error */
  first: Promise<TaskEvent | { error: any }>
  /** Stop reading (closes the stream) */
  close: () => Promise<void>
}

describe('task fair share, abandoned tasks and idempotency over TCP', () => {
  const closers: Array<() => Promise<unknown>> = []
  let executor: TransportNode
  let requester: TransportNode
  let icE: Interconnect
  let icR: Interconnect
  let worker: HostedAgent
  let bystander: HostedAgent
  let bystanderToken: Token
  let tsE: TaskService
  let tsR: TaskService
  let target: Multiaddr[]
  const started: Array<{ id: string, signal: AbortSignal }> = []
  const counted = { n: 0 }

  beforeAll(async () => {
    executor = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'] })
    requester = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'] })
    closers.push(async () => executor.stop(), async () => requester.stop())
    await requester.dial(executor.getMultiaddrs())
    icE = await createInterconnect(executor, { requestTimeout: 3_000 })
    icR = await createInterconnect(requester, { requestTimeout: 3_000 })
    closers.push(async () => icE.stop(), async () => icR.stop())
    worker = await icE.host({ key: 'worker', name: 'Worker', skills: [{ id: 'test.slow' }, { id: 'test.count' }] })
    bystander = await icR.host({ key: 'bystander', name: 'Bystander', skills: [{ id: 'test.none' }] })
    bystanderToken = (await delegate(bystander.identity, { audience: bystander.did, capabilities: [{ skill: 'test.*' }], expiresAt: Date.now() + 3_600_000 }))
    tsE = createTaskService(icE, { leaseInterval: LEASE, limits: LIMITS })
    tsR = createTaskService(icR, { leaseInterval: LEASE })
    closers.push(async () => tsE.stop(), async () => tsR.stop())
    await tsE.serve(worker.did, 'test.slow', async (input: any, ctx) => {
      started.push({ id: ctx.task.id, signal: ctx.signal })
      await delay(input?.ms ?? 120_000, ctx.signal)
      return 'finished'
    })
    await tsE.serve(worker.did, 'test.count', async (input: any, ctx) => {
      counted.n++
      await delay(input?.ms ?? 100, ctx.signal)
      return { n: counted.n }
    })
    target = executor.getMultiaddrs()
    await until(async () => icR.resolve(worker.did, { cache: false, timeout: 3_000 }).then(r => r.peers.length > 0 ? r : undefined, () => undefined), { ...POLL, timeout: 30_000, what: 'resolve worker' })
  })

  afterAll(async () => {
    for (const close of closers.reverse()) await close().catch(() => {})
  })

  /** Submit over `node`'s messaging and keep reading the stream in the background */
  async function hold (node: BareNode | TransportNode, caller: { identity: Identity, token: Token }, input: unknown = { ms: 120_000 }, skill = 'test.slow'): Promise<Held> {
    const body = { input }
    const envelope = await createEnvelope(caller.identity, { to: worker.did, skill, task: crypto.randomUUID(), body, proofs: [caller.token] })
    const controller = new AbortController()
    const source = node.services.messaging.stream<TaskEvent>(target, TASK_PROTOCOL, 'submit', { envelope, body }, { signal: controller.signal, timeout: 600_000 })
    let resolve!: (e: TaskEvent | { error: any }) => void
    const first = new Promise<TaskEvent | { error: any }>(r => { resolve = r })
    const reading = (async () => {
      try {
        for await (const e of source) resolve(e)
        resolve({ error: new Error('stream ended') })
      } catch (err) {
        resolve({ error: fromRemote(err) })
      }
    })()
    return {
      first,
      close: async () => { controller.abort(); await reading }
    }
  }

  it('follows one task from 10 concurrent submits with one idempotency key and different task ids', async () => {
    const before = counted.n
    const caller = { identity: bystander.identity, token: bystanderToken }
    // raw submits (as a hostile or naive peer sends them), all in flight at once
    const streams = await Promise.all(Array.from({ length: 10 }, async () => {
      const body = { input: { ms: 500 }, idempotencyKey: 'race-1' }
      const envelope = await createEnvelope(caller.identity, { to: worker.did, skill: 'test.count', task: crypto.randomUUID(), body, proofs: [caller.token] })
      return requester.services.messaging.stream<TaskEvent>(target, TASK_PROTOCOL, 'submit', { envelope, body }, { timeout: 30_000 })
    }))
    const results = await Promise.allSettled(streams.map(async s => collect(s)))
    const failures = results.filter(r => r.status === 'rejected').map(r => String((r as PromiseRejectedResult).reason?.code))
    expect(failures).toEqual([])
    const finals = results.map(r => (r as PromiseFulfilledResult<TaskEvent[]>).value.at(-1) as { task: TaskSnapshot })
    expect(new Set(finals.map(f => f.task.id)).size).toBe(1)
    expect(finals.every(f => f.task.state === 'completed')).toBe(true)
    expect(counted.n - before).toBe(1)
    // through the requester's task service, more at once than the executor's 32 streams per task
    const req = { skill: 'test.count', input: { ms: 500 }, proofs: [bystanderToken], idempotencyKey: 'race-2' }
    const done = await Promise.all(Array.from({ length: 40 }, async () => tsR.submitAndWait(bystander.did, worker.did, { ...req, taskId: crypto.randomUUID() })))
    expect(new Set(done.map(d => d.id)).size).toBe(1)
    expect(counted.n - before).toBe(2)
  })
})
