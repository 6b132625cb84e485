/**
 * The executor side of the task protocol: serves skills on `/ioa/task/1.0.0`,
 * verifies each submit (envelope, chain, replay, policy, approval), admits it
 * within the fair-share limits, runs the skill handler and streams the task's
 * states to its subscribers with lease heartbeats (spec/collab-tasks.md).
 *
 * Over 500 lines on purpose: one class owns the live tasks of this node, and
 * its parts (accept, run, follow, the control handlers, finish) keep one set
 * of invariants over that state (a task is live until finish, once); split
 * apart they would have to expose it.
 */
import { UnknownAgentError, assertCapability, isDid } from '@ioa/interconnect'
import { CanceledError, TooManyRequestsError } from '@ioa/transport'
import { EncodedPayload } from '@ioa/transport/internal'
import { MemoryDatastore } from 'datastore-core'
import { DEFAULT_CLOCK_SKEW, verifyChain } from '../auth/delegation.js'
import { verificationCacheOf } from '../auth/verification-cache.js'
import {
  ENVELOPE_LIMITS, ReplayCache, bodyCid as cidOfBody, bodyDigestOfBytes, verifyCheckedEnvelope
} from '../auth/envelope.js'
import { allOf, evaluatePolicy, verifyApproval } from '../auth/policy.js'
import { SessionRegistry, onBind, onChallenge } from '../auth/session-registry.js'
import {
  ApprovalRequiredError, CollabError, DeadlineExceededError, EnvelopeRequiredError, InvalidEnvelopeError, SessionRequiredError,
  NoProviderError, NonCanonicalError, ResultNotEncodableError, UnauthorizedError, UnknownTaskError
} from '../errors.js'
import { TaskAdmission, addressKey } from './admission.js'
import { HandlerContext, Subscriber, messageCounts, taskKey } from './executor-state.js'
import {
  DEFAULT_TASK_LIMITS, TaskLimitError, TaskStore, cleanSnapshot, isTerminal, transition
} from './model.js'
import { Deadlines } from './deadlines.js'
import { encodeStatusEvent } from './store-codec.js'
import { TaskRetention } from './retention.js'
import { wireValue } from './values.js'
import type { SubtaskCaller } from './subtask-call.js'
import { MIN_LEASE, TASK_PROTOCOL, checkBody, checkSubmit, errorOf, isMap, parseTaskRef } from './wire.js'
import { TASK_PROTOCOL_V2, checkSubmitV2, diffSnapshots, parseResubscribeV2, withoutTrace } from './wire-v2.js'
import type { TraceContext } from './wire-v2.js'
import { endSpanWithError, endTaskSpan, extractTrace, injectTrace, tracerOf } from '../tracing.js'
import type { IoaTracer } from '../tracing.js'
import { servedResubscribe, startResubscribeServer } from './resubscribe-span.js'
import { runTool } from '../tool-span.js'
import type { VerificationCache } from '../auth/verification-cache.js'
import type { ExecutorEvent, ServeOptions, SkillHandler, TaskEvent, TaskServiceComponents, TaskServiceInit } from './api.js'
import type { Live, Served, SignalSource } from './executor-state.js'
import type { CheckedEnvelope } from '../auth/envelope.js'
import type { Policy } from '../auth/policy.js'
import type { TaskLimits, TaskRecord, TaskSnapshot, TaskState } from './model.js'
import type { Retained } from './retention.js'
import type { Did } from '@ioa/interconnect'
import type { Logger } from '@libp2p/interface'

/** Longest lease interval of this executor: heartbeats must come well within the transport's handler idle limit (30 s) */
const MAX_OWN_LEASE = 20_000

/** Default hold-back of a 2.0.0 submit stream (ms): a task that ends within it is answered with its final snapshot only */
export const DEFAULT_HOLD_BACK = 50

/** Refuse a 2.0.0 request whose payload the transport found not canonical (spec 14.5) */
function assertCanonical (ctx: { canonical?: boolean }): void {
  if (ctx.canonical === false) throw new NonCanonicalError('The request is not canonical DAG-CBOR: a float holds an integral value')
}

/** Finished tasks kept in memory for fast `get` (the datastore has them all) */
const RECENT_TASKS = 256

