/**
 * The requester side of the task protocol: submits signed tasks to agents
 * found through the interconnect (or served on this node), follows them under
 * a lease (lease-watch.ts), and sends get, cancel and approve requests to the
 * executor that holds a task (spec/collab-tasks.md).
 */
import { UnknownAgentError, assertCapability, isDid } from '@ioa/interconnect'
import { StreamClosedError, isRepeatable } from '@ioa/transport'
import { BoundedMap, EncodedPayload } from '@ioa/transport/internal'
import { peerIdFromString } from '@libp2p/peer-id'
import { DEFAULT_ENVELOPE_TTL, ENVELOPE_LIMITS, TASK_ID_PATTERN, createEncodedEnvelope, createEncodedUnsignedEnvelope } from '../auth/envelope.js'
import { SessionClient, V1_RECHECK, isEnvelopeRefusal, isSessionRefusal } from '../auth/session-client.js'
import { PeerVersions } from './peer-versions.js'
import {
  CollabError, DeadlineExceededError, InvalidEnvelopeError, UnauthorizedError, fromRemote
} from '../errors.js'
import { taskKey } from './executor-state.js'
import { LeaseLapsedError, watchLease } from './lease-watch.js'
import { SharedStream } from './shared-stream.js'
import { MAX_LEASE, TASK_PROTOCOL, checkBody, isMap, roundTrip } from './wire.js'
import { TASK_PROTOCOL_V2, checkTrace, withoutTrace } from './wire-v2.js'
import { FallbackEvents, RemoteEvents } from './event-source.js'
import { submitBytes } from './submit-bytes.js'
import { endSpanWithError, endTaskSpan, extractTrace, injectTrace, tracerOf } from '../tracing.js'
import { startResubscribeClient, tracedResubscribe } from './resubscribe-span.js'
import type { IoaTracer } from '../tracing.js'
import { positiveInteger } from '../options.js'
import type { AcceptedSubmit, SubmitOptions, TaskEvent, TaskRequest, TaskServiceComponents, TaskServiceInit } from './api.js'
import type { TaskExecutor } from './executor.js'
import type { LeaseWatchHost } from './lease-watch.js'
import type { EventSource } from './event-source.js'
import type { TraceContext } from './wire-v2.js'
import type { Approval } from '../auth/policy.js'
import type { AuthMode } from '../auth/session-client.js'
import type { EncodedEnvelope, Envelope, EnvelopeInit, UnsignedEnvelope } from '../auth/envelope.js'
import type { TaskLimits, TaskSnapshot } from './model.js'
import type { Did, Identity, Outcome } from '@ioa/interconnect'
import type { Logger, PeerId } from '@libp2p/interface'

/** Tasks whose executor peer the requester remembers (default of `maxRoutes`) */
const MAX_ROUTES = 4_096

/** Turn a finished task that did not complete into its typed error */
export function taskFailure (task: TaskSnapshot): CollabError {
  const code = task.error?.code ?? (task.state === 'canceled' ? 'CANCELED' : 'STEP_FAILED')
  const message = task.error?.message ?? `Task ${task.id} ended ${task.state}`
  const mapped = fromRemote(Object.assign(new Error(message), { code, remote: true }))
  const err = mapped instanceof CollabError ? mapped : new CollabError(code, message)
  ;(err as CollabError & { task?: TaskSnapshot }).task = task
  return err
}
export class TaskRequester implements LeaseWatchHost {
  private readonly components: TaskServiceComponents
  /** Runs the tasks of agents served on this node (called in-process) */
  private readonly executor: TaskExecutor
  readonly lease: number
  readonly requestTimeout: number
  private readonly limits: TaskLimits
  readonly log: Logger
  private readonly tracer: IoaTracer
  /** Task (agent, id) → the executor peer that answered, least recently stored first (reads `peek`: they do not refresh) */
  private readonly routes: BoundedMap<string, string>
  /** Peer ids by their string, parsed once (a fresh one would be decoded and encoded again per request) */
  private readonly peerIds: BoundedMap<string, PeerId>
  /** The task protocol version each peer is spoken to with, and whether it serves session mode (shared with `sessions`) */
  private readonly versions: PeerVersions
  /** Submits in flight by (sender, agent, idempotency key) */
  private readonly joins = new Map<string, SharedStream<TaskEvent>>()
  /** How requests are authenticated unless `submit` says otherwise (spec 2.6) */
  private readonly auth: AuthMode
  /** Session bindings of this node's agents at executor peers */
  private readonly sessions: SessionClient
  /** Told of each submit its executor accepted (`TaskServiceInit.onAccepted`) */
  private readonly onAccepted?: (submit: AcceptedSubmit) => void

