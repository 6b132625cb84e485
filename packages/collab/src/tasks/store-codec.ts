/**
 * The DAG-CBOR encoding of a stored task record (spec/collab-tasks.md 9)
 * without encoding again what did not change: the record's fixed fields
 * (agent, owner, peer, body, root, idempotency key) are encoded once per
 * record and kept, and only the snapshot is written on each change, with
 * the handler values in it (result, messages, artifacts) spliced in from
 * the bytes `wireValue` made of them. The output is exactly
 * `dagCbor.encode` of the record without its `undefined` fields (a test
 * compares the two); a record or snapshot with a field this file does not
 * know is encoded by the generic encoder.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { encodeWith, isUint } from '../cbor-write.js'
import type { CborWriter } from '../cbor-write.js'
import { encodedValue } from './values.js'
import type { TaskRecord, TaskSnapshot } from './model.js'

/** The snapshot's keys in DAG-CBOR order (length first, then bytewise) */
const SNAPSHOT_KEYS = [
  'id', 'auth', 'error', 'lease', 'skill', 'state', 'result', 'deadline', 'messages',
  'artifacts', 'contextId', 'createdAt', 'updatedAt'
] as const
const KNOWN_SNAPSHOT_KEYS: ReadonlySet<string> = new Set(SNAPSHOT_KEYS)
/** Each snapshot key as CBOR text */
const SNAPSHOT_KEY_BYTES: Readonly<Record<string, Uint8Array>> = Object.fromEntries(SNAPSHOT_KEYS.map(k => [k, encodeWith(w => { w.text(k) })]))

/** The record's text fields before `snapshot`, in DAG-CBOR key order */
const RECORD_TEXTS = ['body', 'peer', 'root', 'agent', 'owner'] as const
const KNOWN_RECORD_KEYS: ReadonlySet<string> = new Set(['v', ...RECORD_TEXTS, 'snapshot', 'idempotencyKey'])

/** A record's encoding around its snapshot, and the fields it was made from */
interface Frame {
  fields: readonly unknown[]
  head: Uint8Array
  tail: Uint8Array
  /** The snapshot last sent in a stream's frame, and its bytes (a view into that frame's) */
  sent?: { snapshot: TaskSnapshot, bytes: Uint8Array }
}

/** Encoded fixed parts, by record (a live task's record object lives as long as the task) */
const frames = new WeakMap<TaskRecord, Frame>()

function fieldsOf (r: TaskRecord): unknown[] {
  return [r.v, r.body, r.peer, r.root, r.agent, r.owner, r.idempotencyKey]
}

function sameFields (a: readonly unknown[], b: readonly unknown[]): boolean {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false
  return true
}

/** The record's parts before and after the snapshot, or undefined when a field is not of the known kind */
function frameOf (r: TaskRecord): Frame | undefined {
  const fields = fieldsOf(r)
  const known = frames.get(r)
  if (known != null && sameFields(known.fields, fields)) return known
  const key = r.idempotencyKey
  if (r.v !== 1 || RECORD_TEXTS.some(k => typeof r[k] !== 'string') || (key !== undefined && typeof key !== 'string')) return undefined
  const head = encodeWith(w => {
    w.head(5, key !== undefined ? 8 : 7).text('v').head(0, r.v)
    for (const k of RECORD_TEXTS) w.text(k).text(r[k])
    w.text('snapshot')
  })
  const tail = key !== undefined ? encodeWith(w => { w.text('idempotencyKey').text(key) }) : new Uint8Array(0)
  const frame = { fields, head, tail }
  frames.set(r, frame)
  return frame
}

/** Write one value: scalars directly, a handler value from its bytes, anything else through the generic encoder */
function writeValue (out: CborWriter, v: unknown): void {
  if (typeof v === 'string') {
    out.text(v)
  } else if (isUint(v)) {
    out.head(0, v)
  } else {
    const bytes = typeof v === 'object' && v !== null ? encodedValue(v) : undefined
    out.raw(bytes ?? dagCbor.encode(v))
  }
}

/** Does the snapshot have only the fields this file knows (`defined` of them, none `undefined`)? */
function onlyKnown (s: TaskSnapshot, defined: number): boolean {
  const keys = Object.keys(s)
  // the common case: as many keys as known fields with a value
  if (keys.length === defined) return true
  const fields = s as unknown as Record<string, unknown>
  return keys.every(k => fields[k] === undefined || KNOWN_SNAPSHOT_KEYS.has(k))
}

