/**
 * The messaging service: framed request/response and server-streamed
 * responses between peers, multiplexed over one long-lived libp2p stream per
 * (peer, protocol). Wire format: `spec/transport.md`.
 *
 * The pieces live in `./messaging/`: the public types and defaults (`api`),
 * name checks (`names`), the requester side (`outbound-channel`, and
 * `call-guard` for a call's signal and timeout), the responder side
 * (`inbound-session`, `active-request`) and the idle timer both sides share
 * (`idle-watch`).
 */
import { raceSignal } from 'race-signal'
import { FrameType } from './codec.js'
import {
  CanceledError, DialFailedError, InvalidArgumentError, ProtocolNotSupportedError, NotStartedError,
  StreamClosedError, TimeoutError
} from './errors.js'
import { InboundSession } from './messaging/inbound-session.js'
import { MESSAGING_DEFAULTS, MESSAGING_LOG_PREFIX, MAX_TIMEOUT, MAX_WINDOW } from './messaging/api.js'
import { targetPeer, validateName } from './messaging/names.js'
import { callGuard } from './messaging/call-guard.js'
import { OutboundChannel } from './messaging/outbound-channel.js'
import { StreamCall } from './messaging/stream-call.js'
import { UnaryCall } from './messaging/unary-call.js'
import { PeerBudgets } from './peer-budgets.js'
import type {
  Handler, Messaging, MessagingComponents, MessagingDefaults, MessagingInit, MessagingStats, MessageTarget, RequestOptions,
  StreamingHandler, UnaryHandler
} from './messaging/api.js'
import type { CallGuard } from './messaging/call-guard.js'
import type { ChannelOwner } from './messaging/outbound-channel.js'
import type { SessionOwner } from './messaging/inbound-session.js'
import type { BufferStats } from './buffer-budget.js'
import type { FramingInit } from './framed-stream.js'
import type { Connection, CounterGroup, Logger, Startable, Stream } from '@libp2p/interface'

export { MESSAGING_DEFAULTS } from './messaging/api.js'
export type {
  Messaging, MessagingInit, MessagingComponents, MessagingStats, MessageTarget,
  RequestContext, RequestOptions, UnaryHandler, StreamingHandler
} from './messaging/api.js'

class DefaultMessaging implements Messaging, Startable, ChannelOwner, SessionOwner {
  readonly opts: MessagingDefaults
  readonly log: Logger
  readonly outboundLog: Logger
  readonly inboundLog: Logger
  private readonly framingLog: Logger
  /** counts requests by outcome when the node has metrics */
  readonly requests?: CounterGroup<'sent' | 'served' | 'refused'>
  private readonly components: MessagingComponents
  private readonly handlers = new Map<string, Map<string, Handler>>()
  private readonly channels = new Map<string, OutboundChannel>()
  private readonly opening = new Map<string, Promise<OutboundChannel>>()
  private readonly sessions = new Set<InboundSession>()
  private readonly slots = new Map<string, number>()
  private readonly budgets: PeerBudgets
  private started = false

  constructor (components: MessagingComponents, init: MessagingInit = {}) {
    this.components = components
    const { logPrefix = MESSAGING_LOG_PREFIX, ...numeric } = init
    if (typeof logPrefix !== 'string' || logPrefix === '') {
      throw new InvalidArgumentError(`Invalid messaging option logPrefix=${String(logPrefix)}`)
    }
    this.log = components.logger.forComponent(logPrefix)
    this.outboundLog = components.logger.forComponent(`${logPrefix}:outbound`)
    this.inboundLog = components.logger.forComponent(`${logPrefix}:inbound`)
    this.framingLog = components.logger.forComponent(`${logPrefix}:framing`)
    this.requests = components.metrics?.registerCounterGroup('ioa_transport_messaging_requests_total', {
      label: 'outcome',
      help: 'Requests this node sent, served, and refused (unknown method, too many requests)'
    })
    this.opts = { ...MESSAGING_DEFAULTS }
    for (const [key, value] of Object.entries(numeric)) {
      if (value == null) continue
      if (!(key in MESSAGING_DEFAULTS) || typeof value !== 'number' || !Number.isInteger(value) || value <= 0 || value > MAX_TIMEOUT) {
        throw new InvalidArgumentError(`Invalid messaging option ${key}=${String(value)}`)
      }
      ;(this.opts as unknown as Record<string, number>)[key] = value
    }
    this.opts.streamWindow = Math.min(this.opts.streamWindow, MAX_WINDOW)
    this.budgets = new PeerBudgets(this.opts, this.opts.maxFrameSize, components.logger.forComponent(`${logPrefix}:budgets`))
  }

