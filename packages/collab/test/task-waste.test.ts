/**
 * What a finished task costs on the wire and in the store, between two nodes
 * over TCP on 127.0.0.1 (issue 15, step 2: waste that does not change the
 * wire): the requester sends no CANCEL for a task that ended (it reads the
 * executor's END), and a task that finishes at once is written to the store
 * twice (accepted, then its final state), not once per state; the stored
 * record is the one `get` and the stream report.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { MemoryDatastore } from 'datastore-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { collect, until } from '../../../test/util.js'
import { delegate } from '../src/auth/delegation.js'
import { TASK_PROTOCOL, TASK_PROTOCOL_V2, createTaskService } from '../src/tasks/service.js'
import { TaskStore } from '../src/tasks/model.js'
import { resolvable, startTaskPair } from './task-pair.js'
import type { Token } from '../src/auth/delegation.js'
import type { TaskEvent, TaskService } from '../src/tasks/service.js'
import type { SkillContext } from '../src/tasks/api.js'
import type { TaskSnapshot } from '../src/tasks/model.js'
import type { HostedAgent, Interconnect } from '@ioa/interconnect'
import type { TransportNode } from '@ioa/transport'
import type { Connection, Stream } from '@libp2p/interface'

/** What a libp2p stream sends */
type Chunk = Parameters<Stream['send']>[0]
import type { Key } from 'interface-datastore'

/** The messaging frame type of a CANCEL (spec/transport.md) */
const CANCEL = 7
const END = 5

/**
 * The messaging frames in `data`, each with its type and the offset where it
 * starts (a write may carry several frames: the transport sends the frames
 * of one turn as one write)
 */
function framesOf (data: Chunk): Array<{ type: number, start: number }> {
  const bytes = data instanceof Uint8Array ? data : data.subarray()
  const frames: Array<{ type: number, start: number }> = []
  let at = 0
  while (at < bytes.byteLength) {
    const start = at
    let length = 0
    for (let shift = 0; ; shift += 7) {
      const b = bytes[at++]
      length += (b & 0x7f) * 2 ** shift
      if (b < 0x80) break
    }
    frames.push({ type: dagCbor.decode<{ t: number }>(bytes.subarray(at, at + length)).t, start })
    at += length
  }
  return frames
}

/**
 * A datastore that counts the writes of each key, and holds the next write
 * of a task record while `hold()`'s gate is shut
 */
class CountingDatastore extends MemoryDatastore {
  readonly puts = new Map<string, number>()
  private gate?: Promise<void>
  /** A write is held at the gate */
  holding = false
  /** Hold the next task record write until the returned function is called */
  hold (): () => void {
    let open!: () => void
    this.gate = new Promise(resolve => { open = resolve })
    return open
  }

  override put (key: Key, value: Uint8Array): ReturnType<MemoryDatastore['put']> {
    this.puts.set(key.toString(), (this.puts.get(key.toString()) ?? 0) + 1)
    const gate = this.gate
    if (gate == null || !key.toString().includes('/tasks/')) return super.put(key, value)
    this.gate = undefined
    this.holding = true
    // a slow disk: the write ends when the gate opens
    return gate.then(() => super.put(key, value))
  }
}

function final (events: TaskEvent[]): TaskSnapshot {
  const s = events.filter((e): e is Extract<TaskEvent, { task: TaskSnapshot }> => e.type === 'status' || e.type === 'artifact')
  return s[s.length - 1].task
}

