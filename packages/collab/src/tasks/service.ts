/**
 * The task protocol `/ioa/task/1.0.0`: an agent asks another agent (found
 * through the interconnect) to run a skill, under a delegation chain, in a
 * signed envelope; the executor verifies, applies policy, runs the skill
 * handler and streams the task's states back, with heartbeats that renew the
 * requester's lease on the task. Spec: `spec/collab-tasks.md`.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { UnknownAgentError, assertCapability, isDid } from '@ioa/interconnect'
import { CanceledError, StreamClosedError, TooManyRequestsError } from '@ioa/transport'
import { peerIdFromString } from '@libp2p/peer-id'
import { MemoryDatastore } from 'datastore-core'
import { DEFAULT_CLOCK_SKEW, verifyChain } from '../auth/delegation.js'
import {
  ApprovalRequiredError, BudgetExceededError, CollabError, DeadlineExceededError, InvalidEnvelopeError,
  NoProviderError, UnauthorizedError, UnknownTaskError, fromRemote
} from '../errors.js'
import {
  DEFAULT_ENVELOPE_TTL, ENVELOPE_LIMITS, ReplayCache, TASK_ID_PATTERN, bodyCid as cidOfBody, bodyCidOfBytes, checkEnvelope, createEnvelope, verifyCheckedEnvelope
} from '../auth/envelope.js'
import { allOf, evaluatePolicy, verifyApproval } from '../auth/policy.js'
import {
  DEFAULT_TASK_LIMITS, TaskLimitError, TaskStore, cleanSnapshot, encodedSize, isTaskState, isTerminal, transition
} from './model.js'
import { TaskAdmission, addressKey } from './admission.js'
import { finishedOutcome, unansweredOutcome } from './feedback.js'
import { TaskRetention } from './retention.js'
import { SharedStream } from './shared-stream.js'
import type { Capability, Token, VerifiedChain } from '../auth/delegation.js'
import type { CheckedEnvelope, Envelope, ReplayCacheInit } from '../auth/envelope.js'
import type { Approval, Policy } from '../auth/policy.js'
import type { Retained, TaskRetentionInit } from './retention.js'
import type { TaskError, TaskLimits, TaskRecord, TaskSnapshot, TaskState } from './model.js'
import type { Did, Identity, Interconnect, Outcome } from '@ioa/interconnect'
import type { Logger } from '@libp2p/interface'
import type { Datastore } from 'interface-datastore'

/** The task protocol id */
export const TASK_PROTOCOL = '/ioa/task/1.0.0'

/** Most characters of an idempotency key or context id */
export const MAX_KEY_LENGTH = 128

/** Bounds of a lease interval (ms) accepted from an executor */
const MIN_LEASE = 50
const MAX_LEASE = 60_000
/** Longest lease interval of this executor: heartbeats must come well within the transport's handler idle limit (30 s) */
const MAX_OWN_LEASE = 20_000

/** Events of one subscriber queued before the oldest non-terminal ones are dropped */
const MAX_QUEUED_EVENTS = 64

/** Finished tasks kept in memory for fast `get` (the datastore has them all) */
const RECENT_TASKS = 256

/** Tasks whose executor peer the requester remembers (default of `maxRoutes`) */
const MAX_ROUTES = 4_096

/** Transport error codes after which a requester retries or resubscribes */
const TRANSIENT = new Set(['STREAM_CLOSED', 'DIAL_FAILED', 'NOT_STARTED', 'PROTOCOL_NOT_SUPPORTED', 'TIMEOUT'])

/**
 * The requester heard nothing from the executor (no status, artifact or
 * heartbeat) for 3 lease intervals and could not resubscribe: the executor is
 * presumed gone; the task may be given to another agent.
 */
export class LeaseLapsedError extends CollabError {
  static override name = 'LeaseLapsedError'
  static code = 'LEASE_LAPSED'
  readonly taskId?: string
  constructor (message = 'Task lease lapsed', options?: ErrorOptions & { taskId?: string }) {
    super(LeaseLapsedError.code, message, options)
    this.name = LeaseLapsedError.name
    this.taskId = options?.taskId
  }
}

// ---- public types ----------------------------------------------------

export type TaskEvent =
  /** The task's current snapshot: first event of every stream, then on every change */
  | { type: 'status', task: TaskSnapshot }
  /** A new artifact (also in `task.artifacts`) */
  | { type: 'artifact', task: TaskSnapshot, artifact: unknown }
  /** Lease renewal: the executor still holds the task */
  | { type: 'heartbeat', taskId: string, state: TaskState, lease: number, at: number }
  /** Requester side only, never on the wire: the lease lapsed; the stream ends */
  | { type: 'lapsed', taskId: string, state?: TaskState, lastSeen: number, error: TaskError }

export interface TaskRequest {
  /** The capability to invoke */
  skill: string
  input: unknown
  /** Delegation tokens, leaf (audience: the sender) first */
  proofs: Token[]
  /** ms since the epoch: the task fails with DEADLINE_EXCEEDED if still running then */
  deadline?: number
  /** Budget (abstract units) the executor may spend; comes out of the parent's */
  budget?: number
  /** A repeated submit with the same key (same sender, same executor) never runs the handler again */
  idempotencyKey?: string
  /** @default a random UUID */
  taskId?: string
  /** @default the task id */
  contextId?: string
  /** Validity of the signed envelope, in ms @default 60_000 */
  ttl?: number
}

/** Where a subtask's deadline and budget come from (a handler's context is one) */
export interface TaskScope {
  readonly deadline?: number
  /** Remaining budget; undefined = unlimited */
  readonly budget?: number
  /** Take `amount` out of the remaining budget; throws BudgetExceededError if it is not there */
  spend(amount: number): void
}

export interface SubmitOptions {
  signal?: AbortSignal
  /** The task this one is a subtask of: deadline ≤ parent's, budget taken from the parent's */
  parent?: TaskScope
}

export interface SkillContext extends TaskScope {
  /** The task as it was when the handler started */
  readonly task: TaskSnapshot
  /** The agent that sent the request */
  readonly caller: Did
  readonly chain: VerifiedChain
  /** The leaf capability that authorized the call */
  readonly capability: Capability
  /** Aborted on cancel, at the deadline and when the service stops */
  readonly signal: AbortSignal
  /** Append a progress message (streamed as a status event) */
  progress(message: unknown): void
  /** Add an artifact (streamed as an artifact event) */
  artifact(artifact: unknown): void
}

export type SkillHandler = (input: unknown, ctx: SkillContext) => unknown

export interface ServeOptions {
  /** Policy for this skill, applied after the service's own policy */
  policy?: Policy
}

