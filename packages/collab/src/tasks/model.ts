/**
 * The task model: A2A task states, the state machine between them, task
 * snapshots and their persistence (snapshots and idempotency keys) in a
 * datastore. The task protocol itself is in `task-service.ts`.
 * Spec: `spec/collab-tasks.md`, sections 5–6.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { Key } from 'interface-datastore'
import { sha256 } from 'multiformats/hashes/sha2'
import { toString as uint8ToString } from 'uint8arrays/to-string'
import { CollabError } from '../errors.js'
import { encodeRecord } from './store-codec.js'
import type { Did } from '@ioa/interconnect'
import type { Datastore } from 'interface-datastore'

export type TaskState =
  | 'submitted'
  | 'working'
  | 'input-required'
  | 'auth-required'
  | 'completed'
  | 'failed'
  | 'canceled'
  | 'rejected'

export const TASK_STATES: readonly TaskState[] = Object.freeze([
  'submitted', 'working', 'input-required', 'auth-required', 'completed', 'failed', 'canceled', 'rejected'
])

export const TERMINAL_STATES: ReadonlySet<TaskState> = new Set<TaskState>(['completed', 'failed', 'canceled', 'rejected'])

/**
 * Legal transitions: `TRANSITIONS[from]` lists the states a task may move to.
 * Terminal states have none. (Table in spec/collab-tasks.md, section 6.)
 */
export const TRANSITIONS: Readonly<Record<TaskState, readonly TaskState[]>> = Object.freeze({
  submitted: ['working', 'auth-required', 'rejected', 'canceled', 'failed'],
  working: ['input-required', 'auth-required', 'completed', 'failed', 'canceled'],
  'input-required': ['working', 'canceled', 'failed'],
  'auth-required': ['working', 'rejected', 'canceled', 'failed'],
  completed: [],
  failed: [],
  canceled: [],
  rejected: []
})

export function isTaskState (v: unknown): v is TaskState {
  return typeof v === 'string' && (TASK_STATES as readonly string[]).includes(v)
}

export function isTerminal (state: TaskState): boolean {
  return TERMINAL_STATES.has(state)
}

export function canTransition (from: TaskState, to: TaskState): boolean {
  return TRANSITIONS[from]?.includes(to) ?? false
}

/**
 * A transition the state machine does not allow (a local programming error;
 * never sent on the wire)
 */
export class InvalidTransitionError extends CollabError {
  static override name = 'InvalidTransitionError'
  static code = 'INVALID_TRANSITION'
  constructor (message = 'Invalid task state transition', options?: ErrorOptions) {
    super(InvalidTransitionError.code, message, options)
    this.name = InvalidTransitionError.name
  }
}

/**
 * A task exceeded one of its size or count limits (a local error of the
 * handler API; a task failed for this carries the code in `error.code`)
 */
export class TaskLimitError extends CollabError {
  static override name = 'TaskLimitError'
  static code = 'LIMIT_EXCEEDED'
  constructor (message = 'Task limit exceeded', options?: ErrorOptions) {
    super(TaskLimitError.code, message, options)
    this.name = TaskLimitError.name
  }
}

export interface TaskError {
  code: string
  message: string
}

/** Why a task waits in `auth-required` and what must be approved */
export interface TaskAuth {
  /** The principal whose approval is needed (root of the delegation chain) */
  root: Did
  /** CID string of the request body: the `action` of the approval record */
  action: string
  reason: string
}

export interface TaskSnapshot {
  id: string
  contextId: string
  skill: string
  state: TaskState
  /** Progress messages, oldest first (the newest `maxMessages` are kept) */
  messages: unknown[]
  artifacts: unknown[]
  /** The handler's return value, once completed */
  result?: unknown
  error?: TaskError
  /** ms since the epoch: the task fails with DEADLINE_EXCEEDED when still running then */
  deadline?: number
  /** The executor's heartbeat interval, in ms (lease renewal period) */
  lease?: number
  /** Set while the task is `auth-required` */
  auth?: TaskAuth
  createdAt: number
  updatedAt: number
}