function writeList (out: CborWriter, list: unknown): void {
  if (!Array.isArray(list)) {
    writeValue(out, list)
    return
  }
  out.head(4, list.length)
  for (const item of list) writeValue(out, item)
}

function field (out: CborWriter, key: string, v: unknown): void {
  if (v === undefined) return
  out.raw(SNAPSHOT_KEY_BYTES[key])
  writeValue(out, v)
}

/** Write the snapshot; false (and nothing written) when it has a field this file does not know */
function writeSnapshot (out: CborWriter, s: TaskSnapshot): boolean {
  const { id, auth, error, lease, skill, state, result, deadline, messages, artifacts, contextId, createdAt, updatedAt } = s
  const values = [id, auth, error, lease, skill, state, result, deadline, messages, artifacts, contextId, createdAt, updatedAt]
  let defined = 0
  for (const v of values) if (v !== undefined) defined++
  if (!onlyKnown(s, defined)) return false
  // (keys in the order of SNAPSHOT_KEYS)
  out.head(5, defined)
  field(out, 'id', id)
  field(out, 'auth', auth)
  field(out, 'error', error)
  field(out, 'lease', lease)
  field(out, 'skill', skill)
  field(out, 'state', state)
  field(out, 'result', result)
  field(out, 'deadline', deadline)
  if (messages !== undefined) writeList(out.raw(SNAPSHOT_KEY_BYTES.messages), messages)
  if (artifacts !== undefined) writeList(out.raw(SNAPSHOT_KEY_BYTES.artifacts), artifacts)
  field(out, 'contextId', contextId)
  field(out, 'createdAt', createdAt)
  field(out, 'updatedAt', updatedAt)
  return true
}

const STATUS_HEAD = encodeWith(w => { w.head(5, 2).text('task') })
const STATUS_TAIL = encodeWith(w => { w.text('type').text('status') })

/**
 * @internal The DAG-CBOR bytes of the event `{ type: 'status', task: s }`
 * (keys in DAG-CBOR order: `task`, `type`), written in one pass; undefined
 * when the snapshot has a field this file does not know. With `record`
 * (whose snapshot `s` is), the snapshot's part of the bytes is kept with the
 * record's encoded fixed fields, and the record's next store write copies
 * it instead of writing the snapshot again.
 */
export function encodeStatusEvent (s: TaskSnapshot, record?: TaskRecord): Uint8Array | undefined {
  let known = true
  let end = 0
  const bytes = encodeWith(w => {
    known = writeSnapshot(w.raw(STATUS_HEAD), s)
    end = w.length
    w.raw(STATUS_TAIL)
  })
  if (!known) return undefined
  const frame = record != null && record.snapshot === s ? frameOf(record) : undefined
  if (frame != null) frame.sent = { snapshot: s, bytes: bytes.subarray(STATUS_HEAD.byteLength, end) }
  return bytes
}

/** The generic encoding of a record without its `undefined` fields (what `encodeRecord` equals) */
function genericRecord (r: TaskRecord): Uint8Array {
  const clean: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(r)) if (v !== undefined) clean[k] = v
  const snapshot: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(r.snapshot)) if (v !== undefined) snapshot[k] = v
  clean.snapshot = snapshot
  return dagCbor.encode(clean)
}

/** @internal The DAG-CBOR bytes of a task record (its `undefined` fields left out) */
export function encodeRecord (r: TaskRecord): Uint8Array {
  const extra = Object.keys(r).some(k => !KNOWN_RECORD_KEYS.has(k) && (r as unknown as Record<string, unknown>)[k] !== undefined)
  const frame = extra ? undefined : frameOf(r)
  if (frame == null || r.snapshot == null || typeof r.snapshot !== 'object') return genericRecord(r)
  const snapshot = r.snapshot
  // the snapshot's bytes, when they went into a stream's frame already
  const sent = frame.sent?.snapshot === snapshot ? frame.sent.bytes : undefined
  frame.sent = undefined
  let known = true
  const bytes = encodeWith(w => {
    w.raw(frame.head)
    if (sent != null) w.raw(sent)
    else known = writeSnapshot(w, snapshot)
    w.raw(frame.tail)
  })
  return known ? bytes : genericRecord(r)
}