export interface TaskServiceInit {
  /** Task snapshots and idempotency keys @default an in-memory datastore */
  datastore?: Datastore
  /** Call-time policy for every served skill */
  policy?: Policy
  /** Heartbeat interval of the executor; a requester reports a lapse after 3× this without news @default 1_000 */
  leaseInterval?: number
  /**
   * A non-terminal task that no stream (submit or resubscribe) follows for
   * this long is canceled with `ABANDONED`, in ms (spec 7.1)
   *
   * @default 3 × leaseInterval
   */
  abandonAfter?: number
  /** Replay cache (or its options) for received envelopes */
  replayCache?: ReplayCache | ReplayCacheInit
  /**
   * Longest envelope validity (exp - iat) accepted, in ms: a nonce is
   * remembered at most this long plus the clock skew
   *
   * @default 600_000
   */
  replayWindow?: number
  /** Revocation check of every token of a chain (a RevocationStore) */
  revocations?: { isRevoked(cid: string, issuers?: readonly Did[]): boolean | Promise<boolean> }
  /** Same as `revocations`, as a function (`issuers`: who may revoke the token) */
  isRevoked?: (cid: string, issuers: readonly Did[]) => boolean | Promise<boolean>
  /** Accepted root principals of delegation chains (default: any) */
  roots?: Did[]
  /** @default 30_000 */
  clockSkew?: number
  /** Longest delegation chain @default 8 */
  maxDepth?: number
  /** How long a task waits in auth-required before it is rejected, ms @default 600_000 */
  approvalTimeout?: number
  /** Timeout of unary task requests (get, cancel, approve), ms @default 10_000 */
  requestTimeout?: number
  limits?: Partial<TaskLimits>
  /** How long and how many finished tasks (and their idempotency keys) are kept (spec 9.1) */
  retention?: TaskRetentionInit
  /**
   * Requester side: tasks whose executor peer is remembered for `get`,
   * `cancel` and `resubscribe` (least recently used forgotten first; a
   * forgotten one is looked up again)
   *
   * @default 4_096
   */
  maxRoutes?: number
}

export interface TaskService {
  /** Run `handler` for requests to `agentDid` (hosted on this interconnect) for `skill` */
  serve(agentDid: Did, skill: string, handler: SkillHandler, options?: ServeOptions): Promise<void>
  /** Stop serving a skill (running tasks continue) */
  unserve(agentDid: Did, skill: string): void
  /**
   * Ask `to` to run a task. Streams its events until it reaches a terminal
   * state, or until its lease lapses (a final `lapsed` event). Stopping the
   * iteration stops listening; it does not cancel the task at once, but an
   * executor cancels a task that no stream follows for its `abandonAfter`
   * (3 leases by default, `ABANDONED`): `resubscribe` before then to keep it.
   * Concurrent submits with one idempotency key share one stream.
   */
  submit(from: Did | Identity, to: Did, request: TaskRequest, options?: SubmitOptions): AsyncGenerator<TaskEvent, void, undefined>
  /** `submit` until the end: the completed snapshot, or a typed error (its `task` holds the snapshot) */
  submitAndWait(from: Did | Identity, to: Did, request: TaskRequest, options?: SubmitOptions & { onEvent?: (event: TaskEvent) => void }): Promise<TaskSnapshot>
  get(to: Did, taskId: string, options?: { signal?: AbortSignal }): Promise<TaskSnapshot>
  cancel(to: Did, taskId: string, options?: { signal?: AbortSignal }): Promise<TaskSnapshot>
  /** Stream a task's events again, from its current state (after a disconnect) */
  resubscribe(to: Did, taskId: string, options?: { signal?: AbortSignal }): AsyncGenerator<TaskEvent, void, undefined>
  /** Hand an approval record to the executor: the task leaves auth-required and runs */
  approve(to: Did, taskId: string, approval: Approval, options?: { signal?: AbortSignal }): Promise<TaskSnapshot>
  /** Register the protocol (done by the first `serve`; requesters need not call it) */
  start(): Promise<void>
  /** Unregister the protocol; running tasks fail with INTERRUPTED */
  stop(): Promise<void>
}

// ---- helpers -----------------------------------------------------------

interface TaskBody {
  input: unknown
  contextId?: string
  deadline?: number
  budget?: number
  idempotencyKey?: string
}

function isMap (v: unknown): v is Record<string, unknown> {
  return v != null && typeof v === 'object' && !Array.isArray(v) && !(v instanceof Uint8Array)
}

function checkKey (v: unknown, what: string): string | undefined {
  if (v == null) return undefined
  if (typeof v !== 'string' || v.length === 0 || v.length > MAX_KEY_LENGTH) {
    throw new InvalidEnvelopeError(`${what} must be a string of 1-${MAX_KEY_LENGTH} characters`)
  }
  return v
}

function parseBody (raw: unknown, maxBytes: number): TaskBody {
  return checkBody(raw, maxBytes).body
}

/** `parseBody`, with the body's DAG-CBOR encoding when it is that of the parsed body */
function checkBody (raw: unknown, maxBytes: number): { body: TaskBody, bytes?: Uint8Array } {
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
 * for shape and limits (not verified), the body as received
 */
export function checkSubmit (payload: unknown): { checked: CheckedEnvelope, rawBody: unknown } {
  if (!isMap(payload)) throw new InvalidEnvelopeError('submit needs a map { envelope, body }')
  const { envelope, body, ...rest } = payload
  if (Object.keys(rest).length > 0) throw new InvalidEnvelopeError(`Unknown submit fields: ${Object.keys(rest).slice(0, 5).join(', ')}`)
  return { checked: checkEnvelope(envelope), rawBody: body }
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

function errorOf (err: unknown): TaskError {
  const e = err as { code?: unknown, message?: unknown } | undefined
  const code = typeof e?.code === 'string' && /^[A-Z][A-Z0-9_]{0,63}$/.test(e.code) ? e.code : 'HANDLER_ERROR'
  const message = typeof e?.message === 'string' ? e.message : String(err)
  return { code, message: message.slice(0, 1_024) }
}

/** A deep copy through DAG-CBOR (what the wire would do) */
function roundTrip<T> (value: T): T {
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

function eventState (e: TaskEvent): TaskState | undefined {
  return e.type === 'heartbeat' ? e.state : e.type === 'lapsed' ? e.state : e.task.state
}

async function sleep (ms: number, signal?: AbortSignal): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    if (signal?.aborted === true) { reject(signal.reason); return }
    const onAbort = (): void => { clearTimeout(t); reject(signal?.reason) }
    const t = setTimeout(() => { signal?.removeEventListener('abort', onAbort); resolve() }, ms)
    signal?.addEventListener('abort', onAbort, { once: true })
  })
}

/** Turn a finished task that did not complete into its typed error */
function taskFailure (task: TaskSnapshot): CollabError {
  const code = task.error?.code ?? (task.state === 'canceled' ? 'CANCELED' : 'STEP_FAILED')
  const message = task.error?.message ?? `Task ${task.id} ended ${task.state}`
  const mapped = fromRemote(Object.assign(new Error(message), { code, remote: true }))
  const err = mapped instanceof CollabError ? mapped : new CollabError(code, message)
  ;(err as CollabError & { task?: TaskSnapshot }).task = task
  return err
}

// ---- executor state ------------------------------------------------------

interface Served {
  handler: SkillHandler
  policy?: Policy
}