  constructor (components: TaskServiceComponents, executor: TaskExecutor, init: TaskServiceInit = {}) {
    this.components = components
    this.executor = executor
    this.lease = executor.lease
    this.requestTimeout = init.requestTimeout ?? 10_000
    this.limits = executor.limits
    this.log = components.logger.forComponent('ioa:collab:requester')
    this.tracer = tracerOf(init.tracer)
    const maxRoutes = positiveInteger('maxRoutes', init.maxRoutes ?? MAX_ROUTES)
    this.routes = new BoundedMap({ maxEntries: maxRoutes })
    // as many peers as routes at most
    this.peerIds = new BoundedMap({ maxEntries: maxRoutes })
    this.auth = init.auth ?? 'session'
    this.onAccepted = init.onAccepted
    if (this.auth !== 'session' && this.auth !== 'envelope') throw new RangeError('auth must be session or envelope')
    this.sessions = new SessionClient(init.sessionClient ?? {}, async (peer, method, payload, signal) => {
      return await this.components.messaging.request(this.peerId(peer), TASK_PROTOCOL_V2, method, payload, { signal, timeout: this.requestTimeout })
    }, components.peerId.toString(), components.logger.forComponent('ioa:collab:session'), (sessionlessFor) => new PeerVersions({
      // as many peers as routes at most
      maxPeers: maxRoutes, v1Recheck: V1_RECHECK, sessionlessFor
    }))
    // one memo of what each peer speaks, for the version chosen here and for session mode
    this.versions = this.sessions.versions
  }

  /**
   * The version to speak to `peer`: 2.0.0 when it announced it (identify),
   * 1.0.0 when it announced only that, else 2.0.0 first (a refusal with
   * PROTOCOL_NOT_SUPPORTED falls back to 1.0.0, below); a 1.0.0 peer is
   * looked at again after `V1_RECHECK` ms
   */
  private async versionOf (peer: string): Promise<1 | 2> {
    const known = this.versions.version(peer)
    if (known != null) return known
    let protocols: readonly string[] | undefined
    try {
      protocols = await this.components.protocolsOf?.(this.peerId(peer))
    } catch (err) {
      // unknown: try 2.0.0 (the fallback below finds out)
      this.log.trace('no protocols of %s known: %e', peer, err)
    }
    if (protocols?.includes(TASK_PROTOCOL_V2) === true) {
      this.versions.setVersion(peer, 2)
      return 2
    }
    // a peer that announced 1.0.0 only (looked up again after a while: it
    // may have announced before it served 2.0.0); anything else: try 2.0.0
    if (protocols?.includes(TASK_PROTOCOL) !== true) return 2
    this.versions.setVersion(peer, 1)
    return 1
  }

  /** Run `call` on 2.0.0 when `peer` may serve it, else (or when it turns out not to) on 1.0.0 */
  private async onVersion<T> (peer: string, call: (protocol: string) => Promise<T>): Promise<T> {
    if (await this.versionOf(peer) === 2) {
      try {
        return await call(TASK_PROTOCOL_V2)
      } catch (err: any) {
        if (err?.code !== 'PROTOCOL_NOT_SUPPORTED') throw err
        this.log('%s does not serve %s: using %s', peer, TASK_PROTOCOL_V2, TASK_PROTOCOL)
        this.versions.setVersion(peer, 1)
      }
    }
    return await call(TASK_PROTOCOL)
  }


  private identityOf (from: Did | Identity): Identity {
    if (typeof from !== 'string') return from
    const agent = this.components.interconnect.agents().find(a => a.did === from)
    if (agent == null) throw new UnknownAgentError(`Sender ${from} is not hosted here`)
    return agent.identity
  }

