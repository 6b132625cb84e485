/**
 * The public types of the task service (`createTaskService`): task events,
 * requests, the handler's context, the service's options and interface.
 */
import type { Capability, Token, VerifiedChain } from '../auth/delegation.js'
import type { ReplayCache, ReplayCacheInit } from '../auth/envelope.js'
import type { VerificationCache, VerificationCacheInit } from '../auth/verification-cache.js'
import type { Approval, Policy } from '../auth/policy.js'
import type { TaskError, TaskLimits, TaskSnapshot, TaskState } from './model.js'
import type { TaskRetentionInit } from './retention.js'
import type { TraceContext } from './wire-v2.js'
import type { Did, Identity, Interconnect } from '@ioa/interconnect'
import type { Messaging } from '@ioa/transport'
import type { SessionInit } from '../auth/session-registry.js'
import type { AuthMode, SessionClientInit } from '../auth/session-client.js'
import type { IoaTracer } from '../tracing.js'
import type { ToolCallOptions } from '../tool-span.js'
import type { ComponentLogger, PeerId } from '@libp2p/interface'
import type { Datastore } from 'interface-datastore'

export type TaskEvent =
  /** The task's current snapshot: first event of every stream, then on every change */
  | { type: 'status', task: TaskSnapshot }
  /** A new artifact (also in `task.artifacts`) */
  | { type: 'artifact', task: TaskSnapshot, artifact: unknown }
  /** Lease renewal: the executor still holds the task */
  | { type: 'heartbeat', taskId: string, state: TaskState, lease: number, at: number }
  /** Requester side only, never on the wire: the lease lapsed; the stream ends */
  | { type: 'lapsed', taskId: string, state?: TaskState, lastSeen: number, error: TaskError }

/** Who and what a served task is about, in every executor event */
export interface ExecutorTaskInfo {
  /** The executing agent */
  agent: Did
  skill: string
  taskId: string
  /** The agent that sent the request */
  caller: Did
  /** Root principal of the task's delegation chain */
  root: Did
  /** ms since the epoch */
  at: number
  /** The trace context the submit carried (protocol 2.0.0; absent when none) */
  trace?: TraceContext
}

/**
 * What the executor did with a request, as the requester sees it: a handler
 * started; the task ended (`task-completed`, or `task-failed` with its final
 * state and error, exactly as the requester's stream ends); or the request
 * was refused before any handler ran (`task-refused`: verification, policy,
 * approval, admission). Reported to `TaskServiceInit.onEvent`.
 */
export type ExecutorEvent =
  | ({ type: 'task-started' } & ExecutorTaskInfo)
  | ({ type: 'task-completed', duration: number } & ExecutorTaskInfo)
  | ({ type: 'task-failed', state: 'failed' | 'canceled', duration: number, error: TaskError } & ExecutorTaskInfo)
  | {
    type: 'task-refused'
    /** The error code the requester got (`POLICY_DENIED`, `ESCALATION`, `PRINCIPAL_MISMATCH`, …) */
    code: string
    message: string
    /** The submitting peer */
    peer: string
    /** The fields below are those the request named; absent when it could not be parsed */
    agent?: Did
    skill?: string
    taskId?: string
    caller?: Did
    at: number
  }

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
  /**
   * How the request is authenticated (spec 2.6): `session` (no per-request
   * signature; the agent's binding on the connection, made once) where the
   * executor serves it, else `envelope` (signed); `envelope` always signs.
   * A session-mode request refused with `ENVELOPE_REQUIRED` is sent again
   * signed, once.
   *
   * @default the service's `auth` (`session`)
   */
  auth?: AuthMode
  /** The task this one is a subtask of: deadline ≤ parent's, budget taken from the parent's */
  parent?: TaskScope
  /**
   * W3C trace context sent with the submit (unsigned, outside the envelope;
   * only to executors of protocol 2.0.0, and gateways strip it by default)
   */
  trace?: TraceContext
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
  /**
   * The trace context the handler's own submits continue (`ctx.call` and
   * the orchestrator's `RunOptions.trace` use it): the executor's
   * `invoke_agent` span when tracing is on, else the trace context of the
   * submit that created the task (protocol 2.0.0); read-only
   */
  readonly trace?: TraceContext
  /** Append a progress message (streamed as a status event) */
  progress(message: unknown): void
  /** Add an artifact (streamed as an artifact event) */
  artifact(artifact: unknown): void
  /**
   * Call another agent on behalf of this task and wait for its result: `to`
   * (or, when undefined, the best ranked other agent found for `skill`)
   * runs `skill` as a subtask, under a token the executing agent delegates
   * from the task's chain, narrowed to `skill` (and to `options.constraints`,
   * which must be as tight as the chain's), valid no longer than the chain or
   * the call. The subtask's deadline is the task's or the call's, whichever
   * is sooner; it gets a budget only from `options.budget`. Throws the subtask's typed error; a call stopped
   * by the task's end or `options.signal` cancels the subtask.
   */
  call(to: Did | undefined, skill: string, input: unknown, options?: CallOptions): Promise<unknown>
  /**
   * Run a tool call (an MCP server's tool, a function the model asked for)
   * as `fn`, inside an `execute_tool {name}` span that is a child of the
   * task's SERVER span (spec/management.md 3.2); returns or throws what `fn`
   * does. Without tracing `fn` just runs. `traceMcpClient(client, ctx)` makes
   * every `callTool` of an MCP client such a call. Throws `TypeError` for a
   * name that is not text of 1-256 characters.
   */
  tool<T>(name: string, fn: () => T | Promise<T>, options?: ToolCallOptions<T>): Promise<T>
}