  /** What every framed stream to or from `connection` shares */
  framing (connection: Connection): FramingInit {
    return { maxFrameSize: this.opts.maxFrameSize, coalesceBytes: this.opts.coalesceBytes, log: this.framingLog, ...this.budgets.forConnection(connection) }
  }

  readonly [Symbol.toStringTag] = '@ioa/transport/messaging'

  async start (): Promise<void> {
    this.started = true
    for (const protocol of this.handlers.keys()) {
      await this.register(protocol)
    }
  }

  async stop (): Promise<void> {
    this.started = false
    for (const protocol of this.handlers.keys()) {
      await this.components.registrar.unhandle(protocol)
    }
    const err = new NotStartedError('Messaging stopped')
    for (const channel of [...this.channels.values()]) {
      channel.close(err)
    }
    for (const session of [...this.sessions]) {
      session.close(err)
    }
    this.channels.clear()
    this.sessions.clear()
    this.slots.clear()
  }

  stats (): MessagingStats {
    let pendingRequests = 0
    for (const c of this.channels.values()) pendingRequests += c.pending
    let activeHandlers = 0
    for (const s of this.sessions) activeHandlers += s.activeCount
    return {
      outboundStreams: this.channels.size,
      inboundStreams: this.sessions.size,
      pendingRequests,
      activeHandlers,
      bufferedBytes: this.budgets.buffers.held,
      peerEntries: this.slots.size + this.budgets.entries()
    }
  }

  bufferStats (): BufferStats {
    return this.budgets.buffers.stats()
  }

  private async register (protocol: string): Promise<void> {
    await this.components.registrar.handle(protocol, (stream, connection) => {
      if (!this.started) {
        stream.abort(new NotStartedError())
        return
      }
      this.sessions.add(new InboundSession(protocol, stream, connection, this))
    }, {
      maxInboundStreams: this.opts.maxInboundStreams,
      maxOutboundStreams: this.opts.maxInboundStreams
    })
  }

  private async add (protocol: string, method: string, handler: Handler): Promise<void> {
    validateName(protocol, method)
    let methods = this.handlers.get(protocol)
    const isNew = methods == null
    if (methods == null) {
      methods = new Map()
      this.handlers.set(protocol, methods)
    }
    methods.set(method, handler)
    if (isNew && this.started) {
      await this.register(protocol)
    }
  }

  async handle (protocol: string, method: string, fn: UnaryHandler): Promise<void> {
    await this.add(protocol, method, { kind: 'unary', fn })
  }

  async handleStream (protocol: string, method: string, fn: StreamingHandler): Promise<void> {
    await this.add(protocol, method, { kind: 'stream', fn })
  }

  async unhandle (protocol: string, method?: string): Promise<void> {
    const methods = this.handlers.get(protocol)
    if (methods == null) return
    if (method != null) {
      methods.delete(method)
      if (methods.size > 0) return
    }
    this.handlers.delete(protocol)
    if (this.started) {
      await this.components.registrar.unhandle(protocol)
    }
  }

  lookup (protocol: string, method: string): Handler | undefined {
    return this.handlers.get(protocol)?.get(method)
  }

  takeSlot (peer: string): boolean {
    const n = this.slots.get(peer) ?? 0
    if (n >= this.opts.maxInFlightPerPeer) {
      return false
    }
    this.slots.set(peer, n + 1)
    return true
  }

  releaseSlot (peer: string): void {
    const n = (this.slots.get(peer) ?? 1) - 1
    if (n <= 0) {
      this.slots.delete(peer)
    } else {
      this.slots.set(peer, n)
    }
  }

  channelClosed (channel: OutboundChannel): void {
    if (this.channels.get(channel.key) === channel) {
      this.channels.delete(channel.key)
    }
  }

  sessionClosed (session: InboundSession): void {
    this.sessions.delete(session)
  }