  private isLocal (to: Did): boolean {
    return this.executor.serves(to) && this.components.interconnect.agents().some(a => a.did === to)
  }

  remember (to: Did, taskId: string, peer: string): void {
    const key = taskKey(to, taskId)
    this.routes.set(key, peer)
  }

  /** Peers to try for an agent: 'local' when it is served here */
  async peersOf (to: Did, taskId: string | undefined, signal?: AbortSignal, fresh = false): Promise<string[]> {
    if (this.isLocal(to)) return ['local']
    const known = taskId != null && !fresh ? this.routes.peek(taskKey(to, taskId)) : undefined
    if (known != null) return [known]
    const route = await this.components.interconnect.resolve(to, { signal, ...(fresh ? { cache: false } : {}) })
    return route.peers
  }

  private selfPeer (): string {
    return this.components.peerId.toString()
  }

  private peerId (peer: string): PeerId {
    let id = this.peerIds.get(peer)
    if (id == null) {
      id = peerIdFromString(peer)
      this.peerIds.set(peer, id)
    }
    return id
  }

  openStream (peer: string, method: 'submit' | 'resubscribe', payload: unknown, signal: AbortSignal): EventSource {
    if (method === 'resubscribe') return this.openResubscribe(peer, payload as { agent: Did, task: string, trace?: TraceContext }, signal)
    if (peer === 'local') {
      const source = this.executor.onSubmit(roundTrip(payload), this.selfPeer(), signal, undefined, { local: true })
      return (async function * () {
        for await (const e of source) yield roundTrip(e)
      })()
    }
    return this.remoteStream(peer, method, payload, signal)
  }

  /** A resubscribe stream in its CLIENT span (spec/management.md 3.2), the request's `trace` continuing it */
  private openResubscribe (peer: string, payload: { agent: Did, task: string, trace?: TraceContext }, signal: AbortSignal): EventSource {
    const { span, request } = startResubscribeClient(this.tracer, payload)
    if (peer === 'local') {
      const source = this.executor.onResubscribe(roundTrip(withoutTrace(request)), this.selfPeer(), signal, undefined, { trace: request.trace })
      return tracedResubscribe((async function * () {
        for await (const e of source) yield roundTrip(e)
      })(), span)
    }
    return tracedResubscribe(this.remoteStream(peer, 'resubscribe', request, signal), span)
  }

  /**
   * A task stream of a remote executor, on 2.0.0 (deltas rebuilt into full
   * snapshots) or 1.0.0, opened when first read; `encoded`, when given, makes
   * the 2.0.0 request's bytes (the same value as `payload`, from parts
   * encoded once)
   */
  private remoteStream (peer: string, method: 'submit' | 'resubscribe', payload: unknown, signal: AbortSignal, encoded?: () => EncodedPayload): EventSource {
    return new RemoteEvents(async () => await this.onVersion(peer, async (protocol) => {
      const wire = protocol === TASK_PROTOCOL ? withoutTrace(payload) : encoded?.() ?? payload
      const stream = this.components.messaging.stream(this.peerId(peer), protocol, method, wire, {
        signal,
        // our own lease watchdog decides; this only bounds a silent stream
        timeout: Math.max(30_000, 6 * MAX_LEASE)
      })
      // the first event tells whether the peer serves the protocol
      return { stream, first: await stream.next(), v2: protocol === TASK_PROTOCOL_V2 }
    }), method === 'submit')
  }