class Subscriber {
  private readonly queue: TaskEvent[] = []
  private wake?: () => void

  push (e: TaskEvent): void {
    this.queue.push(e)
    if (this.queue.length > MAX_QUEUED_EVENTS) {
      // a slow reader: drop the oldest non-terminal event (later statuses carry the full snapshot)
      const i = this.queue.findIndex(x => !(x.type === 'status' && isTerminal(x.task.state)))
      if (i >= 0) this.queue.splice(i, 1)
    }
    this.wake?.()
  }

  /** The next event, or undefined after `timeout` ms without one */
  async next (timeout: number, signal: AbortSignal): Promise<TaskEvent | undefined> {
    if (this.queue.length > 0) return this.queue.shift()
    signal.throwIfAborted()
    await new Promise<void>((resolve, reject) => {
      const done = (): void => {
        clearTimeout(t)
        signal.removeEventListener('abort', onAbort)
        this.wake = undefined
      }
      const onAbort = (): void => { done(); reject(signal.reason) }
      const t = setTimeout(() => { done(); resolve() }, timeout)
      this.wake = () => { done(); resolve() }
      signal.addEventListener('abort', onAbort, { once: true })
    })
    return this.queue.shift()
  }
}

interface Live {
  record: TaskRecord
  controller: AbortController
  subscribers: Set<Subscriber>
  deadlineTimer?: ReturnType<typeof setTimeout>
  approvalTimer?: ReturnType<typeof setTimeout>
  /** what the handler needs, kept from acceptance until it starts (auth-required) */
  pending?: { input: unknown, chain: VerifiedChain, capability: Capability, proofs: Token[], served: Served, budget?: number }
  writing: Promise<void>
  saveQueued: boolean
  /** Gives the task's fair-share slots back (once) */
  release: () => void
  /** Runs while no stream follows the task */
  abandonTimer?: ReturnType<typeof setTimeout>
  /** Until when the task's envelope could be replayed (kept at least that long) */
  keepUntil: number
}

class HandlerContext implements SkillContext {
  readonly task: TaskSnapshot
  readonly caller: Did
  readonly chain: VerifiedChain
  readonly capability: Capability
  readonly signal: AbortSignal
  readonly deadline?: number
  private remaining?: number
  private readonly onProgress: (m: unknown) => void
  private readonly onArtifact: (a: unknown) => void

  constructor (init: {
    task: TaskSnapshot, caller: Did, chain: VerifiedChain, capability: Capability, signal: AbortSignal,
    deadline?: number, budget?: number, progress(m: unknown): void, artifact(a: unknown): void
  }) {
    this.task = init.task
    this.caller = init.caller
    this.chain = init.chain
    this.capability = init.capability
    this.signal = init.signal
    this.deadline = init.deadline
    this.remaining = init.budget
    this.onProgress = init.progress
    this.onArtifact = init.artifact
  }

  get budget (): number | undefined {
    return this.remaining
  }

  spend (amount: number): void {
    if (typeof amount !== 'number' || !Number.isFinite(amount) || amount < 0) throw new RangeError('amount must be a non-negative number')
    if (this.remaining == null) return
    if (amount > this.remaining) throw new BudgetExceededError(`Spending ${amount} exceeds the remaining budget ${this.remaining}`)
    this.remaining -= amount
  }

  progress (message: unknown): void {
    this.onProgress(message)
  }

  artifact (artifact: unknown): void {
    this.onArtifact(artifact)
  }
}

// ---- the service ---------------------------------------------------------

class DefaultTaskService implements TaskService {
  private readonly ic: Interconnect
  private readonly store: TaskStore
  private readonly policy?: Policy
  private readonly lease: number
  private readonly replay: ReplayCache
  private readonly replayWindow: number
  private readonly isRevoked?: (cid: string, issuers: readonly Did[]) => boolean | Promise<boolean>
  private readonly roots?: Did[]
  private readonly clockSkew: number
  private readonly maxDepth?: number
  private readonly approvalTimeout: number
  private readonly requestTimeout: number
  private readonly limits: TaskLimits
  private readonly admission: TaskAdmission
  private readonly abandonAfter: number
  private readonly retention: TaskRetention
  private readonly maxRoutes: number
  private readonly log: Logger
  private readonly served = new Map<Did, Map<string, Served>>()
  private readonly live = new Map<string, Live>()
  private readonly recent = new Map<string, TaskRecord>()
  private readonly routes = new Map<string, string>()
  private readonly locks = new Map<string, Promise<unknown>>()
  /** Submits in flight by (sender, agent, idempotency key) */
  private readonly joins = new Map<string, SharedStream<TaskEvent>>()
  private starting?: Promise<void>
  private started = false

  constructor (ic: Interconnect, init: TaskServiceInit = {}) {
    this.ic = ic
    this.store = new TaskStore(init.datastore ?? new MemoryDatastore())
    this.policy = init.policy
    this.lease = init.leaseInterval ?? 1_000
    if (!Number.isFinite(this.lease) || this.lease < MIN_LEASE || this.lease > MAX_OWN_LEASE) {
      throw new RangeError(`leaseInterval must be ${MIN_LEASE}-${MAX_OWN_LEASE} ms`)
    }
    this.clockSkew = init.clockSkew ?? DEFAULT_CLOCK_SKEW
    this.replay = init.replayCache instanceof ReplayCache
      ? init.replayCache
      : new ReplayCache({ clockSkew: this.clockSkew, ...init.replayCache })
    const revs = init.revocations
    const fn = init.isRevoked
    if (revs != null || fn != null) {
      this.isRevoked = async (cid, issuers) => (fn != null && await fn(cid, issuers)) || (revs != null && await revs.isRevoked(cid, issuers))
    }
    this.replayWindow = init.replayWindow ?? ENVELOPE_LIMITS.maxTtl
    if (!Number.isFinite(this.replayWindow) || this.replayWindow <= 0 || this.replayWindow > ENVELOPE_LIMITS.maxTtl) {
      throw new RangeError(`replayWindow must be 1-${ENVELOPE_LIMITS.maxTtl} ms`)
    }
    this.roots = init.roots
    this.maxDepth = init.maxDepth
    this.approvalTimeout = init.approvalTimeout ?? 600_000
    this.requestTimeout = init.requestTimeout ?? 10_000
    this.limits = { ...DEFAULT_TASK_LIMITS, ...init.limits }
    this.admission = new TaskAdmission({
      maxActiveTasks: this.limits.maxActiveTasks,
      maxActiveTasksPerPeer: this.limits.maxActiveTasksPerPeer,
      maxActiveTasksPerCaller: this.limits.maxActiveTasksPerCaller,
      maxActiveTasksPerAddress: this.limits.maxActiveTasksPerAddress
    })
    this.abandonAfter = init.abandonAfter ?? 3 * this.lease
    if (!Number.isFinite(this.abandonAfter) || this.abandonAfter < this.lease) throw new RangeError('abandonAfter must be at least leaseInterval')
    this.log = ic.node.logger.forComponent('ioa:collab:tasks')
    this.maxRoutes = init.maxRoutes ?? MAX_ROUTES
    if (!Number.isSafeInteger(this.maxRoutes) || this.maxRoutes < 1) throw new RangeError('maxRoutes must be a positive integer')
    this.retention = new TaskRetention(init.retention ?? {}, async (e) => { await this.forget(e) }, (e, err: any) => {
      this.log.error('could not remove finished task %s of %s: %s', e.id, e.agent, err?.message ?? err)
    })
  }