  /**
   * The open channel to `target` for `protocol`, dialling and opening a
   * stream when there is none; concurrent callers share one attempt
   */
  private async channel (target: MessageTarget, protocol: string, guard: CallGuard): Promise<OutboundChannel> {
    const signal = guard.signal
    const peer = targetPeer(target)
    const known = peer == null ? undefined : `${peer}|${protocol}`

    if (known != null) {
      const existing = this.channels.get(known)
      if (existing?.isOpen === true) {
        return existing
      }
      const opening = this.opening.get(known)
      if (opening != null) {
        return raceSignal(opening, signal)
      }
    }

    const open = (async () => {
      let connection: Connection
      try {
        connection = await this.components.connectionManager.openConnection(target, { signal })
      } catch (err: any) {
        if (signal.aborted) throw guard.error()
        this.outboundLog('could not dial %s - %s', String(target), err?.message ?? err)
        throw new DialFailedError(`Could not dial ${String(target)}: ${err?.message ?? err}`, { cause: err })
      }
      const key = `${connection.remotePeer.toString()}|${protocol}`
      const existing = this.channels.get(key)
      if (existing?.isOpen === true) {
        return existing
      }
      let stream: Stream
      try {
        stream = await connection.newStream(protocol, { signal })
      } catch (err: any) {
        if (signal.aborted) throw guard.error()
        if (err?.name === 'UnsupportedProtocolError') {
          throw new ProtocolNotSupportedError(`${connection.remotePeer.toString()} does not support ${protocol}`, { cause: err })
        }
        throw new StreamClosedError(`Could not open a stream to ${connection.remotePeer.toString()}: ${err?.message ?? err}`, { cause: err })
      }
      if (!this.started) {
        stream.abort(new NotStartedError())
        throw new NotStartedError('Messaging stopped while opening a stream')
      }
      const channel = new OutboundChannel(key, stream, connection, this)
      this.channels.set(key, channel)
      return channel
    })()

    if (known != null) {
      this.opening.set(known, open)
      // every caller awaits `open` (or races it) and gets its error; this
      // only forgets the attempt once it settled either way
      const forget = (): void => { this.opening.delete(known) }
      open.then(forget, forget)
    }

    return open
  }

  /** Guard a call with the caller's signal and its timeout (`options.timeout` or `requestTimeout`) */
  private guard (options: RequestOptions, what: string): CallGuard {
    return callGuard(what, this.timeoutOf(options), options.signal)
  }

  /** A call's timeout in whole ms, within what setTimeout can wait */
  private timeoutOf (options: RequestOptions): number {
    const requested = options.timeout ?? this.opts.requestTimeout
    if (typeof requested !== 'number' || Number.isNaN(requested) || requested <= 0) {
      throw new InvalidArgumentError(`Invalid timeout ${requested}`)
    }
    return Math.min(Math.ceil(requested), MAX_TIMEOUT)
  }

  async request<T = unknown> (target: MessageTarget, protocol: string, method: string, payload: unknown = null, options: RequestOptions = {}): Promise<T> {
    if (!this.started) {
      throw new NotStartedError()
    }
    validateName(protocol, method)
    const what = `Request ${protocol} ${method}`
    const timeout = this.timeoutOf(options)
    if (options.signal?.aborted === true) {
      throw new CanceledError(`${what} canceled`, { cause: options.signal.reason })
    }
    const deadline = Date.now() + timeout

    const warm = this.warmSlot(target, protocol)
    const channel = warm ?? await this.coldSlot(target, protocol, timeout, options.signal, what)
    return this.call<T>(channel, method, payload, deadline, timeout, options.signal, what)
  }

  /** The hot path: an open stream with a free slot (taken), no dial, no guard and no promise */
  private warmSlot (target: MessageTarget, protocol: string): OutboundChannel | undefined {
    const peer = targetPeer(target)
    const channel = peer != null ? this.channels.get(`${peer}|${protocol}`) : undefined
    return channel?.isOpen === true && channel.tryAcquire() ? channel : undefined
  }

  /** A channel with a slot taken for the caller, dialling and waiting for a slot under the call's timeout and signal */
  private async coldSlot (target: MessageTarget, protocol: string, timeout: number, signal: AbortSignal | undefined, what: string): Promise<OutboundChannel> {
    const guard = this.guard({ timeout, signal }, what)
    try {
      const channel = await this.channel(target, protocol, guard)
      await channel.acquire(guard.signal)
      return channel
    } catch (err: any) {
      if (guard.signal.aborted) {
        throw guard.error()
      }
      throw err
    } finally {
      guard.done()
    }
  }

