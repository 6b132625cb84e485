/**
 * What version 2 of the task protocol (`/ioa/task/2.0.0`) adds to the wire
 * of wire.ts (spec/collab-tasks.md section 14): the unsigned `trace` field
 * of `submit` and `resubscribe`, and delta events (only what changed since
 * the previous event of the stream), made by the executor and applied by
 * the requester to rebuild the full snapshot.
 */
import { InvalidEnvelopeError, InvalidTraceError } from '../errors.js'
import { checkSubmit, isMap, parseTaskRef } from './wire.js'
import { isTaskState } from './model.js'
import type { CheckEnvelopeOptions, CheckedEnvelope } from '../auth/envelope.js'
import type { TaskAuth, TaskError, TaskSnapshot, TaskState } from './model.js'
import type { Did } from '@ioa/interconnect'

/** The task protocol's version 2 (version 1 is `TASK_PROTOCOL`, still served) */
export const TASK_PROTOCOL_V2 = '/ioa/task/2.0.0'

/** Longest `traceparent` accepted (version `00` has 55 characters; later versions may add fields) */
export const MAX_TRACEPARENT = 256

/** Longest `tracestate` accepted (W3C trace context: 32 members of at most 256 characters, bounded here) */
export const MAX_TRACESTATE = 512

/** W3C trace context of a request: unsigned, outside the envelope, strippable */
export interface TraceContext {
  /** `version-traceid-parentid-flags`, e.g. `00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01` */
  readonly traceparent: string
  readonly tracestate?: string
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(-.*)?$/
const TRACESTATE = /^[\x20-\x7e]+$/

/** Whether `v` is a traceparent of the W3C form (spec 14.4): version 00 exactly, a later one with optional fields after */
function isTraceparent (v: string): boolean {
  const m = TRACEPARENT.exec(v)
  if (m == null || m[1] === 'ff' || /^0+$/.test(m[2]) || /^0+$/.test(m[3])) return false
  return m[1] === '00' ? m[4] === undefined : (m[4] === undefined || m[4].startsWith('-'))
}

/**
 * Read a `trace` field (spec 14.4): `InvalidTraceError` when it breaks the
 * field's shape or bounds (not a map, other keys, not text, too long);
 * `undefined` when it keeps them but its `traceparent` is not a valid W3C
 * traceparent (the trace is ignored, as W3C trace context says); a
 * `tracestate` that is not printable ASCII is dropped
 */
export function readTrace (raw: unknown): TraceContext | undefined {
  if (!isMap(raw)) throw new InvalidTraceError('trace must be a map { traceparent, tracestate? }')
  const { traceparent, tracestate, ...rest } = raw
  if (Object.keys(rest).length > 0) throw new InvalidTraceError(`Unknown trace fields: ${Object.keys(rest).slice(0, 5).join(', ')}`)
  if (typeof traceparent !== 'string' || traceparent.length === 0 || traceparent.length > MAX_TRACEPARENT) {
    throw new InvalidTraceError(`traceparent must be text of 1-${MAX_TRACEPARENT} characters`)
  }
  if (tracestate !== undefined && (typeof tracestate !== 'string' || tracestate.length > MAX_TRACESTATE)) {
    throw new InvalidTraceError(`tracestate must be text of at most ${MAX_TRACESTATE} characters`)
  }
  if (!isTraceparent(traceparent)) return undefined
  return typeof tracestate === 'string' && TRACESTATE.test(tracestate) ? { traceparent, tracestate } : { traceparent }
}

/** A trace a caller gives (submit options): as `readTrace`, and `InvalidTraceError` for anything it would ignore or drop */
export function checkTrace (raw: unknown): TraceContext {
  const trace = readTrace(raw)
  if (trace == null) throw new InvalidTraceError('traceparent must be a W3C traceparent (version 00-fe, non-zero trace and parent ids, lower-case hex)')
  if (isMap(raw) && raw.tracestate !== undefined && trace.tracestate === undefined) throw new InvalidTraceError('tracestate must be 1-512 printable ASCII characters')
  return trace
}

/** A 2.0.0 `submit` request `{ envelope, body, trace? }`: as version 1's, plus its trace (`ignored`: there was one, not valid) */
export function checkSubmitV2 (payload: unknown, options: CheckEnvelopeOptions = {}): { checked: CheckedEnvelope, rawBody: unknown, trace?: TraceContext, ignored?: true } {
  if (!isMap(payload) || !('trace' in payload)) return checkSubmit(payload, options)
  const { trace, ...rest } = payload
  const read = readTrace(trace)
  return { ...checkSubmit(rest, options), ...(read != null ? { trace: read } : { ignored: true }) }
}

/** A 2.0.0 `resubscribe` request `{ agent, task, trace? }` */
export function parseResubscribeV2 (raw: unknown): { agent: Did, task: string, trace?: TraceContext } {
  if (!isMap(raw) || !('trace' in raw)) return parseTaskRef(raw)
  const { trace, ...rest } = raw
  const read = readTrace(trace)
  return { ...parseTaskRef(rest), ...(read != null ? { trace: read } : {}) }
}

/** The request without its `trace` field (what a gateway forwards unless it keeps traces, and what a 1.0.0 peer gets) */
export function withoutTrace (payload: unknown): unknown {
  if (!isMap(payload) || !('trace' in payload)) return payload
  const { trace: _trace, ...rest } = payload
  return rest
}

/** A 2.0.0 delta event: what changed since the previous event of the same stream (spec 14.2) */
export interface DeltaEvent {
  type: 'delta'
  id: string
  updatedAt: number
  state?: TaskState
  auth?: TaskAuth
  result?: unknown
  error?: TaskError
  /** Progress messages appended */
  messages?: unknown[]
  /** Oldest messages removed after appending (the executor keeps its newest ones) */
  dropped?: number
  /** Artifacts appended */
  artifacts?: unknown[]
}

/**
 * The delta from `prev` to `cur` (snapshots of one task; `prevCount` and
 * `curCount` are the messages ever added to it at each), or undefined when
 * the change cannot be written as one (then the full snapshot is sent)
 */
export function diffSnapshots (prev: TaskSnapshot, prevCount: number | undefined, cur: TaskSnapshot, curCount: number | undefined): DeltaEvent | undefined {
  if (prev.id !== cur.id || prev.deadline !== cur.deadline || prev.lease !== cur.lease || prevCount == null || curCount == null) return undefined
  const added = curCount - prevCount
  const dropped = prev.messages.length + added - cur.messages.length
  if (added < 0 || added > cur.messages.length || dropped < 0 || cur.artifacts.length < prev.artifacts.length) return undefined
  const d: DeltaEvent = { type: 'delta', id: cur.id, updatedAt: cur.updatedAt }
  if (cur.state !== prev.state) d.state = cur.state
  else if (cur.auth !== prev.auth) return undefined
  if (cur.auth != null && cur.auth !== prev.auth) d.auth = cur.auth
  if (cur.result !== undefined && prev.result === undefined) d.result = cur.result
  if (cur.error != null && prev.error == null) d.error = cur.error
  if (added > 0) d.messages = cur.messages.slice(cur.messages.length - added)
  if (dropped > 0) d.dropped = dropped
  if (cur.artifacts.length > prev.artifacts.length) d.artifacts = cur.artifacts.slice(prev.artifacts.length)
  return d
}

/** A delta event received on a 2.0.0 stream, checked for shape */
export function parseDelta (raw: Record<string, unknown>): DeltaEvent {
  const { id, updatedAt, state, auth, result, error, messages, dropped, artifacts } = raw
  const ok = typeof id === 'string' && typeof updatedAt === 'number' &&
    (state === undefined || isTaskState(state)) &&
    (auth === undefined || (isMap(auth) && typeof auth.root === 'string' && typeof auth.action === 'string')) &&
    (error === undefined || (isMap(error) && typeof error.code === 'string')) &&
    (messages === undefined || Array.isArray(messages)) &&
    (dropped === undefined || (typeof dropped === 'number' && Number.isSafeInteger(dropped) && dropped >= 0)) &&
    (artifacts === undefined || Array.isArray(artifacts))
  if (!ok) throw new InvalidEnvelopeError('Malformed task delta')
  const d: DeltaEvent = { type: 'delta', id, updatedAt }
  if (state !== undefined) d.state = state
  if (auth !== undefined) d.auth = auth as unknown as TaskAuth
  if ('result' in raw) d.result = result
  if (error !== undefined) d.error = error as unknown as TaskError
  if (messages !== undefined) d.messages = messages
  if (dropped !== undefined) d.dropped = dropped
  if (artifacts !== undefined) d.artifacts = artifacts
  return d
}

/** The snapshot `base` with `delta` applied (spec 14.2) */
export function applyDelta (base: TaskSnapshot, delta: DeltaEvent): TaskSnapshot {
  if (delta.id !== base.id) throw new InvalidEnvelopeError(`A delta of task ${delta.id} on the stream of task ${base.id}`)
  const next: TaskSnapshot = { ...base, updatedAt: delta.updatedAt }
  if (delta.state != null) {
    next.state = delta.state
    if (delta.state !== 'auth-required') delete next.auth
  }
  if (delta.auth != null) next.auth = delta.auth
  if ('result' in delta) next.result = delta.result
  if (delta.error != null) next.error = delta.error
  if (delta.messages != null || delta.dropped != null) {
    next.messages = [...base.messages, ...(delta.messages ?? [])].slice(delta.dropped ?? 0)
  }
  if (delta.artifacts != null) next.artifacts = [...base.artifacts, ...delta.artifacts]
  return next
}
