/**
 * The task relay of a domain gateway: `/ioa/task/1.0.0` through a gateway.
 *
 * An agent exported by a gateway (`@ioa/interconnect`'s `createGateway`) is
 * resolved from outside to the gateway's outer peer, which does not host it.
 * The task gateway serves the task protocol on that outer peer and passes each
 * call on to the agent's executor over the inner network, after the gateway's
 * admission check (export policy for the caller's domain, the caller's rate).
 * The signed envelope goes through unchanged (the relay never re-signs: the
 * executor verifies the caller's signature and delegation chain) and the
 * executor's events come back unchanged.
 *
 * The executor sees the gateway's inner peer as the submitting peer of every
 * relayed task, so the relay keeps its own (bounded) record of which outer
 * peer submitted which task and answers `resubscribe`, `get`, `cancel` and
 * `approve` for that peer only. Spec: `spec/collab-tasks.md`, "Tasks through
 * gateways".
 *
 * The outer node of a gateway must not run a task service as well: both
 * would serve the task protocol there. `createTaskGateway` refuses a node
 * that already serves it; a task service started on that node afterwards
 * would take the protocol over.
 */
import { UnknownAgentError } from '@ioa/interconnect'
import { CanceledError, mayTryAnotherPeer } from '@ioa/transport'
import { BoundedMap } from '@ioa/transport/internal'
import { peerIdFromString } from '@libp2p/peer-id'
import { CollabError, NonCanonicalError, UnauthorizedError, UnknownTaskError } from '../errors.js'
import { TASK_PROTOCOL, checkSubmit, eventTaskId, isMap, parseEvent, parseTaskRef } from './wire.js'
import { TASK_PROTOCOL_V2, checkSubmitV2, parseDelta, parseResubscribeV2, withoutTrace } from './wire-v2.js'
import { numberOption } from '../options.js'
import { linked } from './signals.js'
import { endSpanWithError, endTaskSpan, tracerOf } from '../tracing.js'
import type { IoaSpan, IoaTracer } from '../tracing.js'
import type { TraceContext } from './wire-v2.js'
import type { Did, Gateway, Interconnect } from '@ioa/interconnect'
import type { RequestContext } from '@ioa/transport'
import type { Logger } from '@libp2p/interface'

/**
 * The outer node already serves the task protocol (it runs a task service or
 * another task gateway); local, never on the wire
 */
export class TaskProtocolInUseError extends CollabError {
  static override name = 'TaskProtocolInUseError'
  static code = 'PROTOCOL_IN_USE'
  constructor (message = 'The task protocol is already served on this node', options?: ErrorOptions) {
    super(TaskProtocolInUseError.code, message, options)
    this.name = TaskProtocolInUseError.name
  }
}

export interface TaskGatewayInit {
  /** The domain gateway whose export policy and rate limit admit each call */
  gateway: Gateway
  /** The interconnect of the gateway's node in the domain network (where the executors are) */
  inner: Interconnect
  /** The interconnect of the gateway's node in the public network (serves the task protocol) */
  outer: Interconnect
  /**
   * Timeout of a relayed `get`, `cancel` or `approve`, in ms
   *
   * @default 10_000
   */
  requestTimeout?: number
  /**
   * Longest silence of a relayed `submit` or `resubscribe` stream, in ms
   * (executors send a heartbeat at least every lease interval, at most 60 s)
   *
   * @default 60_000
   */
  streamTimeout?: number
  /**
   * Timeout of finding an agent's executor on the inner network, in ms
   *
   * @default 5_000
   */
  resolveTimeout?: number
  /**
   * Timeout of looking up a caller's card on the outer network (for its
   * domain), in ms; a caller whose card is not found in time has no domain
   *
   * @default 2_000
   */
  callerLookupTimeout?: number
  /**
   * How long a caller's domain (or that it has none) is remembered, in ms
   *
   * @default 30_000
   */
  callerCacheTtl?: number
  /**
   * Most relayed tasks whose outer peer is remembered; the least recently
   * used are forgotten beyond this (their owner can no longer reach them
   * through this gateway)
   *
   * @default 10_000
   */
  maxRelayed?: number
  /**
   * Forward the `trace` field of 2.0.0 requests to the executor; by default
   * the relay strips it (a trace context is unsigned: it tells the domain
   * about the caller's tracing, and the caller could put anything there)
   *
   * @default false
   */
  keepTrace?: boolean
  /**
   * Where the relay's spans go: with `keepTrace`, a 2.0.0 submit that
   * carries a trace gets a `relay {skill}` span, a child of the caller's
   * span, whose context the executor's span then continues
   * (spec/management.md 3.4)
   *
   * @default none (no span is recorded)
   */
  tracer?: IoaTracer