export interface TaskLimits {
  /** Largest encoded request body (input and options), in bytes */
  maxBodyBytes: number
  /** Progress messages kept per task (older ones are dropped) */
  maxMessages: number
  /** Largest encoded progress message, in bytes */
  maxMessageBytes: number
  /** Artifacts per task */
  maxArtifacts: number
  /** Largest encoded artifact, in bytes */
  maxArtifactBytes: number
  /** Largest encoded result, in bytes */
  maxResultBytes: number
  /** Non-terminal tasks an executor holds at once @default 1_024 */
  maxActiveTasks: number
  /** Non-terminal tasks submitted by one peer (fair share, spec 11.1) @default 64 */
  maxActiveTasksPerPeer: number
  /** Non-terminal tasks of one caller agent, the envelope's `from` (fair share) @default 64 */
  maxActiveTasksPerCaller: number
  /** Non-terminal tasks submitted from one remote IPv4 address or IPv6 /64 (fair share) @default 256 */
  maxActiveTasksPerAddress: number
  /** Streams (submit/resubscribe) following one task at once */
  maxSubscribers: number
  /** Longest a task may run, in ms (caps every deadline) */
  maxTaskDuration: number
}

export const DEFAULT_TASK_LIMITS: Readonly<TaskLimits> = Object.freeze({
  maxBodyBytes: 262_144,
  maxMessages: 32,
  maxMessageBytes: 4_096,
  maxArtifacts: 8,
  maxArtifactBytes: 32_768,
  maxResultBytes: 262_144,
  maxActiveTasks: 1_024,
  maxActiveTasksPerPeer: 64,
  maxActiveTasksPerCaller: 64,
  maxActiveTasksPerAddress: 256,
  maxSubscribers: 32,
  maxTaskDuration: 3_600_000
})

/**
 * Copy a snapshot without `undefined` fields (DAG-CBOR has no `undefined`)
 */
export function cleanSnapshot (t: TaskSnapshot): TaskSnapshot {
  const from = t as unknown as Record<string, unknown>
  const out: Record<string, unknown> = {}
  // (keys, not entries: no pair array per field)
  for (const k of Object.keys(from)) {
    const v = from[k]
    if (v !== undefined) out[k] = v
  }
  out.messages = [...t.messages]
  out.artifacts = [...t.artifacts]
  return out as unknown as TaskSnapshot
}

/**
 * Move a snapshot to a new state (returns a new snapshot). Throws
 * `InvalidTransitionError` for a transition the state machine forbids.
 */
export function transition (task: TaskSnapshot, to: TaskState, patch: Partial<Pick<TaskSnapshot, 'error' | 'result' | 'auth'>> = {}, now = Date.now()): TaskSnapshot {
  if (!canTransition(task.state, to)) {
    throw new InvalidTransitionError(`Task ${task.id}: ${task.state} -> ${to} is not allowed`)
  }
  // one copy, without undefined fields (what cleanSnapshot makes), `auth` only while auth-required
  const keepAuth = to === 'auth-required'
  const from = task as unknown as Record<string, unknown>
  const next: Record<string, unknown> = {}
  for (const k of Object.keys(from)) {
    const v = from[k]
    if (v !== undefined && (keepAuth || k !== 'auth')) next[k] = v
  }
  next.state = to
  next.updatedAt = Math.max(now, task.updatedAt)
  next.messages = [...task.messages]
  next.artifacts = [...task.artifacts]
  if (patch.auth != null) next.auth = patch.auth
  if (patch.error != null) next.error = patch.error
  if (patch.result !== undefined) next.result = patch.result
  return next as unknown as TaskSnapshot
}

/** Everything the executor keeps about one task */
export interface TaskRecord {
  v: 1
  /** The executing agent */
  agent: Did
  /** The agent that submitted it (envelope `from`) */
  owner: Did
  /** The libp2p peer it was submitted from; control requests must come from it */
  peer: string
  /** CID string of the request body */
  body: string
  /** Root principal of the delegation chain */
  root: Did
  idempotencyKey?: string
  snapshot: TaskSnapshot
}

const MAX_RECORD_BYTES = 2_097_152

function agentSegment (did: Did): string {
  // did:key:z6Mk… -> z6Mk… (base58btc, safe in a key)
  const seg = did.startsWith('did:key:') ? did.slice('did:key:'.length) : did
  if (!/^[A-Za-z0-9]{1,128}$/.test(seg)) throw new InvalidTransitionError('Bad agent id for a task key')
  return seg
}

const utf8 = new TextEncoder()

function taskSegment (id: string): string {
  // task ids may contain ':' which interface-datastore reads as a type marker
  return uint8ToString(utf8.encode(id), 'base64url')
}