/** Why a task's handler signal is aborted: the task ended as `snapshot` shows */
function endReason (snapshot: TaskSnapshot): Error {
  const error = snapshot.error
  if (error?.code === DeadlineExceededError.code) return new DeadlineExceededError(error.message)
  if (snapshot.state === 'canceled') return new CanceledError('Task canceled')
  return new CollabError(error?.code ?? 'TASK_ENDED', error?.message ?? `Task ${snapshot.state}`)
}

/** The task's abort signal, made on first use; already aborted when the task has ended */
function signalOf (live: Live): AbortSignal {
  if (live.controller == null) {
    live.controller = new AbortController()
    if (isTerminal(live.record.snapshot.state)) live.controller.abort(endReason(live.record.snapshot))
  }
  return live.controller.signal
}

/**
 * A status event as a stream's item: for the transport (`wire`), its
 * DAG-CBOR bytes made from the snapshot's own, made once (the store writes
 * the same snapshot from them); in-process, the event itself
 */
function statusItem (task: TaskSnapshot, wire: boolean, record?: TaskRecord): unknown {
  const bytes = wire ? encodeStatusEvent(task, record) : undefined
  return bytes != null ? new EncodedPayload(bytes) : { type: 'status', task }
}

/** How a submit arrived: on a connection (its id, the protocol version, whether its bytes were canonical), or in-process from this node's own agents */
export interface SubmitVia {
  version?: 1 | 2
  canonical?: boolean
  connection?: string
  local?: boolean
}

export class TaskExecutor {
  private readonly components: TaskServiceComponents
  private readonly store: TaskStore
  private readonly policy?: Policy
  /** Heartbeat interval of this executor (also the requester's first lease guess) */
  readonly lease: number
  private readonly replay: ReplayCache
  private readonly replayWindow: number
  private readonly isRevoked?: (cid: string, issuers: readonly Did[]) => boolean | Promise<boolean>
  private readonly roots?: Did[]
  private readonly clockSkew: number
  private readonly maxDepth?: number
  private readonly approvalTimeout: number
  readonly limits: TaskLimits
  private readonly admission: TaskAdmission
  private readonly abandonAfter: number
  /** Hold-back of a 2.0.0 submit stream (ms; 0: none) */
  private readonly holdBack: number
  private readonly retention: TaskRetention
  private readonly log: Logger
  private readonly verification: VerificationCache
  /** Session mode: challenges and bindings by connection (spec 2.6) */
  private readonly sessions: SessionRegistry
  private readonly onEvent?: (event: ExecutorEvent) => void
  private readonly tracer: IoaTracer
  /** @internal Makes the handlers' `ctx.call` (set by the service, which owns the requester) */
  subtasks?: SubtaskCaller
  private readonly served = new Map<Did, Map<string, Served>>()
  private readonly live = new Map<string, Live>()
  private readonly recent = new Map<string, TaskRecord>()
  private readonly locks = new Map<string, Promise<unknown>>()
  /** The deadlines of the running tasks, on one timer */
  private readonly deadlines = new Deadlines<Live>(live => {
    this.finish(live, 'failed', { error: { code: DeadlineExceededError.code, message: `Deadline ${live.record.snapshot.deadline ?? '?'} exceeded` } })
  }, { keepArmed: true })
  private starting?: Promise<void>
  private started = false

