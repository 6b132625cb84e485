/**
 * The stored task record encoded without a second pass over what did not
 * change: the same bytes as the generic DAG-CBOR encoder in every state, for
 * every kind of field, and the record read back the same.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { MemoryDatastore } from 'datastore-core'
import { describe, expect, it } from 'vitest'
import { TaskStore, transition } from '../src/tasks/model.js'
import { encodeRecord, encodeStatusEvent } from '../src/tasks/store-codec.js'
import { wireValue } from '../src/tasks/values.js'
import { CollabError } from '../src/errors.js'
import type { TaskRecord, TaskSnapshot } from '../src/tasks/model.js'

const agent = 'did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK'
const owner = 'did:key:z6MkpTHR8VNsBxYAAWHut2Geadd9jSwuBV8xRoAnwWsdvktH'

function snapshot (patch: Partial<TaskSnapshot> = {}): TaskSnapshot {
  const now = Date.now()
  return { id: 'task:1', contextId: 'ctx', skill: 'bench.echo', state: 'submitted', messages: [], artifacts: [], deadline: now + 3_600_000, lease: 1_000, createdAt: now, updatedAt: now, ...patch }
}

function record (patch: Partial<TaskRecord> = {}): TaskRecord {
  return { v: 1, agent, owner, peer: '12D3KooWGRUVh2upu7WQLXHmQ2fKsmxvFjMPLR8rwfCi3TozvnWh', body: 'bafyreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy', root: owner, snapshot: snapshot(), ...patch }
}

/** the generic encoding the store wrote before */
function generic (r: TaskRecord): Uint8Array {
  const clean: Record<string, unknown> = { ...r, snapshot: Object.fromEntries(Object.entries(r.snapshot).filter(([, v]) => v !== undefined)) }
  if (clean.idempotencyKey === undefined) delete clean.idempotencyKey
  return dagCbor.encode(clean)
}

const value = (v: unknown): unknown => wireValue(v, 'Result', m => new CollabError('X', m)).value

describe('stored task record', () => {
  it('has the bytes of the generic encoder in every state and with every kind of field', () => {
    const r = record({ idempotencyKey: 'kéy-😀' })
    const states: TaskSnapshot[] = [r.snapshot]
    states.push(transition(states[0], 'auth-required', { auth: { root: owner, action: r.body, reason: 'needs approval' } }))
    states.push(transition(states[1], 'working'))
    states.push({ ...states[2], messages: [value({ text: 'half' }), 'plain', 7, null, value([1.5, -3, true])], artifacts: [value({ uri: 'x', bytes: new Uint8Array([1, 2, 3]) })] })
    states.push(transition(states[3], 'completed', { result: value({ n: 1, text: 'x'.repeat(300), list: [0, 24, 256, 65_536, 4_294_967_296, Number.MAX_SAFE_INTEGER, -1, 0.5] }) }))
    states.push(transition(states[2], 'failed', { error: { code: 'HANDLER_ERROR', message: 'ünïcode' } }))
    states.push({ ...states[0], result: 'a string result', deadline: undefined })
    states.push({ ...states[0], result: { not: 'from wireValue' } })
    states.push({ ...states[0], result: 42, updatedAt: 2 ** 40 })
    for (const s of states) {
      r.snapshot = s
      expect(encodeRecord(r)).toEqual(generic(r))
      const plain = { ...r, idempotencyKey: undefined }
      expect(encodeRecord(plain)).toEqual(generic(plain))
    }
  })

  it('writes the fixed fields again when they change, and a field it does not know through the generic encoder', () => {
    const r = record()
    expect(encodeRecord(r)).toEqual(generic(r))
    r.peer = '12D3KooWAnotherPeer'
    r.idempotencyKey = 'k'
    expect(encodeRecord(r)).toEqual(generic(r))
    const odd = { ...record(), extra: 1 } as unknown as TaskRecord
    expect(encodeRecord(odd)).toEqual(dagCbor.encode(odd))
    const oddSnapshot = record({ snapshot: { ...snapshot(), note: 'x' } as unknown as TaskSnapshot })
    expect(encodeRecord(oddSnapshot)).toEqual(generic(oddSnapshot))
    expect(() => encodeRecord(record({ snapshot: { ...snapshot(), messages: [undefined] } }))).toThrow()
  })

  it('writes a status event equal to the generic encoding, and the record after it from the same snapshot bytes', () => {
    const same = (b: Uint8Array | undefined): Uint8Array | undefined => b != null ? Uint8Array.from(b) : b
    const r = record({ idempotencyKey: 'k' })
    r.snapshot = transition(transition(r.snapshot, 'working'), 'completed', { result: value({ n: 3, text: 'ü'.repeat(40) }) })
    const event = encodeStatusEvent(r.snapshot, r)
    expect(same(event)).toEqual(same(dagCbor.encode({ type: 'status', task: r.snapshot })))
    // the record is written from the event's bytes: poison them to see that they are the ones copied
    const bytes = event as Uint8Array
    const at = bytes.indexOf(0x74, 6) // somewhere inside the snapshot
    const saved = bytes[at]
    bytes[at] = 0x00
    const fromEvent = encodeRecord(r)
    bytes[at] = saved
    expect(same(fromEvent)).not.toEqual(same(generic(r)))
    // used once: the next write (or one of another snapshot) encodes the snapshot itself
    expect(same(encodeRecord(r))).toEqual(same(generic(r)))
    encodeStatusEvent(r.snapshot, r)
    r.snapshot = { ...r.snapshot, updatedAt: r.snapshot.updatedAt + 1 }
    expect(same(encodeRecord(r))).toEqual(same(generic(r)))
    // a snapshot with a field the codec does not know is left to the generic encoder
    expect(encodeStatusEvent({ ...r.snapshot, note: 'x' } as unknown as TaskSnapshot)).toBeUndefined()
  })

  it('reads back what it stored', async () => {
    const store = new TaskStore(new MemoryDatastore())
    const r = record({ idempotencyKey: 'k-1' })
    r.snapshot = transition(transition(r.snapshot, 'working'), 'completed', { result: value({ n: 3 }) })
    await store.put(r)
    expect(await store.get(agent, 'task:1')).toEqual(dagCbor.decode(generic(r)))
  })
})