  /**
   * Told of every submit the relay admits or refuses (for logs and
   * timelines; it must not throw or block)
   *
   * @default undefined
   */
  onRelay?: (event: RelayEvent) => void
}

/** A submit that came to the relay */
export type RelayEvent =
  /**
   * Relayed to the executor; told once the executor decided: `refused` when
   * it refused the task (a verification error, or `rejected` by its policy)
   */
  | { type: 'relayed', agent: Did, skill: string, taskId: string, from: Did, peer: string, domain?: string, refused?: { code: string, message: string } }
  | { type: 'refused', agent: Did, skill: string, taskId: string, from: Did, peer: string, domain?: string, code: string, message: string }

export interface TaskGatewayStats {
  /** Relayed calls the domain answered (a stream counts when it ends) */
  relayed: number
  /** Calls refused here: malformed, not admitted by the gateway, or not the owner's */
  refused: number
  /** Relayed calls that failed in the domain (errors of the executor included) */
  failed: number
  /** Relayed streams open now */
  streams: number
  /** Relayed tasks whose owner is remembered */
  tasks: number
}

export interface TaskGateway {
  readonly gateway: Gateway
  /** The outer peer that submitted a relayed task, while it is remembered */
  ownerOf(agent: Did, taskId: string): string | undefined
  stats(): TaskGatewayStats
  /** Stop serving the task protocol on the outer node and cancel the relayed calls (the nodes and the gateway keep running) */
  stop(): Promise<void>
}

type Control = 'get' | 'cancel' | 'approve'

/** The versions of the task protocol the relay serves, and the protocol id of each */
const VERSIONS = [[1, TASK_PROTOCOL], [2, TASK_PROTOCOL_V2]] as const
type Version = 1 | 2

/** Refuse a 2.0.0 request that is not canonical DAG-CBOR (the relay's re-encoding would hide it from the executor) */
function assertCanonical (version: Version, ctx: RequestContext): void {
  if (version === 2 && ctx.canonical === false) throw new NonCanonicalError('The request is not canonical DAG-CBOR: a float holds an integral value')
}

/** The task id and state (when it names one) of a relayed event, checked for shape; a 2.0.0 delta too */
function relayedEvent (raw: unknown): { id: string, state?: string, error?: { code: string, message?: string } } {
  if (isMap(raw) && raw.type === 'delta') {
    const d = parseDelta(raw)
    return { id: d.id, ...(d.state != null ? { state: d.state } : {}), ...(d.error != null ? { error: d.error } : {}) }
  }
  const event = parseEvent(raw)
  if (event.type === 'status' || event.type === 'artifact') {
    return { id: event.task.id, state: event.task.state, ...(event.task.error != null ? { error: event.task.error } : {}) }
  }
  return { id: eventTaskId(event) }
}

/** Who submitted a relayed task, and what admitted it */
interface Owner {
  peer: string
  skill: string
  domain?: string
}

/** Callers whose domain is remembered */
const MAX_CALLERS = 4_096

/** An option of the gateway: at least `min`, at most a timer's longest delay */
function checkOption (name: string, value: number, min = 1): number {
  return numberOption(name, value, { min, max: 2_147_483_647 })
}