  private async request<T> (peer: string, method: 'get' | 'cancel' | 'approve', payload: Record<string, unknown>, signal?: AbortSignal): Promise<T> {
    if (peer === 'local') {
      const local = roundTrip(payload)
      const self = this.selfPeer()
      const out = method === 'get' ? await this.executor.onGet(local, self) : method === 'cancel' ? await this.executor.onCancel(local, self) : await this.executor.onApprove(local)
      return roundTrip(out) as T
    }
    return await this.onVersion(peer, async (protocol) => await this.components.messaging.request<T>(this.peerId(peer), protocol, method, payload, {
      signal, timeout: this.requestTimeout
    }))
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
          if (!isRepeatable(err)) throw last
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
    // encoded once: the size check's bytes are the ones the envelope's body CID is hashed from
    const bodyBytes = checkBody(body, this.limits.maxBodyBytes).bytes
    const ttl = Math.min(request.ttl ?? DEFAULT_ENVELOPE_TTL, ENVELOPE_LIMITS.maxTtl)
    // checked here: a bad trace is the caller's error, not the executor's
    const given = options.trace != null ? checkTrace(options.trace) : undefined
    // the CLIENT span: a child of the given trace (or of the active context); the submit carries its context
    const span = this.tracer.startSpan(`invoke_agent ${request.skill}`, 'client', extractTrace(given), () => ({
      'gen_ai.operation.name': 'invoke_agent',
      'gen_ai.agent.id': to,
      'gen_ai.conversation.id': request.contextId ?? taskId,
      'ioa.skill': request.skill,
      'ioa.task.id': taskId,
      'ioa.chain.depth': request.proofs.length
    }))
    const trace = injectTrace(span, given)
    let last: TaskSnapshot | undefined
    let failed = false
    let accepted = false
    try {
      for await (const e of this.submitTraced(identity, to, taskId, request, options, body, bodyBytes, deadline, ttl, trace)) {
        if (e.type === 'status' || e.type === 'artifact') last = e.task
        if (!accepted) {
          accepted = true
          this.accepted({ from: identity.did, to, skill: request.skill, taskId, proofs: request.proofs })
        }
        yield e
      }
    } catch (err) {
      failed = true
      endSpanWithError(span, err)
      throw err
    } finally {
      // (also when the caller stops iterating: the span ends with the last state seen)
      if (!failed) endTaskSpan(span, last?.state, last?.error?.code, last?.error?.message)
    }
  }

  /** Tell `init.onAccepted` of a submit its executor accepted */
  private accepted (submit: AcceptedSubmit): void {
    if (this.onAccepted == null) return
    try {
      this.onAccepted(submit)
    } catch (err) {
      // the listener's failure is its own: the task goes on
      this.log.error('an accepted-submit listener failed: %e', err)
    }
  }

  /** The events of a submit (a plain function, not a generator of its own: `submit` reads the lease watch directly) */
  private submitTraced (identity: Identity, to: Did, taskId: string, request: TaskRequest, options: SubmitOptions, body: Record<string, unknown>, bodyBytes: Uint8Array | undefined, deadline: number | undefined, ttl: number, trace: TraceContext | undefined): AsyncGenerator<TaskEvent, void, undefined> {

    const auth = options.auth ?? this.auth
    const open = async (peer: string, signal: AbortSignal): Promise<EventSource> => {
      const iat = Date.now()
      const exp = deadline != null && deadline > iat ? Math.min(iat + ttl, deadline) : iat + ttl
      const init: EnvelopeInit = {
        to, skill: request.skill, task: taskId, body, ...(bodyBytes != null ? { bodyBytes } : {}), proofs: request.proofs, issuedAt: iat, expiresAt: exp
      }
      return await this.openSubmit(peer, identity, init, body, auth, signal, trace)
    }
    if (request.idempotencyKey == null) {
      return this.watch(to, taskId, open, options.signal, trace)
    }
    // concurrent submits with one key follow one stream (checked and set before any await)
    const key = `${identity.did}\n${to}\n${request.idempotencyKey}`
    let shared = this.joins.get(key)
    if (shared == null) {
      const created = new SharedStream<TaskEvent>(
        signal => this.watch(to, taskId, open, signal, trace),
        e => e.type === 'status' || e.type === 'artifact',
        () => { if (this.joins.get(key) === created) this.joins.delete(key) }
      )
      this.joins.set(key, created)
      shared = created
    }
    return shared.join(options.signal)
  }