describe('a finished task over TCP: no CANCEL after END, one store write per turn', () => {
  const closers: Array<() => Promise<unknown>> = []
  let requester: TransportNode
  let icE: Interconnect
  let icR: Interconnect
  let worker: HostedAgent
  let caller: HostedAgent
  let token: Token
  let tsE: TaskService
  let tsR: TaskService
  const store = new CountingDatastore()
  /** Frame types the requester wrote on its task streams */
  const sent: number[] = []
  const contexts: SkillContext[] = []

  beforeAll(async () => {
    let executor: TransportNode
    ;({ executor, requester, icE, icR } = await startTaskPair(closers))
    worker = await icE.host({ key: 'worker', name: 'Worker', skills: [{ id: 'test.echo' }] })
    caller = await icR.host({ key: 'caller', name: 'Caller', skills: [{ id: 'test.none' }] })
    token = await delegate(caller.identity, { audience: caller.did, capabilities: [{ skill: 'test.*' }], expiresAt: Date.now() + 3_600_000 })
    tsE = createTaskService(icE, { leaseInterval: 1_000, datastore: store })
    tsR = createTaskService(icR, { leaseInterval: 1_000 })
    closers.push(async () => tsE.stop(), async () => tsR.stop())
    await tsE.serve(worker.did, 'test.echo', (input, ctx) => {
      contexts.push(ctx)
      return input
    })
    await resolvable(icR, worker.did)
    // every frame the requester writes on its task stream, by type; and the
    // executor's END frames a little late, as when the END is read in a later
    // chunk than the terminal state (a loaded machine, a real network)
    const wrap = (conn: Connection, onWrite: (data: Chunk, send: (data: Chunk) => boolean) => boolean): void => {
      for (const stream of conn.streams) {
        if ((stream.protocol !== TASK_PROTOCOL && stream.protocol !== TASK_PROTOCOL_V2) || watched.has(stream)) continue
        watched.add(stream)
        const send = stream.send.bind(stream)
        stream.send = (data) => onWrite(data, send)
      }
    }
    const watched = new WeakSet<object>()
    const watch = (): void => {
      for (const conn of requester.getConnections(executor.peerId)) {
        wrap(conn, (data, send) => {
          sent.push(...framesOf(data).map(f => f.type))
          return send(data)
        })
      }
      for (const conn of executor.getConnections(requester.peerId)) {
        wrap(conn, (data, send) => {
          const end = framesOf(data).find(f => f.type === END)
          if (end == null) return send(data)
          // the frames before the END now, the END (and what follows it) later
          const bytes = data instanceof Uint8Array ? data : data.subarray()
          if (end.start > 0) send(bytes.subarray(0, end.start))
          const late = bytes.subarray(end.start)
          setTimeout(() => {
            try {
              send(late)
            } catch {
              // the stream closed meanwhile (the nodes stop after the tests)
            }
          }, 20)
          return true
        })
      }
    }
    // the stream opens with the first task: watch it from the second on
    await tsR.submitAndWait(caller.identity, worker.did, { skill: 'test.echo', input: { n: -1 }, proofs: [token] })
    watch()
    expect(sent).toEqual([])
  })

  afterAll(async () => {
    for (const close of closers.reverse()) await close().catch(() => {})
  })

  it('reads every finished task to its END: no CANCEL frame, sequential or 16 at once', async () => {
    for (let n = 0; n < 30; n++) {
      const events = await collect(tsR.submit(caller.identity, worker.did, { skill: 'test.echo', input: { n }, proofs: [token] }))
      expect(final(events)).toMatchObject({ state: 'completed', result: { n } })
    }
    const many = await Promise.all(Array.from({ length: 16 }, async (_, n) => tsR.submitAndWait(caller.identity, worker.did, { skill: 'test.echo', input: { n }, proofs: [token] })))
    expect(many.map(t => t.result)).toEqual(Array.from({ length: 16 }, (_, n) => ({ n })))
    // 46 requests went out on the watched stream (and credit frames, if any), never a CANCEL
    expect(sent.filter(t => t !== CANCEL).length).toBeGreaterThanOrEqual(46)
    expect(sent.filter(t => t === CANCEL)).toEqual([])
  })

  it('writes a task that finishes at once twice: accepted, then its final record (what get and the stream show)', async () => {
    const taskId = `waste-${Date.now()}`
    const known = new Set(store.puts.keys())
    const events = await collect(tsR.submit(caller.identity, worker.did, { skill: 'test.echo', taskId, input: { text: 'x'.repeat(100) }, proofs: [token] }))
    const streamed = final(events)
    expect(streamed.state).toBe('completed')
    // on /ioa/task/2.0.0 a task that ends within the hold-back is answered with its final snapshot only
    expect(events.filter(e => e.type === 'status').map(e => (e as { task: TaskSnapshot }).task.state)).toEqual(['completed'])
    const stored = await until(async () => {
      const r = await new TaskStore(store).get(worker.did, taskId)
      return r?.snapshot.state === 'completed' ? r : undefined
    }, { what: 'the final record in the store' })
    const written = [...store.puts].filter(([k]) => !known.has(k) && k.includes('/tasks/'))
    expect(written).toHaveLength(1)
    expect(written[0][1]).toBe(2)
    expect(stored.snapshot).toEqual(streamed)
    expect(await tsR.get(worker.did, taskId)).toEqual(streamed)
  })

  it('aborts the signal a handler reads after its task ended, with the reason it ended', async () => {
    const before = contexts.length
    await tsR.submitAndWait(caller.identity, worker.did, { skill: 'test.echo', input: 1, proofs: [token] })
    const ctx = contexts[before]
    expect(ctx.signal.aborted).toBe(true)
    expect(ctx.signal.reason).toMatchObject({ code: 'TASK_ENDED' })
  })

  it('runs a task while another task of the same agent waits for its first store write', async () => {
    const open = store.hold()
    const slow = tsR.submitAndWait(caller.identity, worker.did, { skill: 'test.echo', input: 'slow', proofs: [token] })
    await until(() => store.holding ? true : undefined, { what: 'the held write' })
    try {
      // before: the agent's lock was held over the write, so this waited for it
      const fast = await tsR.submitAndWait(caller.identity, worker.did, { skill: 'test.echo', input: 'fast', proofs: [token] }, { signal: AbortSignal.timeout(5_000) })
      expect(fast.result).toBe('fast')
    } finally {
      open()
    }
    expect((await slow).result).toBe('slow')
  })
})
