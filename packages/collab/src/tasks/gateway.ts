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
import { CollabError, UnauthorizedError, UnknownTaskError } from '../errors.js'
import { TASK_PROTOCOL, checkSubmit, eventTaskId, parseEvent, parseTaskRef } from './wire.js'
import { numberOption } from '../options.js'
import { linked } from './signals.js'
import type { TaskEvent } from './api.js'
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
    this.log = init.outer.node.logger.forComponent('ioa:collab:gateway')
  }

  // ---- lifecycle ---------------------------------------------------------

  async start (): Promise<void> {
    if (this.outer.node.getProtocols().includes(TASK_PROTOCOL)) {
      throw new TaskProtocolInUseError(`${this.outer.peerId.toString()} already serves ${TASK_PROTOCOL}: the outer node of a gateway must not run a task service`)
    }
    const m = this.outer.node.services.messaging
    await m.handleStream(TASK_PROTOCOL, 'submit', (payload, ctx) => this.onSubmit(payload, ctx))
    await m.handleStream(TASK_PROTOCOL, 'resubscribe', (payload, ctx) => this.onResubscribe(payload, ctx))
    for (const method of ['get', 'cancel', 'approve'] as const) {
      await m.handle(TASK_PROTOCOL, method, async (payload, ctx) => this.onControl(method, payload, ctx))
    }
    this.started = true
  }

  async stop (): Promise<void> {
    if (this.stopping.signal.aborted) return
    this.stopping.abort(new CanceledError('The task gateway stopped'))
    if (this.started) {
      this.started = false
      await this.outer.node.services.messaging.unhandle(TASK_PROTOCOL).catch((err: unknown) => {
        // stopping goes on: the node may be stopping too
        this.log.error('could not unregister %s: %e', TASK_PROTOCOL, err)
      })
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

  /** Count the end of a relayed call: answered, failed in the domain, or abandoned by the caller */
  private settle (ok: boolean, signal: AbortSignal): void {
    if (ok) this.counters.relayed++
    else if (!signal.aborted) this.counters.failed++
  }

  /**
   * Relay a streaming call and pipe the executor's events back unchanged
   * (each checked for shape; `onEvent` sees it before it is passed on)
   */
  private async * relayStream (agent: Did, method: 'submit' | 'resubscribe', payload: unknown, ctx: RequestContext, onEvent?: (event: TaskEvent) => void): AsyncGenerator<unknown> {
    const { signal, done } = linked(ctx.signal, this.stopping.signal)
    const messaging = this.inner.node.services.messaging
    let source: AsyncGenerator<unknown> | undefined
    let ok = false
    this.counters.streams++
    try {
      const opened = await this.reach(agent, signal, async (peer) => {
        const s = messaging.stream(peerIdFromString(peer), TASK_PROTOCOL, method, payload, { signal, timeout: this.streamTimeout })
        try {
          return { s, first: await s.next() }
        } catch (err) {
          await s.return(undefined).catch((closeErr: unknown) => {
            // the stream failed already: its first error is the one thrown
            this.log.trace('closing a failed inner stream: %e', closeErr)
          })
          throw err
        }
      })
      source = opened.s
      let next = opened.first
      while (next.done !== true) {
        const event = parseEvent(next.value)
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

  private async * onSubmit (payload: unknown, ctx: RequestContext): AsyncGenerator<unknown> {
    const peer = ctx.peer.toString()
    const { to, skill, task, from } = this.refuse(() => checkSubmit(payload)).checked.envelope.payload
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
    try {
      yield * this.relayStream(to, 'submit', payload, ctx, (event) => {
        accepted = true
        // an idempotent repeat follows the earlier task, under its own id
        const id = eventTaskId(event)
        if (id !== task && !this.owners.has(DefaultTaskGateway.key(to, id))) this.remember(DefaultTaskGateway.key(to, id), owner)
        if (event.type === 'status' && event.task.state !== 'submitted') {
          relayed(event.task.state === 'rejected' ? { code: event.task.error?.code ?? 'REJECTED', message: event.task.error?.message ?? 'Rejected' } : undefined)
        }
      })
    } catch (err) {
      // an error the executor sent back (not a failure to reach it)
      const e = err as { code?: unknown, message?: unknown, remote?: unknown }
      if (!accepted && e?.remote === true && typeof e.code === 'string') relayed({ code: e.code, message: String(e.message ?? err) })
      throw err
    } finally {
      relayed()
      // refused by the executor (or never reached): the id is not ours
      if (reserved && !accepted && this.owners.peek(key) === owner) this.owners.delete(key)
    }
  }

  private async * onResubscribe (payload: unknown, ctx: RequestContext): AsyncGenerator<unknown> {
    const peer = ctx.peer.toString()
    const { agent, task } = this.refuse(() => parseTaskRef(payload))
    this.authorize(agent, task, peer)
    yield * this.relayStream(agent, 'resubscribe', payload, ctx)
  }

  private async onControl (method: Control, payload: unknown, ctx: RequestContext): Promise<unknown> {
    const peer = ctx.peer.toString()
    const { agent, task } = this.refuse(() => parseTaskRef(payload, method === 'approve'))
    this.authorize(agent, task, peer)
    const { signal, done } = linked(ctx.signal, this.stopping.signal)
    const messaging = this.inner.node.services.messaging
    let ok = false
    try {
      const answer = await this.reach(agent, signal, async (p) => messaging.request(peerIdFromString(p), TASK_PROTOCOL, method, payload, { signal, timeout: this.requestTimeout }))
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