  /** The retention entry of a task that is terminal now */
  private retained (r: TaskRecord, keepUntil: number, settled?: Promise<void>): Retained {
    return {
      agent: r.agent,
      id: r.snapshot.id,
      owner: r.owner,
      ...(r.idempotencyKey != null ? { idempotencyKey: r.idempotencyKey } : {}),
      finishedAt: r.snapshot.updatedAt,
      keepUntil,
      ...(settled != null ? { settled } : {})
    }
  }

  /** Until when an envelope accepted at `createdAt` could be replayed, when its expiry is not known */
  private replayBound (createdAt: number): number {
    return createdAt + this.replayWindow + 2 * this.clockSkew
  }

  /** Remove a finished task and its idempotency key (retention) */
  private async forget (e: Retained): Promise<void> {
    await e.settled
    await this.locked(e.agent, async () => {
      const key = DefaultTaskService.key(e.agent, e.id)
      if (this.live.has(key)) return
      this.recent.delete(key)
      await this.store.delete(e.agent, e.id)
      if (e.idempotencyKey != null && await this.store.getIdempotent(e.agent, e.owner, e.idempotencyKey) === e.id) {
        await this.store.deleteIdempotent(e.agent, e.owner, e.idempotencyKey)
      }
    })
  }

  // ---- lifecycle -----------------------------------------------------

  async start (): Promise<void> {
    this.starting ??= (async () => {
      // tasks left running by a previous process can never finish
      const finished: Retained[] = []
      for await (const r of this.store.all()) {
        if (!isTerminal(r.snapshot.state)) {
          r.snapshot = transition(r.snapshot, 'failed', { error: { code: 'INTERRUPTED', message: 'The executor restarted' } })
          await this.store.put(r)
        }
        finished.push(this.retained(r, this.replayBound(r.snapshot.createdAt)))
      }
      this.retention.load(finished)
      this.retention.start()
      const m = this.ic.node.services.messaging
      await m.handleStream(TASK_PROTOCOL, 'submit', (payload, ctx) => this.onSubmit(payload, ctx.peer.toString(), ctx.signal, addressKey(ctx.connection.remoteAddr)))
      await m.handleStream(TASK_PROTOCOL, 'resubscribe', (payload, ctx) => this.onResubscribe(payload, ctx.peer.toString(), ctx.signal))
      await m.handle(TASK_PROTOCOL, 'get', async (payload, ctx) => this.onGet(payload, ctx.peer.toString()))
      await m.handle(TASK_PROTOCOL, 'cancel', async (payload, ctx) => this.onCancel(payload, ctx.peer.toString()))
      await m.handle(TASK_PROTOCOL, 'approve', async (payload) => this.onApprove(payload))
      this.started = true
    })()
    await this.starting
  }

  async stop (): Promise<void> {
    if (this.starting == null) return
    await this.starting.catch(() => {})
    this.starting = undefined
    if (this.started) {
      this.started = false
      await this.ic.node.services.messaging.unhandle(TASK_PROTOCOL).catch(() => {})
    }
    const running = [...this.live.values()]
    for (const live of running) {
      this.finish(live, 'failed', { error: { code: 'INTERRUPTED', message: 'The executor stopped' } })
    }
    await Promise.all(running.map(async l => l.writing))
    await this.retention.stop()
  }

  async serve (agentDid: Did, skill: string, handler: SkillHandler, options: ServeOptions = {}): Promise<void> {
    if (!isDid(agentDid)) throw new UnknownAgentError(`Not an agent id: ${String(agentDid).slice(0, 80)}`)
    assertCapability(skill)
    if (typeof handler !== 'function') throw new TypeError('handler must be a function')
    let skills = this.served.get(agentDid)
    if (skills == null) {
      skills = new Map()
      this.served.set(agentDid, skills)
    }
    skills.set(skill, { handler, policy: options.policy })
    await this.start()
  }

  unserve (agentDid: Did, skill: string): void {
    this.served.get(agentDid)?.delete(skill)
  }

  // ---- executor: bookkeeping -----------------------------------------

  private static key (agent: Did, id: string): string {
    return `${agent}\n${id}`
  }

  private async locked<T> (key: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.locks.get(key) ?? Promise.resolve()
    const run = prev.catch(() => {}).then(fn)
    const tail = run.catch(() => {})
    this.locks.set(key, tail)
    try {
      return await run
    } finally {
      if (this.locks.get(key) === tail) this.locks.delete(key)
    }
  }

  private save (live: Live): void {
    if (live.saveQueued) return
    live.saveQueued = true
    live.writing = live.writing.then(async () => {
      live.saveQueued = false
      await this.store.put(live.record)
    }).catch(() => {
      // the datastore failed: the in-memory task goes on; the next change writes again
    })
  }

  private emit (live: Live, event: TaskEvent): void {
    for (const s of live.subscribers) s.push(event)
  }

  private update (live: Live, snapshot: TaskSnapshot): void {
    live.record.snapshot = snapshot
    this.save(live)
  }

  private setState (live: Live, to: TaskState, patch: Parameters<typeof transition>[2] = {}): void {
    this.update(live, transition(live.record.snapshot, to, patch))
    this.emit(live, { type: 'status', task: live.record.snapshot })
  }

  private attach (live: Live, sub: Subscriber): void {
    live.subscribers.add(sub)
    clearTimeout(live.abandonTimer)
    live.abandonTimer = undefined
  }

  /** A stream stopped following the task: with none left, it is abandoned unless one comes back in time */
  private detach (live: Live, sub: Subscriber): void {
    if (!live.subscribers.delete(sub) || live.subscribers.size > 0 || isTerminal(live.record.snapshot.state)) return
    clearTimeout(live.abandonTimer)
    live.abandonTimer = setTimeout(() => {
      if (live.subscribers.size > 0) return
      this.log('task %s of %s abandoned: no stream for %d ms', live.record.snapshot.id, live.record.owner, this.abandonAfter)
      this.finish(live, 'canceled', { error: { code: 'ABANDONED', message: `No stream followed the task for ${this.abandonAfter} ms` } })
    }, this.abandonAfter)
    live.abandonTimer.unref?.()
  }