class DefaultTaskGateway implements TaskGateway {
  readonly gateway: Gateway
  private readonly inner: Interconnect
  private readonly outer: Interconnect
  private readonly requestTimeout: number
  private readonly streamTimeout: number
  private readonly resolveTimeout: number
  private readonly callerLookupTimeout: number
  private readonly callerCacheTtl: number
  private readonly onRelay?: (event: RelayEvent) => void
  private readonly keepTrace: boolean
  private readonly tracer: IoaTracer
  /** Inner executor peers known not to serve 2.0.0 (spoken to on 1.0.0) */
  private readonly v1Peers = new BoundedMap<string, true>({ maxEntries: MAX_CALLERS })
  private readonly log: Logger
  /** Relayed tasks (agent "\n" task id) → their outer owner, least recently stored first (reads `peek`: they do not refresh) */
  private readonly owners: BoundedMap<string, Owner>
  /** Caller (did "\n" peer) → its domain, when looked up (reads `peek`) */
  private readonly callers = new BoundedMap<string, { domain?: string, at: number }>({ maxEntries: MAX_CALLERS })
  private readonly stopping = new AbortController()
  private readonly counters = { relayed: 0, refused: 0, failed: 0, streams: 0 }
  private started = false

  constructor (init: TaskGatewayInit) {
    if (init?.gateway == null || typeof init.gateway.admit !== 'function') throw new TypeError('A task gateway needs the domain gateway')
    if (init.inner == null || init.outer == null || init.inner === init.outer || init.inner.peerId.equals(init.outer.peerId)) {
      throw new TypeError('A task gateway needs two interconnects on two different nodes (inner and outer)')
    }
    this.gateway = init.gateway
    this.inner = init.inner
    this.outer = init.outer
    this.requestTimeout = checkOption('requestTimeout', init.requestTimeout ?? 10_000)
    this.streamTimeout = checkOption('streamTimeout', init.streamTimeout ?? 60_000)
    this.resolveTimeout = checkOption('resolveTimeout', init.resolveTimeout ?? 5_000)
    this.callerLookupTimeout = checkOption('callerLookupTimeout', init.callerLookupTimeout ?? 2_000)
    this.callerCacheTtl = checkOption('callerCacheTtl', init.callerCacheTtl ?? 30_000, 0)
    this.owners = new BoundedMap({ maxEntries: Math.floor(checkOption('maxRelayed', init.maxRelayed ?? 10_000)) })
    this.onRelay = init.onRelay
    this.keepTrace = init.keepTrace === true
    this.tracer = tracerOf(init.tracer)
    this.log = init.outer.node.logger.forComponent('ioa:collab:gateway')
  }

  // ---- lifecycle ---------------------------------------------------------

  async start (): Promise<void> {
    for (const [, protocol] of VERSIONS) {
      if (this.outer.node.getProtocols().includes(protocol)) {
        throw new TaskProtocolInUseError(`${this.outer.peerId.toString()} already serves ${protocol}: the outer node of a gateway must not run a task service`)
      }
    }
    const m = this.outer.node.services.messaging
    this.started = true
    for (const [version, protocol] of VERSIONS) {
      await m.handleStream(protocol, 'submit', (payload, ctx) => this.onSubmit(payload, ctx, version))
      await m.handleStream(protocol, 'resubscribe', (payload, ctx) => this.onResubscribe(payload, ctx, version))
      for (const method of ['get', 'cancel', 'approve'] as const) {
        await m.handle(protocol, method, async (payload, ctx) => this.onControl(method, payload, ctx, version))
      }
    }
  }

  async stop (): Promise<void> {
    if (this.stopping.signal.aborted) return
    this.stopping.abort(new CanceledError('The task gateway stopped'))
    if (this.started) {
      this.started = false
      for (const [, protocol] of VERSIONS) {
        await this.outer.node.services.messaging.unhandle(protocol).catch((err: unknown) => {
          // stopping goes on: the node may be stopping too
          this.log.error('could not unregister %s: %e', protocol, err)
        })
      }
    }
  }

  stats (): TaskGatewayStats {
    const { relayed, refused, failed, streams } = this.counters
    return { relayed, refused, failed, streams, tasks: this.owners.size }
  }

  ownerOf (agent: Did, taskId: string): string | undefined {
    return this.owners.peek(DefaultTaskGateway.key(agent, taskId))?.peer
  }

  // ---- owners and callers ----------------------------------------------

  private static key (agent: Did, taskId: string): string {
    return `${agent}\n${taskId}`
  }

  private remember (key: string, owner: Owner): void {
    this.owners.set(key, owner)
  }

