/**
 * Hostile requesters against one executor over TCP on loopback (issue 9,
 * items 2 and 8): fair-share admission per peer, per caller agent and per
 * remote address (bare libp2p peers dial from 127.0.0.2, so their connections
 * have another source address than the bystander's 127.0.0.1), tasks whose
 * requester went away, and concurrent submits that share an idempotency key.
 */
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { createIdentity } from '@ioa/interconnect'
import { messaging } from '@ioa/transport'
import { tcp } from '@libp2p/tcp'
import { multiaddr } from '@multiformats/multiaddr'
import { createLibp2p } from 'libp2p'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { collect, delay, until } from '../../../test/util.js'
import { delegate } from '../src/auth/delegation.js'
import { createEnvelope } from '../src/auth/envelope.js'
import { fromRemote } from '../src/errors.js'
import { TASK_PROTOCOL, createTaskService } from '../src/tasks/service.js'
import { addressKey } from '../src/tasks/admission.js'
import { SharedStream } from '../src/tasks/shared-stream.js'
import { resolvable, startTaskPair } from './task-pair.js'
import type { Token } from '../src/auth/delegation.js'
import type { TaskEvent, TaskService } from '../src/tasks/service.js'
import type { TaskSnapshot } from '../src/tasks/model.js'
import type { HostedAgent, Identity, Interconnect } from '@ioa/interconnect'
import type { Messaging, TransportNode } from '@ioa/transport'
import type { Libp2p } from '@libp2p/interface'
import type { TCPSocketOptions } from '@libp2p/tcp'
import type { Multiaddr } from '@multiformats/multiaddr'

const LEASE = 300
const POLL = { interval: 100 }

/** Small limits so that the test fills them quickly */
const LIMITS = { maxActiveTasks: 40, maxActiveTasksPerPeer: 8, maxActiveTasksPerCaller: 8, maxActiveTasksPerAddress: 16 }

type BareNode = Libp2p<{ messaging: Messaging }>