  /** Move a task to a terminal state once; later calls do nothing */
  private finish (live: Live, to: TaskState, patch: Parameters<typeof transition>[2] = {}): void {
    if (isTerminal(live.record.snapshot.state)) return
    clearTimeout(live.deadlineTimer)
    clearTimeout(live.approvalTimer)
    clearTimeout(live.abandonTimer)
    live.release()
    live.pending = undefined
    this.setState(live, to, patch)
    if (!live.controller.signal.aborted) {
      const reason = patch.error?.code === DeadlineExceededError.code
        ? new DeadlineExceededError(patch.error.message)
        : to === 'canceled'
          ? new CanceledError('Task canceled')
          : new CollabError(patch.error?.code ?? 'TASK_ENDED', patch.error?.message ?? `Task ${to}`)
      live.controller.abort(reason)
    }
    const key = DefaultTaskService.key(live.record.agent, live.record.snapshot.id)
    this.live.delete(key)
    this.retention.add(this.retained(live.record, live.keepUntil, live.writing))
    this.recent.set(key, live.record)
    while (this.recent.size > RECENT_TASKS) this.recent.delete(this.recent.keys().next().value as string)
  }

  /** A task by id: live, recently finished, or from the datastore */
  private async load (agent: Did, id: string): Promise<Live | TaskRecord | undefined> {
    const key = DefaultTaskService.key(agent, id)
    const live = this.live.get(key)
    if (live != null) return live
    const recent = this.recent.get(key)
    if (recent != null) return recent
    const stored = await this.store.get(agent, id)
    if (stored != null && !isTerminal(stored.snapshot.state)) {
      // not live here, so no handler runs it any more
      stored.snapshot = transition(stored.snapshot, 'failed', { error: { code: 'INTERRUPTED', message: 'The executor lost the task' } })
      await this.store.put(stored)
      this.retention.add(this.retained(stored, this.replayBound(stored.snapshot.createdAt)))
    }
    return stored
  }

  // ---- executor: submit ------------------------------------------------

  /**
   * Verify a submit and create its task (or find the task it repeats). A new
   * task gets `sub` attached before anything runs, so its stream shows every
   * state from `submitted` on.
   */
  private async accept (payload: unknown, peer: string, sub?: Subscriber, address?: string): Promise<Live | TaskRecord> {
    const { checked, rawBody } = checkSubmit(payload)
    const envelope: Envelope = checked.envelope
    const { body, bytes: bodyBytes } = checkBody(rawBody, this.limits.maxBodyBytes)
    const p = envelope.payload
    const served = this.served.get(p.to)?.get(p.skill)
    if (served == null) throw new NoProviderError(`Agent ${p.to} does not serve ${p.skill} on this node`)

    const bodyOf = async (): Promise<string> => bodyBytes != null ? await bodyCidOfBytes(bodyBytes) : await cidOfBody(body)
    const { chain, capability, bodyCid } = await verifyCheckedEnvelope(checked, bodyOf, {
      self: p.to,
      replayCache: this.replay,
      peer,
      clockSkew: this.clockSkew,
      maxTtl: this.replayWindow,
      ...(this.maxDepth != null ? { maxDepth: this.maxDepth } : {}),
      ...(this.isRevoked != null ? { isRevoked: this.isRevoked } : {}),
      ...(this.roots != null ? { roots: this.roots } : {})
    })

    const created = await this.locked(p.to, async (): Promise<{ task: Live | TaskRecord, fresh: boolean }> => {
      const existing = await this.load(p.to, p.task)
      if (existing != null) {
        const owner = 'record' in existing ? existing.record.owner : existing.owner
        if (owner !== p.from) throw new InvalidEnvelopeError('Task id already in use')
        return { task: existing, fresh: false }
      }
      if (body.idempotencyKey != null) {
        const id = await this.store.getIdempotent(p.to, p.from, body.idempotencyKey)
        const earlier = id != null ? await this.load(p.to, id) : undefined
        if (earlier != null) return { task: earlier, fresh: false }
      }
      const now = Date.now()
      if (body.deadline != null && body.deadline <= now) throw new DeadlineExceededError('The deadline has already passed')
      let release: () => void
      try {
        release = this.admission.admit({ caller: p.from, ...(peer !== this.selfPeer() ? { peer } : {}), ...(address != null ? { address } : {}) })
      } catch (err: any) {
        this.log('refused task %s of %s from %s (%s): %s', p.task, p.from, peer, address ?? 'no address', err?.message)
        throw err
      }
      const deadline = Math.min(body.deadline ?? Infinity, now + this.limits.maxTaskDuration)
      const snapshot: TaskSnapshot = cleanSnapshot({
        id: p.task,
        contextId: body.contextId ?? p.task,
        skill: p.skill,
        state: 'submitted',
        messages: [],
        artifacts: [],
        deadline,
        lease: this.lease,
        createdAt: now,
        updatedAt: now
      })
      const record: TaskRecord = {
        v: 1,
        agent: p.to,
        owner: p.from,
        peer,
        body: bodyCid,
        root: chain.root,
        ...(body.idempotencyKey != null ? { idempotencyKey: body.idempotencyKey } : {}),
        snapshot
      }
      const live: Live = {
        record,
        controller: new AbortController(),
        subscribers: new Set(),
        pending: { input: body.input, chain, capability, proofs: p.proofs, served, budget: body.budget },
        writing: Promise.resolve(),
        saveQueued: false,
        release,
        keepUntil: p.exp + this.clockSkew
      }
      if (sub != null) {
        this.attach(live, sub)
        sub.push({ type: 'status', task: snapshot })
      }
      const key = DefaultTaskService.key(p.to, p.task)
      this.live.set(key, live)
      // the first write heads the task's chain of writes, so a change made
      // meanwhile (a cancel) is never overwritten by it
      const first = this.store.put(record)
      live.writing = first.catch(() => {})
      try {
        await first
        if (body.idempotencyKey != null) await this.store.putIdempotent(p.to, p.from, body.idempotencyKey, p.task)
      } catch (err) {
        this.live.delete(key)
        release()
        throw err
      }
      live.deadlineTimer = setTimeout(() => {
        this.finish(live, 'failed', { error: { code: DeadlineExceededError.code, message: `Deadline ${deadline} exceeded` } })
      }, Math.min(Math.max(0, deadline - now), 2_147_483_647))
      live.deadlineTimer.unref?.()
      return { task: live, fresh: true }
    })
    if (!created.fresh || !('record' in created.task)) return created.task

    // a new task: policy, then run or wait for approval
    const live = created.task
    const decision = await evaluatePolicy(allOf(...[this.policy, served.policy].filter((x): x is Policy => x != null)), {
      chain, capability, caller: p.from, skill: p.skill, input: body.input, now: Date.now()
    })
    if (isTerminal(live.record.snapshot.state)) return live
    if (decision.effect === 'deny') {
      this.finish(live, 'rejected', { error: { code: 'POLICY_DENIED', message: decision.reason } })
    } else if (decision.effect === 'approve') {
      this.setState(live, 'auth-required', { auth: { root: chain.root, action: bodyCid, reason: decision.reason } })
      live.approvalTimer = setTimeout(() => {
        this.finish(live, 'rejected', { error: { code: ApprovalRequiredError.code, message: 'No approval arrived in time' } })
      }, Math.min(this.approvalTimeout, 2_147_483_647))
      live.approvalTimer.unref?.()
    } else {
      this.run(live)
    }
    return live
  }