  private tell (event: RelayEvent): void {
    try {
      this.onRelay?.(event)
    } catch (err) {
      // a listener's failure is its own: the relay goes on
      this.log.error('the onRelay listener threw on a %s event: %e', event.type, err)
    }
  }

  /** Run `fn`; what it throws counts as refused */
  private refuse<T> (fn: () => T): T {
    try {
      return fn()
    } catch (err) {
      this.counters.refused++
      throw err
    }
  }

  /**
   * The domain of the agent `from` as calling peer `peer` claims it: the
   * domain of its verified card when `peer` serves that card, else undefined
   */
  private async callerDomain (from: Did, peer: string, signal: AbortSignal): Promise<string | undefined> {
    const key = `${from}\n${peer}`
    const hit = this.callers.peek(key)
    if (hit != null && Date.now() - hit.at < this.callerCacheTtl) return hit.domain
    let domain: string | undefined
    try {
      const { signed, peers } = await this.outer.resolve(from, { signal, timeout: this.callerLookupTimeout })
      if (peers.includes(peer)) domain = signed.card.domain
    } catch (err) {
      // no card found in time: a caller without a domain
      this.log.trace('no card of caller %s from %s in time: %e', from, peer, err)
      signal.throwIfAborted()
    }
    this.callers.set(key, { ...(domain != null ? { domain } : {}), at: Date.now() })
    return domain
  }

  /** The owner record of a relayed task, for a control call of `peer`, admitted again by the gateway */
  private authorize (agent: Did, task: string, peer: string): Owner {
    return this.refuse(() => {
      const key = DefaultTaskGateway.key(agent, task)
      const owner = this.owners.peek(key)
      if (owner == null) throw new UnknownTaskError(`No task ${task} of ${agent} was submitted through this gateway`)
      if (owner.peer !== peer) throw new UnauthorizedError('Only the peer that submitted a task through this gateway may follow, read, cancel or approve it')
      this.gateway.admit(agent, owner.skill, { peer, ...(owner.domain != null ? { domain: owner.domain } : {}) })
      this.remember(key, owner)
      return owner
    })
  }

  // ---- reaching the executor ---------------------------------------------

  /**
   * Call `fn` on the agent's executor peers (found on the inner network) in
   * turn, then once more after a fresh lookup, while the call certainly did
   * not reach one (dial failure, protocol not served)
   */
  private async reach<T> (agent: Did, signal: AbortSignal, fn: (peer: string) => Promise<T>): Promise<T> {
    let last: unknown
    for (const fresh of [false, true]) {
      const { peers } = await this.inner.resolve(agent, { signal, timeout: this.resolveTimeout, ...(fresh ? { cache: false } : {}) })
      for (const peer of peers) {
        try {
          return await fn(peer)
        } catch (err: any) {
          last = err
          if (signal.aborted || !mayTryAnotherPeer(err, { once: true })) throw err
        }
      }
    }
    throw last ?? new UnknownAgentError(`No executor of ${agent} in the domain`)
  }

  /**
   * Call `fn` on one executor peer with the protocol of `version`: a 2.0.0
   * call goes out on 2.0.0 unless the peer does not serve it, then (without
   * its trace) on 1.0.0, whose answers are valid 2.0.0 answers too; a 1.0.0
   * call stays on 1.0.0 (its caller could not read deltas)
   */
  private async onVersion<T> (peer: string, version: Version, payload: unknown, fn: (protocol: string, payload: unknown) => Promise<T>): Promise<T> {
    if (version === 2 && !this.v1Peers.has(peer)) {
      try {
        return await fn(TASK_PROTOCOL_V2, payload)
      } catch (err: any) {
        if (err?.code !== 'PROTOCOL_NOT_SUPPORTED') throw err
        this.log('executor peer %s does not serve %s: relaying on %s', peer, TASK_PROTOCOL_V2, TASK_PROTOCOL)
        this.v1Peers.set(peer, true)
      }
    }
    return await fn(TASK_PROTOCOL, withoutTrace(payload))
  }

  /** What the relay forwards of a 2.0.0 request: without its trace unless `keepTrace`; with a relay span that records, the span's context instead */
  private forwarded (payload: unknown, span?: IoaSpan): unknown {
    if (!this.keepTrace) return withoutTrace(payload)
    const t = span?.traceContext()
    return t != null && isMap(payload) ? { ...payload, trace: t } : payload
  }