  /**
   * Open a submit stream in the mode asked for (spec 2.6): signed, or
   * unsigned under the agent's session binding at `peer` (made first when
   * needed). An unsigned submit refused for its binding is sent again once
   * after binding again (then signed if refused again); one refused with
   * `ENVELOPE_REQUIRED` is sent again signed (and that skill of that agent
   * is sent signed from then on).
   */
  private async openSubmit (peer: string, identity: Identity, init: EnvelopeInit, body: Record<string, unknown>, auth: AuthMode, signal: AbortSignal, trace?: TraceContext): Promise<EventSource> {
    const local = peer === 'local'
    const send = (made: EncodedEnvelope<Envelope | UnsignedEnvelope>): EventSource => {
      const envelope = made.envelope
      const request = trace != null ? { envelope, body, trace } : { envelope, body }
      if (local) return this.openStream(peer, 'submit', request, signal)
      const bodyBytes = init.bodyBytes
      // encoded once: the body's bytes (hashed for its CID) and the payload's (signed) go into the frame as they are
      const encoded = bodyBytes != null
        ? () => new EncodedPayload(submitBytes({ body: bodyBytes, payload: made.payloadBytes, sig: envelope.sig, trace }))
        : undefined
      return this.remoteStream(peer, 'submit', request, signal, encoded)
    }
    const signed = async (): Promise<EventSource> => send(await createEncodedEnvelope(identity, init))
    if (auth === 'envelope' || this.sessions.needsEnvelope(peer, init.to, init.skill)) return await signed()
    // session mode is a part of 2.0.0 (spec 2.6): a peer of 1.0.0 only gets signed envelopes
    // without a live binding yet, this request goes signed while the binding is made beside it (no two round trips first)
    if (!local && (await this.versionOf(peer) === 1 || !this.sessions.bindBeside(peer, identity))) return await signed()
    const unsigned = async (): Promise<EventSource> => send(await createEncodedUnsignedEnvelope(identity.did, init))
    return new FallbackEvents(await unsigned(), async (err) => {
      if (isEnvelopeRefusal(err)) {
        this.log('%s requires envelope mode for %s: sending task %s signed', init.to, init.skill, init.task)
        this.sessions.requireEnvelope(peer, init.to, init.skill)
        return await signed()
      }
      if (!local && isSessionRefusal(err)) {
        this.log('%s has no live binding of %s (%s): binding again for task %s', peer, identity.did, (err as { code?: string }).code, init.task)
        this.sessions.forget(peer, identity.did)
        if (!await this.sessions.ensure(peer, identity, signal)) return await signed()
        // refused again (the request went on another connection than the binding): signed
        return new FallbackEvents(await unsigned(), async (again) => isSessionRefusal(again) || isEnvelopeRefusal(again) ? await signed() : undefined)
      }
      return undefined
    })
  }

  async * resubscribe (to: Did, taskId: string, options: { signal?: AbortSignal, trace?: TraceContext } = {}): AsyncGenerator<TaskEvent, void, undefined> {
    if (!isDid(to)) throw new UnknownAgentError(`Not an agent id: ${String(to).slice(0, 80)}`)
    if (typeof taskId !== 'string' || !TASK_ID_PATTERN.test(taskId)) throw new InvalidEnvelopeError('Not a task id')
    // checked here: a bad trace is the caller's error; each resubscribe stream's CLIENT span is its child
    const trace = options.trace != null ? checkTrace(options.trace) : undefined
    yield * this.watch(to, taskId, undefined, options.signal, trace)
  }


  /**
   * Follow a task's event stream with a lease watchdog: a stream that fails
   * is resubscribed until 3 lease intervals pass without any event, then a
   * `lapsed` event ends the iteration.
   */
  private watch (to: Did, initialId: string, submit: ((peer: string, signal: AbortSignal) => Promise<EventSource>) | undefined, outer?: AbortSignal, trace?: TraceContext): AsyncGenerator<TaskEvent, void, undefined> {
    return watchLease(this, to, initialId, submit, outer, trace)
  }

  /** Feed what a task showed of a remote agent to the interconnect's ranking (spec/interconnect.md 7.1) */
  observe (to: Did, taskId: string, outcome: Outcome | undefined): void {
    if (outcome == null) return
    if (!outcome.ok) this.log('task %s of %s counts as a failure of the agent for ranking', taskId, to)
    this.components.interconnect.observe(to, outcome)
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