export interface CallOptions {
  /** Constraints of the delegated capability @default those of the task's chain for the skill */
  constraints?: Record<string, unknown>
  /** Longest wait for the result, ms (the task's deadline, when nearer, wins) @default 60_000 */
  timeout?: number
  /** Budget handed to the subtask, taken out of the task's (`BudgetExceededError` when it is not there) @default none */
  budget?: number
  signal?: AbortSignal
}

export type SkillHandler = (input: unknown, ctx: SkillContext) => unknown

export interface ServeOptions {
  /** Policy for this skill, applied after the service's own policy */
  policy?: Policy
  /**
   * Requests for this skill must carry their own signature (envelope mode:
   * payments, anything audited); a session-mode request is refused with
   * `ENVELOPE_REQUIRED` (spec 2.6)
   *
   * @default false
   */
  requireEnvelope?: boolean
}

/**
 * The slice of a node and its interconnect the task service needs (as
 * libp2p services declare theirs); `createTaskService(ic)` takes it from an
 * interconnect
 */
export interface TaskServiceComponents {
  /** This node's peer id (a local submit's sender peer) */
  peerId: PeerId
  logger: ComponentLogger
  /** The node's framed messaging: serves and calls `/ioa/task/1.0.0` and `/ioa/task/2.0.0` */
  messaging: Pick<Messaging, 'handle' | 'handleStream' | 'unhandle' | 'request' | 'stream'>
  /**
   * The protocols a peer announced (identify), to choose 2.0.0 or 1.0.0 for
   * it; without it (or before identify) the requester tries 2.0.0 and falls
   * back to 1.0.0 when the peer does not serve it
   */
  protocolsOf?: (peer: PeerId) => Promise<readonly string[] | undefined>
  /** Hosted agents (senders, local executors), agent routes, the ranking feedback of finished tasks, and discovery for `ctx.call` without a callee */
  interconnect: Pick<Interconnect, 'agents' | 'resolve' | 'observe'> & Partial<Pick<Interconnect, 'discoverAll'>>
}

/** A submit of this node's that its executor accepted (`TaskServiceInit.onAccepted`) */
export interface AcceptedSubmit {
  /** The sending agent */
  from: Did
  /** The executing agent */
  to: Did
  skill: string
  taskId: string
  /** The request's delegation chain, leaf first */
  proofs: readonly Token[]
}

export interface TaskServiceInit {
  /**
   * Where the service's spans go (`invoke_agent {skill}` and handlers'
   * `execute_tool {tool}`, spec/management.md 3): `@ioa/management`'s
   * `createTracing(...).tracer` or `otelTracer(provider)`
   *
   * @default none (no span is recorded)
   */
  tracer?: IoaTracer
  /**
   * Told what the executor did with every request (started, ended, refused);
   * a listener that throws is logged and ignored
   *
   * @default undefined
   */
  onEvent?: (event: ExecutorEvent) => void
  /**
   * Requester side: told once per submit of this service (`submit`,
   * `submitAndWait`, a handler's `ctx.call`, an orchestrator's steps) when
   * its executor accepted it, that is when its first event came: so the
   * chain it names verified there. A node lists these tokens in its
   * management snapshot's `proofs` (spec/management.md 1.2). A listener
   * that throws is logged and ignored
   *
   * @default undefined
   */
  onAccepted?: (submit: AcceptedSubmit) => void
  /** Task snapshots and idempotency keys @default an in-memory datastore */
  datastore?: Datastore
  /** Call-time policy for every served skill */
  policy?: Policy
  /** Heartbeat interval of the executor; a requester reports a lapse after 3× this without news @default 1_000 */
  leaseInterval?: number
  /**
   * Protocol 2.0.0: how long a submit's stream holds its first event back,
   * in ms (0 to leaseInterval / 2): a task that ends (or needs an approval)
   * within it is answered with one event, its snapshot; the events held
   * meanwhile fold into the newest snapshot, one per stream (spec 14.1)
   *
   * @default 50 (at most leaseInterval / 2)
   */
  holdBack?: number
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
  /**
   * Parsed keys and verified token signatures of the chains this service
   * checks (a `VerificationCache`, or its bounds for one of its own)
   *
   * @default a cache of its own with the default bounds (4,096 entries each)
   */
  verificationCache?: VerificationCache | VerificationCacheInit
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
  /** Executor side: session mode (spec 2.6): its bounds and the skills that require envelope mode */
  session?: SessionInit
  /**
   * Requester side: how requests are authenticated unless `submit` says
   * otherwise: `session` where the executor serves it, else `envelope`
   *
   * @default 'session'
   */
  auth?: AuthMode
  /** Requester side: session bindings of this node's agents (spec 2.6) */
  sessionClient?: SessionClientInit
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
  /**
   * Stream a task's events again, from its current state (after a
   * disconnect); `trace`: the W3C trace context the resubscribe's CLIENT
   * span continues (a bad one is `INVALID_TRACE`; spec/management.md 3.1)
   */
  resubscribe(to: Did, taskId: string, options?: { signal?: AbortSignal, trace?: TraceContext }): AsyncGenerator<TaskEvent, void, undefined>
  /** Hand an approval record to the executor: the task leaves auth-required and runs */
  approve(to: Did, taskId: string, approval: Approval, options?: { signal?: AbortSignal }): Promise<TaskSnapshot>
  /** Register the protocol (done by the first `serve`; requesters need not call it) */
  start(): Promise<void>
  /** Unregister the protocol; running tasks fail with INTERRUPTED */
  stop(): Promise<void>
}