  private run (live: Live): void {
    const pending = live.pending
    if (pending == null) return
    live.pending = undefined
    this.setState(live, 'working')
    const snapshot = live.record.snapshot
    const limits = this.limits
    const active = (): boolean => !isTerminal(live.record.snapshot.state) && live.record.snapshot.state === 'working'
    const ctx = new HandlerContext({
      task: cleanSnapshot(snapshot),
      caller: live.record.owner,
      chain: pending.chain,
      capability: pending.capability,
      signal: live.controller.signal,
      deadline: snapshot.deadline,
      budget: pending.budget,
      progress: (message) => {
        if (!active()) return
        if (encodedSize(message, 'Progress message') > limits.maxMessageBytes) throw new TaskLimitError(`Progress message exceeds ${limits.maxMessageBytes} bytes`)
        const messages = [...live.record.snapshot.messages, roundTrip(message ?? null)].slice(-limits.maxMessages)
        this.update(live, cleanSnapshot({ ...live.record.snapshot, messages, updatedAt: Date.now() }))
        this.emit(live, { type: 'status', task: live.record.snapshot })
      },
      artifact: (artifact) => {
        if (!active()) return
        if (live.record.snapshot.artifacts.length >= limits.maxArtifacts) throw new TaskLimitError(`More than ${limits.maxArtifacts} artifacts`)
        if (encodedSize(artifact, 'Artifact') > limits.maxArtifactBytes) throw new TaskLimitError(`Artifact exceeds ${limits.maxArtifactBytes} bytes`)
        const copy = roundTrip(artifact ?? null)
        this.update(live, cleanSnapshot({ ...live.record.snapshot, artifacts: [...live.record.snapshot.artifacts, copy], updatedAt: Date.now() }))
        this.emit(live, { type: 'artifact', task: live.record.snapshot, artifact: copy })
      }
    })
    void (async () => {
      try {
        const result = await pending.served.handler(pending.input, ctx)
        if (encodedSize(result, 'Result') > limits.maxResultBytes) throw new TaskLimitError(`Result exceeds ${limits.maxResultBytes} bytes`)
        this.finish(live, 'completed', { result: roundTrip(result ?? null) })
      } catch (err) {
        this.finish(live, 'failed', { error: errorOf(err) })
      }
    })()
  }

  /**
   * Stream a task's events until it ends: from its current state, or, with
   * `attached` (a subscriber that has followed the task since it was created),
   * from the events queued there
   */
  private async * follow (task: Live | TaskRecord, signal: AbortSignal, attached?: Subscriber): AsyncGenerator<TaskEvent> {
    const live = 'record' in task ? task : undefined
    if (live == null || (attached == null && isTerminal(live.record.snapshot.state))) {
      yield { type: 'status', task: live != null ? live.record.snapshot : (task as TaskRecord).snapshot }
      return
    }
    let sub = attached
    if (sub == null) {
      if (live.subscribers.size >= this.limits.maxSubscribers) {
        throw new TooManyRequestsError(`More than ${this.limits.maxSubscribers} streams follow task ${live.record.snapshot.id}`)
      }
      sub = new Subscriber()
      this.attach(live, sub)
    }
    try {
      if (attached == null) {
        yield { type: 'status', task: live.record.snapshot }
        if (isTerminal(live.record.snapshot.state)) return
      }
      while (true) {
        const event = await sub.next(this.lease, signal)
        if (event == null) {
          const s = live.record.snapshot
          yield { type: 'heartbeat', taskId: s.id, state: s.state, lease: this.lease, at: Date.now() }
          continue
        }
        yield event
        if (event.type === 'status' && isTerminal(event.task.state)) return
      }
    } finally {
      this.detach(live, sub)
    }
  }

  private async * onSubmit (payload: unknown, peer: string, signal: AbortSignal, address?: string): AsyncGenerator<TaskEvent> {
    const sub = new Subscriber()
    const task = await this.accept(payload, peer, sub, address)
    const attached = 'record' in task && task.subscribers.has(sub)
    try {
      yield * this.follow(task, signal, attached ? sub : undefined)
    } finally {
      if ('record' in task) this.detach(task, sub)
    }
  }

  private async control (payload: unknown, peer: string): Promise<Live | TaskRecord> {
    const { agent, task } = parseTaskRef(payload)
    const found = await this.load(agent, task)
    if (found == null) throw new UnknownTaskError(`No task ${task} at ${agent}`)
    const owner = 'record' in found ? found.record.peer : found.peer
    if (owner !== peer) throw new UnauthorizedError('Only the peer that submitted a task may read or cancel it')
    return found
  }

  private async * onResubscribe (payload: unknown, peer: string, signal: AbortSignal): AsyncGenerator<TaskEvent> {
    const task = await this.control(payload, peer)
    yield * this.follow(task, signal)
  }

  private async onGet (payload: unknown, peer: string): Promise<TaskSnapshot> {
    const task = await this.control(payload, peer)
    return 'record' in task ? task.record.snapshot : task.snapshot
  }

  private async onCancel (payload: unknown, peer: string): Promise<TaskSnapshot> {
    const task = await this.control(payload, peer)
    if (!('record' in task)) return task.snapshot
    this.finish(task, 'canceled', { error: { code: 'CANCELED', message: 'Canceled by the requester' } })
    return task.record.snapshot
  }

  private async onApprove (payload: unknown): Promise<TaskSnapshot> {
    if (!isMap(payload)) throw new InvalidEnvelopeError('approve needs a map { agent, task, approval }')
    const { agent, task } = parseTaskRef(payload, true)
    const found = await this.load(agent, task)
    if (found == null) throw new UnknownTaskError(`No task ${task} at ${agent}`)
    if (!('record' in found)) return found.snapshot
    const live = found
    if (live.record.snapshot.state !== 'auth-required' || live.pending == null) return live.record.snapshot
    await verifyApproval(payload.approval, {
      root: live.record.root,
      task: live.record.snapshot.id,
      action: live.record.body,
      clockSkew: this.clockSkew
    })
    if (live.record.snapshot.state !== 'auth-required' || live.pending == null) return live.record.snapshot
    // time has passed since acceptance: the chain must still hold (expiry, revocation)
    const pending = live.pending
    try {
      await verifyChain(pending.proofs[0], pending.proofs.slice(1), {
        clockSkew: this.clockSkew,
        ...(this.maxDepth != null ? { maxDepth: this.maxDepth } : {}),
        ...(this.isRevoked != null ? { isRevoked: this.isRevoked } : {}),
        ...(this.roots != null ? { roots: this.roots } : {})
      })
    } catch (err) {
      this.finish(live, 'rejected', { error: errorOf(err) })
      throw err
    }
    if (live.record.snapshot.state !== 'auth-required') return live.record.snapshot
    clearTimeout(live.approvalTimer)
    this.run(live)
    return live.record.snapshot
  }

  // ---- requester -------------------------------------------------------