  /**
   * Send one request on a channel whose slot the caller holds; the slot is
   * released exactly once, when the call settles (errors before the request
   * is written are thrown; `request` turns them into its rejection)
   */
  private call<T> (channel: OutboundChannel, method: string, payload: unknown, deadline: number, timeout: number, signal: AbortSignal | undefined, what: string): Promise<T> {
    // the caller may have aborted while the dial or stream that ignored its
    // signal was finishing: an abort listener added now would never fire
    if (signal?.aborted === true) {
      channel.release()
      throw new CanceledError(`${what} canceled`, { cause: signal.reason })
    }
    const remaining = deadline - Date.now()
    if (remaining <= 0) {
      channel.release()
      throw new TimeoutError(`${what} timed out after ${timeout} ms`)
    }
    const id = channel.newId()
    this.requests?.increment({ sent: true })
    let bytes
    try {
      bytes = channel.framed.encode({ type: FrameType.REQUEST, id, method, payload, timeout: Math.ceil(remaining) })
    } catch (err) {
      channel.release()
      throw err
    }

    // the hot path: no timer of its own (the channel's one timer watches the
    // deadline) and the call object is the listener on the caller's signal
    const call = new UnaryCall(channel, id, deadline, timeout, signal, what)
    channel.framed.send(bytes)?.catch((err: Error) => { call.sendFailed(err) })
    return call.promise as Promise<T>
  }

  async * stream<T = unknown> (target: MessageTarget, protocol: string, method: string, payload: unknown = null, options: RequestOptions = {}): AsyncGenerator<T, void, undefined> {
    if (!this.started) {
      throw new NotStartedError()
    }
    validateName(protocol, method)
    const what = `Stream ${protocol} ${method}`
    const window = this.opts.streamWindow
    // a stream is bounded per item, not in total: the connection and the first item share one timeout
    const timeout = this.timeoutOf(options)
    const outer = options.signal
    const canceled = (): boolean => outer?.aborted === true
    if (canceled()) {
      throw new CanceledError(`${what} canceled`, { cause: outer?.reason })
    }
    const deadline = Date.now() + timeout

    const channel = this.warmSlot(target, protocol) ?? await this.coldSlot(target, protocol, timeout, outer, what)

    // the channel's slot is held from here; the call is its own deadline entry and abort listener
    let call: StreamCall | undefined
    let id = 0
    let finished = false
    try {
      // the caller may have aborted while a dial that ignored its signal was finishing
      if (canceled()) {
        throw new CanceledError(`${what} canceled`, { cause: outer?.reason })
      }
      id = channel.newId()
      this.requests?.increment({ sent: true })
      const bytes = channel.framed.encode({ type: FrameType.STREAM_REQUEST, id, method, payload, timeout, credit: window })
      const current = call = new StreamCall(channel, id, timeout, window, deadline, outer, what)
      channel.register(id, current)
      channel.framed.send(bytes)?.catch((err: Error) => { current.fail(err) })

      let consumed = 0
      while (true) {
        if (current.queue.length > 0) {
          const item = current.queue.shift() as T
          consumed++
          if (consumed >= Math.ceil(window / 2) && !current.ended) {
            channel.framed.sendFrameNow({ type: FrameType.CREDIT, id, credit: consumed })
            current.granted += consumed
            consumed = 0
          }
          // the next item gets a full timeout again (the channel's timer catches up when it fires)
          current.deadline = Date.now() + timeout
          yield item
          continue
        }
        if (current.failure != null) {
          throw current.failure
        }
        if (current.ended) {
          finished = true
          return
        }
        if (current.stopped != null) {
          throw current.stopped
        }
        await new Promise<void>(resolve => { current.wake = resolve })
        current.wake = undefined
      }
    } finally {
      call?.close()
      if (id !== 0) {
        if (!finished && call?.failure == null) {
          channel.cancel(id)
        } else {
          channel.unregister(id)
        }
      }
      channel.release()
    }
  }
}

/**
 * Create the messaging service. Add it to a libp2p node's `services`
 * (`createTransportNode` does this for you as `services.messaging`).
 */
export function messaging (init: MessagingInit = {}): (components: MessagingComponents) => Messaging {
  return (components) => new DefaultMessaging(components, init)
}