/**
 * Task snapshots and idempotency keys in a datastore:
 *
 * - `/ioa/tasks/<agent>/<base64url(task id)>` → DAG-CBOR `TaskRecord`
 * - `/ioa/task-keys/<agent>/<hex sha256(owner "\n" key)>` → DAG-CBOR `{ task }`
 *
 * `<agent>` is the base58btc part of the executing agent's `did:key`.
 */
export class TaskStore {
  private readonly ds: Datastore
  private readonly prefix: string

  constructor (datastore: Datastore, prefix = '/ioa') {
    this.ds = datastore
    this.prefix = prefix
  }

  /** Keys of recently used tasks and idempotency keys (a task is read and written a few times in a row) */
  private readonly keys = new Map<string, Key>()

  private remembered (id: string, make: () => Key): Key {
    let k = this.keys.get(id)
    if (k == null) {
      k = make()
      if (this.keys.size >= 256) this.keys.delete(this.keys.keys().next().value as string)
      this.keys.set(id, k)
    }
    return k
  }

  private taskKey (agent: Did, id: string): Key {
    return this.remembered(`t\n${agent}\n${id}`, () => new Key(`${this.prefix}/tasks/${agentSegment(agent)}/${taskSegment(id)}`))
  }

  private async idemKey (agent: Did, owner: Did, key: string): Promise<Key> {
    const id = `i\n${agent}\n${owner}\n${key}`
    const known = this.keys.get(id)
    if (known != null) return known
    const digest = await sha256.digest(utf8.encode(`${owner}\n${key}`))
    return this.remembered(id, () => new Key(`${this.prefix}/task-keys/${agentSegment(agent)}/${uint8ToString(digest.digest, 'base16')}`))
  }

  async put (record: TaskRecord, options?: { signal?: AbortSignal }): Promise<void> {
    // (the record's fixed fields are encoded once, its handler values are not encoded again)
    await this.ds.put(this.taskKey(record.agent, record.snapshot.id), encodeRecord(record), options)
  }

  async get (agent: Did, id: string, options?: { signal?: AbortSignal }): Promise<TaskRecord | undefined> {
    const key = this.taskKey(agent, id)
    // the common case (a new task) without a NotFoundError
    if (!await this.ds.has(key, options)) return undefined
    let bytes: Uint8Array
    try {
      bytes = await this.ds.get(key, options)
    } catch (err: any) {
      if (err?.name === 'NotFoundError' || err?.code === 'ERR_NOT_FOUND') return undefined
      throw err
    }
    return decodeRecord(bytes)
  }

  async delete (agent: Did, id: string, options?: { signal?: AbortSignal }): Promise<void> {
    await this.ds.delete(this.taskKey(agent, id), options)
  }

  async getIdempotent (agent: Did, owner: Did, key: string, options?: { signal?: AbortSignal }): Promise<string | undefined> {
    try {
      const k = await this.idemKey(agent, owner, key)
      if (!await this.ds.has(k, options)) return undefined
      const bytes = await this.ds.get(k, options)
      const v = dagCbor.decode<{ task?: unknown }>(bytes)
      return typeof v?.task === 'string' ? v.task : undefined
    } catch (err: any) {
      if (err?.name === 'NotFoundError' || err?.code === 'ERR_NOT_FOUND') return undefined
      throw err
    }
  }

  async putIdempotent (agent: Did, owner: Did, key: string, task: string, options?: { signal?: AbortSignal }): Promise<void> {
    await this.ds.put(await this.idemKey(agent, owner, key), dagCbor.encode({ task }), options)
  }

  async deleteIdempotent (agent: Did, owner: Did, key: string, options?: { signal?: AbortSignal }): Promise<void> {
    await this.ds.delete(await this.idemKey(agent, owner, key), options)
  }

  /** Every stored task record (all agents) */
  async * all (options?: { signal?: AbortSignal }): AsyncGenerator<TaskRecord> {
    for await (const { value } of this.ds.query({ prefix: `${this.prefix}/tasks/` }, options)) {
      const r = decodeRecord(value)
      if (r != null) yield r
    }
  }
}

function decodeRecord (bytes: Uint8Array): TaskRecord | undefined {
  if (bytes.byteLength > MAX_RECORD_BYTES) return undefined
  try {
    const r = dagCbor.decode<TaskRecord>(bytes)
    if (r?.v !== 1 || r.snapshot == null || !isTaskState(r.snapshot.state) || typeof r.agent !== 'string') return undefined
    return r
  } catch {
    // not DAG-CBOR: a corrupt record reads as absent (the caller decides)
    return undefined
  }
}