  private identityOf (from: Did | Identity): Identity {
    if (typeof from !== 'string') return from
    const agent = this.ic.agents().find(a => a.did === from)
    if (agent == null) throw new UnknownAgentError(`Sender ${from} is not hosted here`)
    return agent.identity
  }

  private isLocal (to: Did): boolean {
    return this.served.has(to) && this.ic.agents().some(a => a.did === to)
  }

  private remember (to: Did, taskId: string, peer: string): void {
    const key = DefaultTaskService.key(to, taskId)
    this.routes.delete(key)
    this.routes.set(key, peer)
    while (this.routes.size > this.maxRoutes) this.routes.delete(this.routes.keys().next().value as string)
  }

  /** Peers to try for an agent: 'local' when it is served here */
  private async peersOf (to: Did, taskId: string | undefined, signal?: AbortSignal, fresh = false): Promise<string[]> {
    if (this.isLocal(to)) return ['local']
    const known = taskId != null && !fresh ? this.routes.get(DefaultTaskService.key(to, taskId)) : undefined
    if (known != null) return [known]
    const route = await this.ic.resolve(to, { signal, ...(fresh ? { cache: false } : {}) })
    return route.peers
  }

  private selfPeer (): string {
    return this.ic.node.peerId.toString()
  }

  private openStream (peer: string, method: 'submit' | 'resubscribe', payload: unknown, signal: AbortSignal): AsyncGenerator<unknown> {
    if (peer === 'local') {
      const source = method === 'submit'
        ? this.onSubmit(roundTrip(payload), this.selfPeer(), signal)
        : this.onResubscribe(roundTrip(payload), this.selfPeer(), signal)
      return (async function * () {
        for await (const e of source) yield roundTrip(e)
      })()
    }
    return this.ic.node.services.messaging.stream(peerIdFromString(peer), TASK_PROTOCOL, method, payload, {
      signal,
      // our own lease watchdog decides; this only bounds a silent stream
      timeout: Math.max(30_000, 6 * MAX_LEASE)
    })
  }

  private async request<T> (peer: string, method: 'get' | 'cancel' | 'approve', payload: Record<string, unknown>, signal?: AbortSignal): Promise<T> {
    if (peer === 'local') {
      const local = roundTrip(payload)
      const self = this.selfPeer()
      const out = method === 'get' ? await this.onGet(local, self) : method === 'cancel' ? await this.onCancel(local, self) : await this.onApprove(local)
      return roundTrip(out) as T
    }
    return await this.ic.node.services.messaging.request<T>(peerIdFromString(peer), TASK_PROTOCOL, method, payload, {
      signal, timeout: this.requestTimeout
    })
  }

  /** A unary control request, trying the known/resolved peers in turn */
  private async callTask<T> (to: Did, taskId: string, method: 'get' | 'cancel' | 'approve', extra: Record<string, unknown>, signal?: AbortSignal): Promise<T> {
    if (!isDid(to)) throw new UnknownAgentError(`Not an agent id: ${String(to).slice(0, 80)}`)
    if (typeof taskId !== 'string' || !TASK_ID_PATTERN.test(taskId)) throw new InvalidEnvelopeError('Not a task id')
    let last: unknown
    for (const fresh of [false, true]) {
      const peers = await this.peersOf(to, taskId, signal, fresh)
      for (const peer of peers) {
        try {
          const out = await this.request<T>(peer, method, { agent: to, task: taskId, ...extra }, signal)
          if (method !== 'approve' && !isMap(out)) throw new InvalidEnvelopeError('Malformed task answer')
          this.remember(to, taskId, peer)
          return out
        } catch (err: any) {
          last = fromRemote(err)
          if (!TRANSIENT.has(err?.code)) throw last
        }
      }
    }
    throw last
  }

  async get (to: Did, taskId: string, options: { signal?: AbortSignal } = {}): Promise<TaskSnapshot> {
    return this.callTask<TaskSnapshot>(to, taskId, 'get', {}, options.signal)
  }

  async cancel (to: Did, taskId: string, options: { signal?: AbortSignal } = {}): Promise<TaskSnapshot> {
    return this.callTask<TaskSnapshot>(to, taskId, 'cancel', {}, options.signal)
  }

  async approve (to: Did, taskId: string, approval: Approval, options: { signal?: AbortSignal } = {}): Promise<TaskSnapshot> {
    return this.callTask<TaskSnapshot>(to, taskId, 'approve', { approval: { payload: approval.payload, sig: approval.sig } }, options.signal)
  }

  async * submit (from: Did | Identity, to: Did, request: TaskRequest, options: SubmitOptions = {}): AsyncGenerator<TaskEvent, void, undefined> {
    const identity = this.identityOf(from)
    if (!isDid(to)) throw new UnknownAgentError(`Not an agent id: ${String(to).slice(0, 80)}`)
    if (request == null || typeof request !== 'object') throw new InvalidEnvelopeError('request must be an object')
    assertCapability(request.skill)
    if (!Array.isArray(request.proofs)) throw new UnauthorizedError('request.proofs must list the delegation tokens')
    const taskId = request.taskId ?? globalThis.crypto.randomUUID()
    if (!TASK_ID_PATTERN.test(taskId)) throw new InvalidEnvelopeError('taskId must match [A-Za-z0-9._:-]{1,128}')
    let deadline = request.deadline
    let budget = request.budget
    const parent = options.parent
    if (parent?.deadline != null) {
      if (deadline == null) deadline = parent.deadline
      else if (deadline > parent.deadline) throw new DeadlineExceededError('A subtask deadline may not be later than its parent\'s')
    }
    if (parent?.budget != null) {
      budget = budget ?? parent.budget
      parent.spend(budget)
    }
    const body: Record<string, unknown> = { input: request.input ?? null }
    if (request.contextId != null) body.contextId = request.contextId
    if (deadline != null) body.deadline = deadline
    if (budget != null) body.budget = budget
    if (request.idempotencyKey != null) body.idempotencyKey = request.idempotencyKey
    parseBody(body, this.limits.maxBodyBytes)
    const ttl = Math.min(request.ttl ?? DEFAULT_ENVELOPE_TTL, ENVELOPE_LIMITS.maxTtl)

    const open = async (peer: string, signal: AbortSignal): Promise<AsyncGenerator<unknown>> => {
      const iat = Date.now()
      const exp = deadline != null && deadline > iat ? Math.min(iat + ttl, deadline) : iat + ttl
      const envelope = await createEnvelope(identity, {
        to, skill: request.skill, task: taskId, body, proofs: request.proofs, issuedAt: iat, expiresAt: exp
      })
      return this.openStream(peer, 'submit', { envelope, body }, signal)
    }
    if (request.idempotencyKey == null) {
      yield * this.watch(to, taskId, open, options.signal)
      return
    }
    // concurrent submits with one key follow one stream (checked and set before any await)
    const key = `${identity.did}\n${to}\n${request.idempotencyKey}`
    let shared = this.joins.get(key)
    if (shared == null) {
      const created = new SharedStream<TaskEvent>(
        signal => this.watch(to, taskId, open, signal),
        e => e.type === 'status' || e.type === 'artifact',
        () => { if (this.joins.get(key) === created) this.joins.delete(key) }
      )
      this.joins.set(key, created)
      shared = created
    }
    yield * shared.join(options.signal)
  }