  /** The span of a relayed submit (spec/management.md 3.4): with `keepTrace` and a trace to continue only */
  private relaySpan (trace: TraceContext | undefined, p: { to: Did, skill: string, task: string, from: Did }, peer: string): IoaSpan | undefined {
    if (!this.keepTrace || trace == null) return undefined
    return this.tracer.startSpan(`relay ${p.skill}`, 'server', { trace }, () => ({
      'gen_ai.agent.id': p.to,
      'ioa.skill': p.skill,
      'ioa.task.id': p.task,
      'ioa.caller': p.from,
      'ioa.gateway.domain': this.gateway.domain,
      'ioa.gateway.peer': peer
    }))
  }

  /** Count the end of a relayed call: answered, failed in the domain, or abandoned by the caller */
  private settle (ok: boolean, signal: AbortSignal): void {
    if (ok) this.counters.relayed++
    else if (!signal.aborted) this.counters.failed++
  }

  /**
   * Relay a streaming call and pipe the executor's events back unchanged
   * (each checked for shape; `onEvent` sees it before it is passed on)
   */
  private async * relayStream (agent: Did, method: 'submit' | 'resubscribe', payload: unknown, ctx: RequestContext, version: Version, onEvent?: (event: ReturnType<typeof relayedEvent>) => void): AsyncGenerator<unknown> {
    const { signal, done } = linked(ctx.signal, this.stopping.signal)
    const messaging = this.inner.node.services.messaging
    let source: AsyncGenerator<unknown> | undefined
    let ok = false
    this.counters.streams++
    try {
      const opened = await this.reach(agent, signal, async (peer) => await this.onVersion(peer, version, payload, async (protocol, sent) => {
        const s = messaging.stream(peerIdFromString(peer), protocol, method, sent, { signal, timeout: this.streamTimeout })
        try {
          return { s, first: await s.next() }
        } catch (err) {
          await s.return(undefined).catch((closeErr: unknown) => {
            // the stream failed already: its first error is the one thrown
            this.log.trace('closing a failed inner stream: %e', closeErr)
          })
          throw err
        }
      }))
      source = opened.s
      let next = opened.first
      while (next.done !== true) {
        const event = relayedEvent(next.value)
        onEvent?.(event)
        yield next.value
        next = await source.next()
      }
      ok = true
    } finally {
      // a caller that stopped reading (or canceled) cancels the inner stream
      await source?.return(undefined).catch((err: unknown) => {
        // the relayed stream is over either way
        this.log.trace('closing the inner stream: %e', err)
      })
      this.counters.streams--
      this.settle(ok, signal)
      done()
    }
  }

  // ---- handlers ----------------------------------------------------------