/** A bare libp2p peer (no DHT, no interconnect) whose connections come from `localAddress` */
async function bareNode (localAddress: string): Promise<BareNode> {
  return createLibp2p({
    // dialOpts is spread into net.connect, whose localAddress its type does not list
    transports: [tcp({ dialOpts: { localAddress } as TCPSocketOptions })],
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
    ;({ executor, requester, icE, icR } = await startTaskPair(closers))
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
    await resolvable(icR, worker.did)
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

  /** Bare peers dialled in to the executor from `address` (one at a time: libp2p rate-limits new inbound connections per host) */
  async function attackers (address: string, n: number): Promise<BareNode[]> {
    const out: BareNode[] = []
    for (let i = 0; i < n; i++) {
      const node = await bareNode(address)
      closers.push(async () => node.stop())
      await until(async () => node.dial(target).then(() => true, () => false), { ...POLL, timeout: 20_000, what: `dial from ${address}` })
      out.push(node)
    }
    return out
  }

  /** Wait until every task started so far has ended (their slots are free again) */
  async function drained (): Promise<void> {
    await until(() => started.every(s => s.signal.aborted), { ...POLL, timeout: 30_000, what: 'held tasks ended' })
  }

  async function accepted (held: Held[]): Promise<{ ok: number, refused: string[] }> {
    const firsts = await Promise.all(held.map(async h => h.first))
    const refused = firsts.filter((f): f is { error: any } => 'error' in f).map(f => String(f.error?.code))
    return { ok: firsts.length - refused.length, refused }
  }

  async function bystanderRuns (): Promise<TaskSnapshot> {
    return tsR.submitAndWait(bystander.did, worker.did, { skill: 'test.count', input: { ms: 10 }, proofs: [bystanderToken] })
  }

  it('holds one peer and one caller agent to their share; a bystander still gets its task run', async () => {
    const [peer] = await attackers('127.0.0.2', 1)
    // one peer, a fresh caller agent (self-signed token) per task
    const fromPeer: Held[] = []
    for (let i = 0; i < 10; i++) fromPeer.push(await hold(peer, await selfSigned()))
    expect(await accepted(fromPeer)).toEqual({ ok: LIMITS.maxActiveTasksPerPeer, refused: ['TOO_MANY_REQUESTS', 'TOO_MANY_REQUESTS'] })
    // one caller agent from fresh peers of another address
    const caller = await selfSigned()
    const fromCaller: Held[] = []
    for (const node of await attackers('127.0.0.3', 2)) {
      for (let i = 0; i < 5; i++) fromCaller.push(await hold(node, caller))
    }
    expect(await accepted(fromCaller)).toEqual({ ok: LIMITS.maxActiveTasksPerCaller, refused: ['TOO_MANY_REQUESTS', 'TOO_MANY_REQUESTS'] })
    expect((await bystanderRuns()).state).toBe('completed')
    for (const h of [...fromPeer, ...fromCaller]) await h.close()
    await drained()
  })

  it('holds many peer ids from one address to the address share; others keep their share', async () => {
    const nodes = await attackers('127.0.0.4', 5)
    const held: Held[] = []
    // 5 peers x 8 tasks would fill the node's 40 without a limit per address
    for (const node of nodes) {
      for (let i = 0; i < LIMITS.maxActiveTasksPerPeer; i++) held.push(await hold(node, await selfSigned()))
    }
    const { ok, refused } = await accepted(held)
    expect(ok).toBe(LIMITS.maxActiveTasksPerAddress)
    expect(new Set(refused)).toEqual(new Set(['TOO_MANY_REQUESTS']))
    expect((await bystanderRuns()).state).toBe('completed')
    // a peer of another address still gets its own share
    const [other] = await attackers('127.0.0.5', 1)
    const more: Held[] = []
    for (let i = 0; i < 3; i++) more.push(await hold(other, await selfSigned()))
    expect((await accepted(more)).ok).toBe(3)
    for (const h of [...held, ...more]) await h.close()
    await drained()
  })

  it('cancels a task whose requester neither holds its stream nor resubscribes (ABANDONED)', async () => {
    let id: string | undefined
    for await (const e of tsR.submit(bystander.did, worker.did, { skill: 'test.slow', input: { ms: 120_000 }, proofs: [bystanderToken] })) {
      if (e.type === 'status' && e.task.state === 'working') { id = e.task.id; break }
    }
    expect(id).toBeDefined()
    const final = await until(async () => {
      const t = await tsR.get(worker.did, id as string)
      return t.state === 'canceled' ? t : undefined
    }, { ...POLL, timeout: 20_000, what: 'abandoned task canceled' })
    expect(final.error?.code).toBe('ABANDONED')
    expect(started.find(s => s.id === id)?.signal.aborted).toBe(true)
  })

  it('keeps a task whose requester resubscribes after losing its stream', async () => {
    let id: string | undefined
    const ms = 12 * LEASE
    for await (const e of tsR.submit(bystander.did, worker.did, { skill: 'test.slow', input: { ms }, proofs: [bystanderToken] })) {
      if (e.type === 'status' && e.task.state === 'working') { id = e.task.id; break }
    }
    expect(id).toBeDefined()
    // back within the 3 leases (abandonAfter), more than once: in all longer than 3 leases
    for (let i = 0; i < 4; i++) {
      await delay(LEASE)
      const events: TaskEvent[] = []
      for await (const e of tsR.resubscribe(worker.did, id as string)) {
        events.push(e)
        if (events.length >= 2) break
      }
      expect((events[0] as { task: TaskSnapshot }).task.state).toBe('working')
    }
    const events = await collect(tsR.resubscribe(worker.did, id as string))
    const last = events.at(-1) as { task: TaskSnapshot }
    expect(last.task.state).toBe('completed')
    expect(last.task.result).toBe('finished')
  })
})

describe('fair-share address key', () => {
  it('counts IPv4 by address, IPv6 by /64, IPv4-mapped IPv6 as IPv4, and nothing without an IP', () => {
    expect(addressKey(multiaddr('/ip4/127.0.0.2/tcp/4001'))).toBe('127.0.0.2')
    expect(addressKey(multiaddr('/ip6/2001:db8:1:2:aa:bb:cc:dd/tcp/1'))).toBe('2001:db8:1:2::/64')
    expect(addressKey(multiaddr('/ip6/2001:db8:1:2::7/tcp/1'))).toBe('2001:db8:1:2::/64')
    expect(addressKey(multiaddr('/ip6/::1/tcp/1'))).toBe('0:0:0:0::/64')
    expect(addressKey(multiaddr('/ip6/::ffff:10.1.2.3/tcp/1'))).toBe('10.1.2.3')
    expect(addressKey(multiaddr('/memory/x'))).toBeUndefined()
    expect(addressKey(multiaddr('/ip4/10.0.0.1/tcp/1/p2p/12D3KooWGRUVh7xLrDGjDsdeYtjNZLNkU3GPAnqnKAQ3Y6kQdYGc/p2p-circuit'))).toBeUndefined()
    expect(addressKey(undefined)).toBeUndefined()
  })
})

describe('one task stream read by several callers', () => {
  it('gives a late reader the newest snapshot, a reader that does not keep up the final one, and stops the source with its last reader', async () => {
    type E = { kind: 'status' | 'beat', n: number }
    let stopped = false
    let emit!: (e: E | null) => void
    const source = async function * (signal: AbortSignal): AsyncGenerator<E> {
      const queue: Array<E | null> = []
      let wake: (() => void) | undefined
      emit = (e) => { queue.push(e); wake?.() }
      signal.addEventListener('abort', () => { stopped = true; wake?.() })
      while (!signal.aborted) {
        const e = queue.shift()
        if (e === null) return
        if (e != null) { yield e; continue }
        await new Promise<void>(resolve => { wake = resolve })
      }
    }
    const ended: string[] = []
    const shared = new SharedStream<E>(source, e => e.kind === 'status', () => { ended.push('end') })
    const first = shared.join()
    const p1 = first.next()
    await until(() => emit != null)
    emit({ kind: 'status', n: 1 })
    expect((await p1).value).toEqual({ kind: 'status', n: 1 })
    emit({ kind: 'beat', n: 2 })
    expect((await first.next()).value).toEqual({ kind: 'beat', n: 2 })
    // a late reader starts from the newest snapshot
    const late = shared.join()
    expect((await late.next()).value).toEqual({ kind: 'status', n: 1 })
    // the late reader stops reading while 100 events pass; the first reads them all
    for (let i = 3; i < 103; i++) emit({ kind: i === 102 ? 'status' : 'beat', n: i })
    for (let i = 3; i < 103; i++) expect((await first.next()).value?.n).toBe(i)
    emit(null)
    expect((await first.next()).done).toBe(true)
    const rest: E[] = []
    for await (const e of late) rest.push(e)
    expect(rest.length).toBeLessThanOrEqual(66)
    expect(rest.at(-1)).toEqual({ kind: 'status', n: 102 })
    expect(ended).toEqual(['end'])
    // the last reader leaving stops the source
    const again = new SharedStream<E>(source, e => e.kind === 'status', () => {})
    const only = again.join()
    const next = only.next()
    await until(() => !stopped && emit != null)
    emit({ kind: 'status', n: 1 })
    await next
    await only.return(undefined)
    await until(() => stopped)
  })
})