  async * resubscribe (to: Did, taskId: string, options: { signal?: AbortSignal } = {}): AsyncGenerator<TaskEvent, void, undefined> {
    if (!isDid(to)) throw new UnknownAgentError(`Not an agent id: ${String(to).slice(0, 80)}`)
    if (typeof taskId !== 'string' || !TASK_ID_PATTERN.test(taskId)) throw new InvalidEnvelopeError('Not a task id')
    yield * this.watch(to, taskId, undefined, options.signal)
  }

  /**
   * Follow a task's event stream with a lease watchdog: a stream that fails
   * is resubscribed until 3 lease intervals pass without any event, then a
   * `lapsed` event ends the iteration.
   */
  private async * watch (to: Did, initialId: string, submit: ((peer: string, signal: AbortSignal) => Promise<AsyncGenerator<unknown>>) | undefined, outer?: AbortSignal): AsyncGenerator<TaskEvent, void, undefined> {
    let taskId = initialId
    let lease = this.lease
    let received = false
    /** when the last event arrived (reported in `lapsed`) */
    let lastSeen = Date.now()
    /** since when we have been waiting for the next event (time the consumer holds an event does not count) */
    let waitingSince = lastSeen
    let lastState: TaskState | undefined
    let peer: string | undefined
    let candidates = await this.peersOf(to, submit == null ? taskId : undefined, outer)
    let index = 0
    let resolvedFresh = false
    /** this stream saw the task before it ended (a resubscribe to a task already finished reports nothing) */
    let witnessed = submit != null

    while (true) {
      outer?.throwIfAborted()
      const target = peer ?? candidates[index]
      const controller = new AbortController()
      // the caller's signal aborts this attempt too (linked by hand: AbortSignal.any is costly per call)
      const onOuter = (): void => { controller.abort(outer?.reason) }
      outer?.addEventListener('abort', onOuter, { once: true })
      if (outer?.aborted === true) onOuter()
      const signal = controller.signal
      let lapsed = false
      let timer: ReturnType<typeof setTimeout> | undefined
      const arm = (): void => {
        clearTimeout(timer)
        const wait = received ? Math.max(1, waitingSince + 3 * lease - Date.now()) : Math.max(3 * lease, this.requestTimeout)
        timer = setTimeout(() => { lapsed = true; controller.abort(new LeaseLapsedError('No event within the lease', { taskId })) }, wait)
      }
      let source: AsyncGenerator<unknown> | undefined
      let failure: unknown
      try {
        arm()
        source = submit != null && !received
          ? await submit(target, signal)
          : this.openStream(target, 'resubscribe', { agent: to, task: taskId }, signal)
        while (true) {
          arm()
          const next = await source.next()
          clearTimeout(timer)
          if (next.done === true) {
            failure = new StreamClosedError('The task stream ended before the task did')
            break
          }
          const event = parseEvent(next.value)
          received = true
          peer = target
          lastSeen = waitingSince = Date.now()
          taskId = eventTaskId(event)
          lastState = eventState(event)
          const announced = event.type === 'heartbeat' ? event.lease : event.type === 'lapsed' ? undefined : event.task.lease
          if (typeof announced === 'number' && Number.isFinite(announced)) lease = Math.min(MAX_LEASE, Math.max(MIN_LEASE, announced))
          if (target !== 'local') this.remember(to, taskId, target)
          const finished = lastState != null && isTerminal(lastState) && event.type !== 'heartbeat'
          if (finished && witnessed && event.type !== 'lapsed') this.observe(to, taskId, finishedOutcome(event.task.state, event.task.error?.code))
          if (!finished) witnessed = true
          yield event
          waitingSince = Date.now()
          if (finished) return
        }
      } catch (err) {
        failure = err
      } finally {
        clearTimeout(timer)
        if (source != null) await source.return(undefined).catch(() => {})
        outer?.removeEventListener('abort', onOuter)
      }
      if (outer?.aborted === true) throw outer.reason
      const err = fromRemote(failure) as { code?: string } | undefined
      if (!lapsed && !TRANSIENT.has(err?.code ?? '') && !(failure instanceof StreamClosedError)) {
        this.observe(to, taskId, unansweredOutcome(err?.code))
        throw err
      }
      if (!received) {
        index++
        if (index >= candidates.length && !resolvedFresh && submit != null && candidates[0] !== 'local') {
          // the route may be stale: look the agent up again once
          resolvedFresh = true
          candidates = await this.peersOf(to, undefined, outer, true).catch(() => [])
          index = 0
        }
        if (index >= candidates.length) {
          this.observe(to, taskId, lapsed ? { ok: false } : unansweredOutcome(err?.code))
          if (lapsed) throw new LeaseLapsedError(`No answer from ${to} for task ${taskId}`, { taskId })
          throw err
        }
        continue
      }
      const left = waitingSince + 3 * lease - Date.now()
      if (lapsed || left <= 0) {
        this.observe(to, taskId, { ok: false })
        yield {
          type: 'lapsed',
          taskId,
          ...(lastState != null ? { state: lastState } : {}),
          lastSeen,
          error: { code: LeaseLapsedError.code, message: `No news of task ${taskId} for ${Date.now() - lastSeen} ms` }
        }
        return
      }
      // resubscribe after a short pause, within the lease
      await sleep(Math.min(Math.max(MIN_LEASE, lease / 2), left), outer)
    }
  }

  /** Feed what a task showed of a remote agent to the interconnect's ranking (spec/interconnect.md 7.1) */
  private observe (to: Did, taskId: string, outcome: Outcome | undefined): void {
    if (outcome == null) return
    if (!outcome.ok) this.log('task %s of %s counts as a failure of the agent for ranking', taskId, to)
    this.ic.observe(to, outcome)
  }

  async submitAndWait (from: Did | Identity, to: Did, request: TaskRequest, options: SubmitOptions & { onEvent?: (event: TaskEvent) => void } = {}): Promise<TaskSnapshot> {
    let last: TaskSnapshot | undefined
    for await (const event of this.submit(from, to, request, options)) {
      options.onEvent?.(event)
      if (event.type === 'lapsed') {
        throw new LeaseLapsedError(event.error.message, { taskId: event.taskId })
      }
      if (event.type === 'status' || event.type === 'artifact') last = event.task
    }
    if (last == null) throw new StreamClosedError('No task status received')
    if (last.state === 'completed') return last
    throw taskFailure(last)
  }
}

/**
 * Create the task service of an interconnect: the executor side (serve skills
 * on `/ioa/task/1.0.0`) and the requester side (submit tasks to agents found
 * through the interconnect). The protocol is registered by the first `serve`
 * or by `start()`.
 */
export function createTaskService (ic: Interconnect, init: TaskServiceInit = {}): TaskService {
  return new DefaultTaskService(ic, init)
}

export { taskFailure }
