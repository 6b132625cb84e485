/**
 * The wire of the task protocol `/ioa/task/1.0.0` (spec/collab-tasks.md):
 * its constants, and the codec and validation of task bodies, submit
 * requests, task references and task events. Used by the executor, the
 * requester and the gateway relay.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { isDid } from '@ioa/interconnect'
import { checkEnvelope, TASK_ID_PATTERN } from '../auth/envelope.js'
import { InvalidEnvelopeError } from '../errors.js'
import { isTaskState } from './model.js'
import { isMap } from '../shape.js'
import type { TaskEvent } from './api.js'
import type { CheckEnvelopeOptions, CheckedEnvelope } from '../auth/envelope.js'
import type { TaskError, TaskSnapshot, TaskState } from './model.js'
import type { Did } from '@ioa/interconnect'

/** The task protocol id */
export const TASK_PROTOCOL = '/ioa/task/1.0.0'

/** Most characters of an idempotency key or context id */
export const MAX_KEY_LENGTH = 128

/** Bounds of a lease interval (ms) accepted from an executor */
export const MIN_LEASE = 50
export const MAX_LEASE = 60_000

export { isMap }

export interface TaskBody {
  input: unknown
  contextId?: string
  deadline?: number
  budget?: number
  idempotencyKey?: string
}

function checkKey (v: unknown, what: string): string | undefined {
  if (v == null) return undefined
  if (typeof v !== 'string' || v.length === 0 || v.length > MAX_KEY_LENGTH) {
    throw new InvalidEnvelopeError(`${what} must be a string of 1-${MAX_KEY_LENGTH} characters`)
  }
  return v
}

/**
 * Check a task body's fields and size; with its DAG-CBOR encoding when that
 * is the encoding of the checked body (the same keys)
 */
export function checkBody (raw: unknown, maxBytes: number): { body: TaskBody, bytes?: Uint8Array } {
  if (!isMap(raw)) throw new InvalidEnvelopeError('Task body must be a map')
  const { input, contextId, deadline, budget, idempotencyKey, ...rest } = raw
  if (Object.keys(rest).length > 0) throw new InvalidEnvelopeError(`Unknown task body fields: ${Object.keys(rest).slice(0, 5).join(', ')}`)
  if (!('input' in raw)) throw new InvalidEnvelopeError('Task body needs input')
  let bytes: Uint8Array
  try {
    bytes = dagCbor.encode(raw)
  } catch {
    throw new InvalidEnvelopeError('Task body is not DAG-CBOR encodable')
  }
  const size = bytes.byteLength
  if (size > maxBytes) throw new InvalidEnvelopeError(`Task body exceeds ${maxBytes} bytes`)
  const body: TaskBody = { input }
  const ctx = checkKey(contextId, 'contextId')
  if (ctx != null) body.contextId = ctx
  const key = checkKey(idempotencyKey, 'idempotencyKey')
  if (key != null) body.idempotencyKey = key
  if (deadline != null) {
    if (typeof deadline !== 'number' || !Number.isSafeInteger(deadline) || deadline < 0) throw new InvalidEnvelopeError('deadline must be a non-negative integer')
    body.deadline = deadline
  }
  if (budget != null) {
    if (typeof budget !== 'number' || !Number.isFinite(budget) || budget < 0) throw new InvalidEnvelopeError('budget must be a non-negative number')
    body.budget = budget
  }
  // the same keys (none was null): the same values, so the same canonical encoding
  return Object.keys(body).length === Object.keys(raw).length ? { body, bytes } : { body }
}

/**
 * The parts of a `submit` request `{ envelope, body }`: the envelope checked
 * for shape and limits (not verified), the body as received; with
 * `unsigned`, a session-mode envelope without `sig` passes (spec 2.6)
 */
export function checkSubmit (payload: unknown, options: CheckEnvelopeOptions = {}): { checked: CheckedEnvelope, rawBody: unknown } {
  if (!isMap(payload)) throw new InvalidEnvelopeError('submit needs a map { envelope, body }')
  const { envelope, body, ...rest } = payload
  if (Object.keys(rest).length > 0) throw new InvalidEnvelopeError(`Unknown submit fields: ${Object.keys(rest).slice(0, 5).join(', ')}`)
  return { checked: checkEnvelope(envelope, options), rawBody: body }
}

/** The `{ agent, task }` of a resubscribe, get or cancel request (and approve's, with `withApproval`) */
export function parseTaskRef (raw: unknown, withApproval = false): { agent: Did, task: string } {
  if (!isMap(raw)) throw new InvalidEnvelopeError('Request must be a map')
  const { agent, task, ...rest } = raw
  const extra = Object.keys(rest).filter(k => !(withApproval && k === 'approval'))
  if (extra.length > 0) throw new InvalidEnvelopeError(`Unknown fields: ${extra.slice(0, 5).join(', ')}`)
  if (!isDid(agent)) throw new InvalidEnvelopeError('agent must be a did:key')
  if (typeof task !== 'string' || !TASK_ID_PATTERN.test(task)) throw new InvalidEnvelopeError('task must be a task id')
  return { agent, task }
}

export function errorOf (err: unknown): TaskError {
  const e = err as { code?: unknown, message?: unknown } | undefined
  const code = typeof e?.code === 'string' && /^[A-Z][A-Z0-9_]{0,63}$/.test(e.code) ? e.code : 'HANDLER_ERROR'
  const message = typeof e?.message === 'string' ? e.message : String(err)
  return { code, message: message.slice(0, 1_024) }
}

/** A deep copy through DAG-CBOR (what the wire would do) */
export function roundTrip<T> (value: T): T {
  return dagCbor.decode(dagCbor.encode(value)) as T
}

/** A task event received on a submit or resubscribe stream, checked for shape */
export function parseEvent (raw: unknown): TaskEvent {
  if (!isMap(raw)) throw new InvalidEnvelopeError('Malformed task event')
  const okTask = (t: unknown): t is TaskSnapshot => isMap(t) && typeof t.id === 'string' && isTaskState(t.state) &&
    Array.isArray(t.messages) && Array.isArray(t.artifacts)
  switch (raw.type) {
    case 'status':
      if (okTask(raw.task)) return { type: 'status', task: raw.task }
      break
    case 'artifact':
      if (okTask(raw.task)) return { type: 'artifact', task: raw.task, artifact: raw.artifact }
      break
    case 'heartbeat':
      if (typeof raw.taskId === 'string' && isTaskState(raw.state) && typeof raw.lease === 'number') {
        return { type: 'heartbeat', taskId: raw.taskId, state: raw.state, lease: raw.lease, at: typeof raw.at === 'number' ? raw.at : 0 }
      }
      break
    default:
      break
  }
  throw new InvalidEnvelopeError('Malformed task event')
}

export function eventTaskId (e: TaskEvent): string {
  return e.type === 'heartbeat' || e.type === 'lapsed' ? e.taskId : e.task.id
}

export function eventState (e: TaskEvent): TaskState | undefined {
  return e.type === 'heartbeat' ? e.state : e.type === 'lapsed' ? e.state : e.task.state
}