  private async * onSubmit (payload: unknown, ctx: RequestContext, version: Version): AsyncGenerator<unknown> {
    const peer = ctx.peer.toString()
    const submitted: { checked: ReturnType<typeof checkSubmit>['checked'], trace?: TraceContext } = this.refuse(() => {
      assertCanonical(version, ctx)
      return version === 2 ? checkSubmitV2(payload) : checkSubmit(payload)
    })
    const { to, skill, task, from } = submitted.checked.envelope.payload
    const span = this.relaySpan(submitted.trace, { to, skill, task, from }, peer)
    const relayedPayload = version === 2 ? this.forwarded(payload, span) : payload
    const domain = this.gateway.isExportedAgent(to) ? await this.callerDomain(from, peer, ctx.signal) : undefined
    const key = DefaultTaskGateway.key(to, task)
    const owner: Owner = { peer, skill, ...(domain != null ? { domain } : {}) }
    const base = { agent: to, skill, taskId: task, from, peer, ...(domain != null ? { domain } : {}) }
    try {
      this.refuse(() => {
        this.gateway.admit(to, skill, owner)
        const known = this.owners.peek(key)
        if (known != null && known.peer !== peer) throw new UnauthorizedError(`Task ${task} of ${to} was submitted through this gateway by another peer`)
      })
    } catch (err) {
      const e = err as { code?: unknown, message?: unknown }
      this.log('refused task %s of %s from %s: %s', task, to, peer, String(e?.message ?? err))
      this.tell({ type: 'refused', ...base, code: typeof e?.code === 'string' ? e.code : 'REFUSED', message: String(e?.message ?? err) })
      if (span != null) endSpanWithError(span, err)
      throw err
    }
    // told once the executor decided (its first state after `submitted`, or its refusal)
    let told = false
    const relayed = (refused?: { code: string, message: string }): void => {
      if (told) return
      told = true
      if (refused != null) this.log('relayed task %s of %s from %s, refused by executor: %s %s', task, to, peer, refused.code, refused.message)
      else this.log('relayed task %s of %s from %s', task, to, peer)
      this.tell({ type: 'relayed', ...base, ...(refused != null ? { refused } : {}) })
    }
    // held from now on, so that a concurrent submit of the id from another peer is refused
    const reserved = !this.owners.has(key)
    if (reserved) this.remember(key, owner)
    let accepted = false
    let last: { state?: string, error?: { code: string, message?: string } } | undefined
    let failed = false
    try {
      yield * this.relayStream(to, 'submit', relayedPayload, ctx, version, (event) => {
        accepted = true
        if (event.state != null) last = event
        // an idempotent repeat follows the earlier task, under its own id
        const id = event.id
        if (id !== task && !this.owners.has(DefaultTaskGateway.key(to, id))) this.remember(DefaultTaskGateway.key(to, id), owner)
        if (event.state != null && event.state !== 'submitted') {
          relayed(event.state === 'rejected' ? { code: event.error?.code ?? 'REJECTED', message: event.error?.message ?? 'Rejected' } : undefined)
        }
      })
    } catch (err) {
      // an error the executor sent back (not a failure to reach it)
      const e = err as { code?: unknown, message?: unknown, remote?: unknown }
      if (!accepted && e?.remote === true && typeof e.code === 'string') relayed({ code: e.code, message: String(e.message ?? err) })
      failed = true
      if (span != null) endSpanWithError(span, err)
      throw err
    } finally {
      relayed()
      // the relay span ends with the last state it passed on (also when the caller stopped reading)
      if (span != null && !failed) endTaskSpan(span, last?.state, last?.error?.code, last?.error?.message)
      // refused by the executor (or never reached): the id is not ours
      if (reserved && !accepted && this.owners.peek(key) === owner) this.owners.delete(key)
    }
  }

  private async * onResubscribe (payload: unknown, ctx: RequestContext, version: Version): AsyncGenerator<unknown> {
    const peer = ctx.peer.toString()
    const { agent, task } = this.refuse(() => {
      assertCanonical(version, ctx)
      return version === 2 ? parseResubscribeV2(payload) : parseTaskRef(payload)
    })
    this.authorize(agent, task, peer)
    yield * this.relayStream(agent, 'resubscribe', version === 2 ? this.forwarded(payload) : payload, ctx, version)
  }

  private async onControl (method: Control, payload: unknown, ctx: RequestContext, version: Version): Promise<unknown> {
    const peer = ctx.peer.toString()
    const { agent, task } = this.refuse(() => {
      assertCanonical(version, ctx)
      return parseTaskRef(payload, method === 'approve')
    })
    this.authorize(agent, task, peer)
    const { signal, done } = linked(ctx.signal, this.stopping.signal)
    const messaging = this.inner.node.services.messaging
    let ok = false
    try {
      const answer = await this.reach(agent, signal, async (p) => await this.onVersion(p, version, payload, async (protocol, sent) =>
        await messaging.request(peerIdFromString(p), protocol, method, sent, { signal, timeout: this.requestTimeout })))
      ok = true
      return answer
    } finally {
      this.settle(ok, signal)
      done()
    }
  }
}

/**
 * Serve the task protocol on a gateway's outer node and relay it to the
 * executors of the domain's exported agents: every call is admitted by
 * `gateway.admit` (export policy for the caller's domain, the caller's rate),
 * and control calls are answered for the submitting outer peer only. Throws
 * `TaskProtocolInUseError` when the outer node already serves the task
 * protocol (a task service must not run on it).
 */
export async function createTaskGateway (init: TaskGatewayInit): Promise<TaskGateway> {
  const relay = new DefaultTaskGateway(init)
  await relay.start()
  return relay
}