  constructor (components: TaskServiceComponents, init: TaskServiceInit = {}) {
    this.components = components
    this.store = new TaskStore(init.datastore ?? new MemoryDatastore())
    this.policy = init.policy
    this.lease = init.leaseInterval ?? 1_000
    if (!Number.isFinite(this.lease) || this.lease < MIN_LEASE || this.lease > MAX_OWN_LEASE) {
      throw new RangeError(`leaseInterval must be ${MIN_LEASE}-${MAX_OWN_LEASE} ms`)
    }
    this.clockSkew = init.clockSkew ?? DEFAULT_CLOCK_SKEW
    this.tracer = tracerOf(init.tracer)
    this.verification = verificationCacheOf(init.verificationCache)
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
    this.limits = { ...DEFAULT_TASK_LIMITS, ...init.limits }
    this.admission = new TaskAdmission({
      maxActiveTasks: this.limits.maxActiveTasks,
      maxActiveTasksPerPeer: this.limits.maxActiveTasksPerPeer,
      maxActiveTasksPerCaller: this.limits.maxActiveTasksPerCaller,
      maxActiveTasksPerAddress: this.limits.maxActiveTasksPerAddress
    })
    this.abandonAfter = init.abandonAfter ?? 3 * this.lease
    if (!Number.isFinite(this.abandonAfter) || this.abandonAfter < this.lease) throw new RangeError('abandonAfter must be at least leaseInterval')
    this.holdBack = init.holdBack ?? Math.min(DEFAULT_HOLD_BACK, Math.floor(this.lease / 2))
    if (!Number.isFinite(this.holdBack) || this.holdBack < 0 || this.holdBack > this.lease / 2) throw new RangeError('holdBack must be 0 to leaseInterval / 2 ms')
    this.log = components.logger.forComponent('ioa:collab:executor')
    this.sessions = new SessionRegistry(init.session ?? {}, {
      clockSkew: this.clockSkew, verificationCache: this.verification, log: components.logger.forComponent('ioa:collab:session')
    })
    this.onEvent = init.onEvent
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
      const key = taskKey(e.agent, e.id)
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
      const m = this.components.messaging
      await m.handleStream(TASK_PROTOCOL, 'submit', (payload, ctx) => this.onSubmit(payload, ctx.peer.toString(), () => ctx.signal, addressKey(ctx.connection.remoteAddr)))
      await m.handleStream(TASK_PROTOCOL, 'resubscribe', (payload, ctx) => this.onResubscribe(payload, ctx.peer.toString(), ctx.signal))
      await m.handle(TASK_PROTOCOL, 'get', async (payload, ctx) => this.onGet(payload, ctx.peer.toString()))
      await m.handle(TASK_PROTOCOL, 'cancel', async (payload, ctx) => this.onCancel(payload, ctx.peer.toString()))
      await m.handle(TASK_PROTOCOL, 'approve', async (payload) => this.onApprove(payload))
      // version 2 (spec 14): the same methods, with hold-back, deltas, trace and canonical requests
      await m.handleStream(TASK_PROTOCOL_V2, 'submit', (payload, ctx) => this.onSubmit(payload, ctx.peer.toString(), () => ctx.signal, addressKey(ctx.connection.remoteAddr), { version: 2, canonical: ctx.canonical, connection: ctx.connection.id }))
      await m.handleStream(TASK_PROTOCOL_V2, 'resubscribe', (payload, ctx) => this.onResubscribe(payload, ctx.peer.toString(), ctx.signal, ctx))
      await m.handle(TASK_PROTOCOL_V2, 'get', async (payload, ctx) => { assertCanonical(ctx); return await this.onGet(payload, ctx.peer.toString()) })
      await m.handle(TASK_PROTOCOL_V2, 'cancel', async (payload, ctx) => { assertCanonical(ctx); return await this.onCancel(payload, ctx.peer.toString()) })
      await m.handle(TASK_PROTOCOL_V2, 'approve', async (payload, ctx) => { assertCanonical(ctx); return await this.onApprove(payload) })
      if (this.sessions.enabled) {
        // session mode (spec 2.6): a part of version 2 only
        const log = this.components.logger.forComponent('ioa:collab:session')
        await m.handle(TASK_PROTOCOL_V2, 'challenge', async (payload, ctx) => { assertCanonical(ctx); return await onChallenge(this.sessions, payload, ctx) })
        await m.handle(TASK_PROTOCOL_V2, 'bind', async (payload, ctx) => { assertCanonical(ctx); return await onBind(this.sessions, this.selfPeer(), payload, ctx, log) })
      }
      this.started = true
    })()
    await this.starting
  }

  async stop (): Promise<void> {
    if (this.starting == null) return
    // a failed start was reported to its caller; stop undoes what it did
    await this.starting.catch(() => {})
    this.starting = undefined
    if (this.started) {
      this.started = false
      for (const protocol of [TASK_PROTOCOL, TASK_PROTOCOL_V2]) {
        await this.components.messaging.unhandle(protocol).catch((err: unknown) => {
          // stopping goes on: the node may be stopping too
          this.log.error('could not unregister %s: %e', protocol, err)
        })
      }
    }
    const running = [...this.live.values()]
    for (const live of running) {
      this.finish(live, 'failed', { error: { code: 'INTERRUPTED', message: 'The executor stopped' } })
    }
    await Promise.all(running.map(async l => l.writing))
    this.deadlines.clear()
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
    skills.set(skill, { handler, policy: options.policy, ...(options.requireEnvelope === true ? { requireEnvelope: true } : {}) })
    await this.start()
  }

  unserve (agentDid: Did, skill: string): void {
    this.served.get(agentDid)?.delete(skill)
  }

  /** Whether some skill of `agent` was ever served here */
  serves (agent: Did): boolean {
    return this.served.has(agent)
  }

  private selfPeer (): string {
    return this.components.peerId.toString()
  }

  // ---- executor: bookkeeping -----------------------------------------

  private async locked<T> (key: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.locks.get(key) ?? Promise.resolve()
    // the previous holder's failure is its own (it got `run`); the next one only waits for it
    const run = prev.catch(() => {}).then(fn)
    const tail = run.catch(() => {})
    this.locks.set(key, tail)
    try {
      return await run
    } finally {
      if (this.locks.get(key) === tail) this.locks.delete(key)
    }
  }

  /** The next turn of the store's writes: one timer for the tasks that change in one turn */
  private saveTurn?: Promise<void>

  private nextSaveTurn (): Promise<void> {
    this.saveTurn ??= new Promise<void>(resolve => {
      setTimeout(() => {
        this.saveTurn = undefined
        resolve()
      }, 0)
    })
    return this.saveTurn
  }

  private save (live: Live): void {
    if (live.saveQueued) return
    live.saveQueued = true
    live.writing = live.writing.then(async () => {
      // after the answer went out, and once for the changes of one turn (a
      // fast task's working and completed are one write of the final record)
      await this.nextSaveTurn()
      live.saveQueued = false
      await this.store.put(live.record)
    }).catch((err: unknown) => {
      // the datastore failed: the in-memory task goes on; the next change writes again
      this.log.error('could not store task %s of %s: %e', live.record.snapshot.id, live.record.agent, err)
    })
  }

  /** Tell `init.onEvent` what happened to a request */
  private report (event: ExecutorEvent): void {
    if (this.onEvent == null) return
    try {
      this.onEvent(event)
    } catch (err) {
      // the listener's failure is its own: the task goes on
      this.log.error('an executor event listener failed: %e', err)
    }
  }

  /** The event of a task that reached terminal state `to`, as its requester sees it */
  private reportEnd (live: Live, to: TaskState): void {
    // (nothing to build without a listener, but a refusal is logged)
    if (this.onEvent == null && to !== 'rejected') return
    const r = live.record
    const at = Date.now()
    const info = { agent: r.agent, skill: r.snapshot.skill, taskId: r.snapshot.id, caller: r.owner, root: r.root, at, ...(live.trace != null ? { trace: live.trace } : {}) }
    const error = r.snapshot.error ?? { code: 'TASK_ENDED', message: `Task ${to}` }
    const duration = at - (live.startedAt ?? r.snapshot.createdAt)
    if (to === 'completed') {
      this.report({ type: 'task-completed', ...info, duration })
    } else if (to === 'rejected') {
      this.log('refused task %s of %s for %s: %s %s', r.snapshot.id, r.owner, r.snapshot.skill, error.code, error.message)
      this.report({ type: 'task-refused', code: error.code, message: error.message, peer: r.peer, agent: r.agent, skill: r.snapshot.skill, taskId: r.snapshot.id, caller: r.owner, at })
    } else {
      this.report({ type: 'task-failed', ...info, state: to === 'canceled' ? 'canceled' : 'failed', duration, error })
    }
  }

  private emit (live: Live, event: TaskEvent): void {
    for (const s of live.subscribers) s.push(event)
  }

  private update (live: Live, snapshot: TaskSnapshot): void {
    live.record.snapshot = snapshot
    messageCounts.set(snapshot, live.messagesAdded)
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
    this.deadlines.delete(live)
    clearTimeout(live.approvalTimer)
    clearTimeout(live.abandonTimer)
    live.release()
    live.pending = undefined
    this.setState(live, to, patch)
    this.reportEnd(live, to)
    if (live.span != null) endTaskSpan(live.span, to, live.record.snapshot.error?.code, live.record.snapshot.error?.message)
    // a handler that read its signal learns why the task ended (one made later is aborted at once)
    if (live.controller != null && !live.controller.signal.aborted) live.controller.abort(endReason(live.record.snapshot))
    const key = taskKey(live.record.agent, live.record.snapshot.id)
    this.live.delete(key)
    this.retention.add(this.retained(live.record, live.keepUntil, live.writing))
    this.recent.set(key, live.record)
    while (this.recent.size > RECENT_TASKS) this.recent.delete(this.recent.keys().next().value as string)
  }

  /** A task by id: live, recently finished, or from the datastore */
  private async load (agent: Did, id: string): Promise<Live | TaskRecord | undefined> {
    const key = taskKey(agent, id)
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
  private async accept (payload: unknown, peer: string, sub?: Subscriber, address?: string, via?: SubmitVia): Promise<Live | TaskRecord> {
    const local = via?.local === true
    // version 1 refuses a `trace` field as unknown and a missing signature; version 2 checks the trace,
    // and takes an unsigned envelope under a session binding (2.6) or from an agent of this node
    const version = via?.version === 2 || local ? 2 : 1
    const unsigned = version === 2 && (this.sessions.enabled || local)
    const { checked, rawBody, trace, ignored }: { checked: CheckedEnvelope, rawBody: unknown, trace?: TraceContext, ignored?: true } =
      version === 2 ? checkSubmitV2(payload, { unsigned, verificationCache: this.verification }) : checkSubmit(payload, { verificationCache: this.verification })
    if (ignored === true) this.log('ignored the trace of task %s from %s: not a W3C traceparent', checked.envelope.payload.task, peer)
    const envelope = checked.envelope
    const { body, bytes: bodyBytes } = checkBody(rawBody, this.limits.maxBodyBytes)
    const p = envelope.payload
    const served = this.served.get(p.to)?.get(p.skill)
    if (served == null) throw new NoProviderError(`Agent ${p.to} does not serve ${p.skill} on this node`)
    if (envelope.sig == null && (served.requireEnvelope === true || this.sessions.requiresEnvelope(p.skill))) {
      throw new EnvelopeRequiredError(`${p.skill} requires a signed envelope`)
    }
    // session mode: the sender's binding on this connection (an agent hosted here, in-process)
    const session = local
      ? (from: Did) => { if (!this.components.interconnect.agents().some(a => a.did === from)) throw new SessionRequiredError(`${from} is not hosted on this node`) }
      : (from: Did) => { this.sessions.check(via?.connection, from) }

    const bodyOf = async (): Promise<string | Uint8Array> => bodyBytes != null ? await bodyDigestOfBytes(bodyBytes) : await cidOfBody(body)
    const { chain, capability, bodyCid } = await verifyCheckedEnvelope(checked, bodyOf, {
      self: p.to,
      replayCache: this.replay,
      peer,
      clockSkew: this.clockSkew,
      maxTtl: this.replayWindow,
      ...(this.maxDepth != null ? { maxDepth: this.maxDepth } : {}),
      ...(this.isRevoked != null ? { isRevoked: this.isRevoked } : {}),
      ...(this.roots != null ? { roots: this.roots } : {}),
      verificationCache: this.verification,
      session
    })

    const created = await this.locked(p.to, async (): Promise<{ task: Live | TaskRecord, fresh: boolean, first?: Promise<void> }> => {
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
        subscribers: new Set(),
        pending: { input: body.input, chain, capability, proofs: p.proofs, served, budget: body.budget },
        writing: Promise.resolve(),
        saveQueued: false,
        release,
        keepUntil: p.exp + this.clockSkew,
        messagesAdded: 0,
        ...(trace != null ? { trace } : {})
      }
      messageCounts.set(snapshot, 0)
      if (sub != null) {
        this.attach(live, sub)
        sub.push({ type: 'status', task: snapshot })
      }
      // the SERVER span continues the submit's trace; without one (or an ignored one) a new trace starts
      live.span = this.tracer.startSpan(`invoke_agent ${p.skill}`, 'server', extractTrace(trace, 'root'), () => {
        const name = this.components.interconnect.agents().find(a => a.did === p.to)?.card.card.name
        return {
          'gen_ai.operation.name': 'invoke_agent',
          'gen_ai.agent.id': p.to,
          ...(name != null ? { 'gen_ai.agent.name': name } : {}),
          'gen_ai.conversation.id': snapshot.contextId,
          'ioa.skill': p.skill,
          'ioa.task.id': p.task,
          'ioa.caller': p.from,
          'ioa.chain.depth': chain.path.length
        }
      })
      const key = taskKey(p.to, p.task)
      this.live.set(key, live)
      // the first write heads the task's chain of writes, so a change made
      // meanwhile (a cancel) is never overwritten by it
      const first = this.store.put(record)
      // (the first write's failure is awaited and handled below)
      live.writing = first.catch(() => {})
      if (body.idempotencyKey == null) {
        // the task is live (found by its id) before its first write ends:
        // other submits to the agent need not wait for this one's write
        return { task: live, fresh: true, first }
      }
      try {
        await first
        await this.store.putIdempotent(p.to, p.from, body.idempotencyKey, p.task)
      } catch (err) {
        this.unaccept(live, sub, err)
        throw err
      }
      return { task: live, fresh: true }
    })
    if (!created.fresh || !('record' in created.task)) return created.task
    const live = created.task
    if (created.first != null) {
      try {
        await created.first
      } catch (err) {
        this.unaccept(live, sub, err)
        throw err
      }
    }
    // (a task canceled meanwhile needs no deadline)
    if (isTerminal(live.record.snapshot.state)) return live
    // (one timer for all the running tasks' deadlines)
    const deadline = live.record.snapshot.deadline
    if (deadline != null) this.deadlines.add(live, deadline)

    // a new task: policy, then run or wait for approval
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

  /**
   * Undo the acceptance of a task whose first write failed: it is refused
   * (the submitter gets the error); a stream that joined it meanwhile (the
   * same task id) is told it failed
   */
  private unaccept (live: Live, sub: Subscriber | undefined, err: unknown): void {
    this.live.delete(taskKey(live.record.agent, live.record.snapshot.id))
    live.release()
    if (live.span != null) endSpanWithError(live.span, err)
    if (isTerminal(live.record.snapshot.state)) return
    const failed = transition(live.record.snapshot, 'failed', { error: errorOf(err) })
    for (const other of live.subscribers) if (other !== sub) other.push({ type: 'status', task: failed })
  }

  private run (live: Live): void {
    const pending = live.pending
    if (pending == null) return
    live.pending = undefined
    this.setState(live, 'working')
    live.startedAt = Date.now()
    if (this.onEvent != null) {
      const r = live.record
      this.report({ type: 'task-started', agent: r.agent, skill: r.snapshot.skill, taskId: r.snapshot.id, caller: r.owner, root: r.root, at: live.startedAt, ...(live.trace != null ? { trace: live.trace } : {}) })
    }
    const snapshot = live.record.snapshot
    const limits = this.limits
    const active = (): boolean => !isTerminal(live.record.snapshot.state) && live.record.snapshot.state === 'working'
    const ctx = new HandlerContext({
      task: cleanSnapshot(snapshot),
      caller: live.record.owner,
      chain: pending.chain,
      capability: pending.capability,
      signal: () => signalOf(live),
      deadline: snapshot.deadline,
      budget: pending.budget,
      // a handler's own submits continue the SERVER span (or the submit's trace when tracing is off)
      trace: injectTrace(live.span, live.trace),
      progress: (message) => {
        if (!active()) return
        const m = wireValue(message, 'Progress message', e => new TaskLimitError(e))
        if (m.bytes.byteLength > limits.maxMessageBytes) throw new TaskLimitError(`Progress message exceeds ${limits.maxMessageBytes} bytes`)
        const messages = [...live.record.snapshot.messages, m.value].slice(-limits.maxMessages)
        live.messagesAdded++
        this.update(live, cleanSnapshot({ ...live.record.snapshot, messages, updatedAt: Date.now() }))
        this.emit(live, { type: 'status', task: live.record.snapshot })
      },
      artifact: (artifact) => {
        if (!active()) return
        if (live.record.snapshot.artifacts.length >= limits.maxArtifacts) throw new TaskLimitError(`More than ${limits.maxArtifacts} artifacts`)
        const a = wireValue(artifact, 'Artifact', e => new TaskLimitError(e))
        if (a.bytes.byteLength > limits.maxArtifactBytes) throw new TaskLimitError(`Artifact exceeds ${limits.maxArtifactBytes} bytes`)
        const copy = a.value
        this.update(live, cleanSnapshot({ ...live.record.snapshot, artifacts: [...live.record.snapshot.artifacts, copy], updatedAt: Date.now() }))
        this.emit(live, { type: 'artifact', task: live.record.snapshot, artifact: copy })
      },
      call: async (c, to, skill, input, options) => {
        if (this.subtasks == null) throw new UnauthorizedError('This executor makes no calls')
        return await this.subtasks.call(live.record.agent, c, to, skill, input, options)
      },
      // a tool call's `execute_tool` span is a child of the SERVER span
      tool: async (name, fn, options) => await runTool(this.tracer, live.span, name, fn, options)
    })
    void (async () => {
      try {
        const result = wireValue(await pending.served.handler(pending.input, ctx), 'Result', m => new ResultNotEncodableError(m))
        if (result.bytes.byteLength > limits.maxResultBytes) throw new TaskLimitError(`Result exceeds ${limits.maxResultBytes} bytes`)
        this.finish(live, 'completed', { result: result.value })
      } catch (err) {
        this.finish(live, 'failed', { error: errorOf(err) })
      }
    })()
  }

  /**
   * Stream a task's events until it ends: from its current state, or, with
   * `attached` (a subscriber that has followed the task since it was created),
   * from the events queued there. On version 2 (`v2`), every event after
   * the first is sent as a delta against the previous one where it can be
   * (spec 14.2), and with `holdBack` the first event waits up to that long
   * for the task to end (or to need an approval): the events meanwhile fold
   * into the newest snapshot, which is sent alone (spec 14.1)
   */
  private async * follow (task: Live | TaskRecord, signal: SignalSource, attached?: Subscriber, v2 = false, holdBack = 0, wire = true): AsyncGenerator<unknown> {
    const live = 'record' in task ? task : undefined
    if (live == null || (attached == null && isTerminal(live.record.snapshot.state))) {
      const record = live != null ? live.record : task as TaskRecord
      yield statusItem(record.snapshot, wire, record)
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
      /** what the stream sent last (deltas are made against it) */
      let sent: TaskSnapshot | undefined = attached == null ? live.record.snapshot : undefined
      if (holdBack > 0) {
        const until = Date.now() + holdBack
        while (sent == null || (!isTerminal(sent.state) && sent.state !== 'auth-required')) {
          const left = until - Date.now()
          if (left <= 0) break
          const event = await sub.next(left, signal)
          if (event == null) break
          if (event.type !== 'heartbeat' && event.type !== 'lapsed') sent = event.task
        }
      }
      if (sent != null) {
        yield statusItem(sent, wire, live.record)
        if (isTerminal(sent.state)) return
      }
      while (true) {
        const event = await sub.next(this.lease, signal)
        if (event == null) {
          const s = live.record.snapshot
          yield { type: 'heartbeat', taskId: s.id, state: s.state, lease: this.lease, at: Date.now() }
          continue
        }
        if (event.type === 'heartbeat' || event.type === 'lapsed') continue
        const delta = v2 && sent != null ? diffSnapshots(sent, messageCounts.get(sent), event.task, messageCounts.get(event.task)) : undefined
        sent = event.task
        yield delta ?? (event.type === 'status' ? statusItem(event.task, wire, live.record) : event)
        if (event.type === 'status' && isTerminal(event.task.state)) return
      }
    } finally {
      this.detach(live, sub)
    }
  }

  /** @internal also called in-process by the requester for a local agent */
  /**
   * `via`: the request came on 2.0.0 (`version: 2`, `canonical` from the
   * transport, the connection it came on), or, with `local`, from this node's
   * requester (a `trace` and an unsigned envelope are accepted; the stream
   * sends every event in full)
   */
  async * onSubmit (payload: unknown, peer: string, signal: SignalSource, address?: string, via?: SubmitVia): AsyncGenerator<unknown> {
    const sub = new Subscriber()
    let task: Live | TaskRecord
    try {
      if (via?.version === 2 && via.local !== true) assertCanonical(via)
      task = await this.accept(payload, peer, sub, address, via)
    } catch (err) {
      this.refused(payload, peer, err)
      throw err
    }
    const attached = 'record' in task && task.subscribers.has(sub)
    try {
      const wire2 = via?.version === 2 && via.local !== true
      yield * this.follow(task, signal, attached ? sub : undefined, wire2, wire2 ? this.holdBack : 0, via?.local !== true)
    } finally {
      if ('record' in task) this.detach(task, sub)
    }
  }

  /** A submit refused before a task existed: logged and reported with what the request named */
  private refused (payload: unknown, peer: string, err: unknown): void {
    const { code, message } = errorOf(err)
    const env = isMap(payload) && isMap(payload.envelope) && isMap(payload.envelope.payload) ? payload.envelope.payload : {}
    const text = (v: unknown): string | undefined => typeof v === 'string' && v.length <= 256 ? v : undefined
    const named = {
      ...(text(env.to) != null ? { agent: text(env.to) as Did } : {}),
      ...(text(env.skill) != null ? { skill: text(env.skill) } : {}),
      ...(text(env.task) != null ? { taskId: text(env.task) } : {}),
      ...(text(env.from) != null ? { caller: text(env.from) as Did } : {})
    }
    this.log('refused a submit from %s (%s of %s for %s): %s %s', peer, named.taskId ?? '?', named.caller ?? '?', named.skill ?? '?', code, message)
    this.report({ type: 'task-refused', code, message, peer, ...named, at: Date.now() })
  }

  private async control (payload: unknown, peer: string): Promise<Live | TaskRecord> {
    const { agent, task } = parseTaskRef(payload)
    const found = await this.load(agent, task)
    if (found == null) throw new UnknownTaskError(`No task ${task} at ${agent}`)
    const owner = 'record' in found ? found.record.peer : found.peer
    if (owner !== peer) throw new UnauthorizedError('Only the peer that submitted a task may read or cancel it')
    return found
  }

  /** `local`: called in-process by this node's requester, with the resubscribe's trace (the stream's events are not encoded) */
  async * onResubscribe (payload: unknown, peer: string, signal: AbortSignal, v2?: { canonical?: boolean }, local?: { trace?: TraceContext }): AsyncGenerator<unknown> {
    let trace = local?.trace
    if (v2 != null) {
      assertCanonical(v2)
      trace = parseResubscribeV2(payload).trace
      if (trace != null) this.log.trace('resubscribe from %s with trace %s', peer, trace.traceparent)
    }
    const task = await this.control(v2 != null ? withoutTrace(payload) : payload, peer)
    const record = (): TaskRecord => 'record' in task ? task.record : task
    // the SERVER span of the stream (spec/management.md 3.2), once the task is found and the caller checked
    const span = startResubscribeServer(this.tracer, trace, () => {
      const r = record()
      return { 'gen_ai.agent.id': r.agent, 'ioa.skill': r.snapshot.skill, 'ioa.task.id': r.snapshot.id, 'ioa.caller': r.owner }
    })
    yield * servedResubscribe(this.follow(task, signal, undefined, v2 != null, 0, local == null), span, () => record().snapshot.state)
  }

  async onGet (payload: unknown, peer: string): Promise<TaskSnapshot> {
    const task = await this.control(payload, peer)
    return 'record' in task ? task.record.snapshot : task.snapshot
  }

  async onCancel (payload: unknown, peer: string): Promise<TaskSnapshot> {
    const task = await this.control(payload, peer)
    if (!('record' in task)) return task.snapshot
    this.finish(task, 'canceled', { error: { code: 'CANCELED', message: 'Canceled by the requester' } })
    return task.record.snapshot
  }

  async onApprove (payload: unknown): Promise<TaskSnapshot> {
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
        ...(this.roots != null ? { roots: this.roots } : {}),
        verificationCache: this.verification
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
}
