/**
 * Framed request/response and server-streamed responses between peers,
 * multiplexed over one long-lived libp2p stream per (peer, protocol).
 * Wire format: `spec/transport.md`.
 */
import { isMultiaddr } from '@multiformats/multiaddr'
import { FrameType, METHOD_PATTERN, MAX_ERROR_MESSAGE } from './codec.js'
import {
  CanceledError, DialFailedError, HandlerError, InvalidArgumentError, ProtocolNotSupportedError, MalformedFrameError, NotStartedError, PayloadTooLargeError,
  StreamClosedError, TimeoutError, TooManyRequestsError, UnknownMethodError, errorFromWire, errorToWire
} from './errors.js'
import { FramedStream } from './framed-stream.js'
import type { FramedStreamInit } from './framed-stream.js'
import { PeerBudgets, PEER_BUDGET_DEFAULTS } from './peer-budgets.js'
import type { BufferStats } from './buffer-budget.js'
import type { Frame, RequestFrame } from './codec.js'
import type { MessagingError } from './errors.js'
import type { PeerBudgetInit } from './peer-budgets.js'
import type { AbortOptions, ComponentLogger, Connection, Logger, PeerId, Startable, Stream } from '@libp2p/interface'
import type { ConnectionManager, Registrar } from '@libp2p/interface-internal'
import type { Multiaddr } from '@multiformats/multiaddr'

export interface MessagingInit extends PeerBudgetInit {
  /**
   * Largest encoded frame (envelope plus payload, without the length prefix)
   * sent or accepted, in bytes
   *
   * @default 1_048_576
   */
  maxFrameSize?: number

  /**
   * Largest number of requests from one remote peer that run at once on this
   * node; more are answered with `TOO_MANY_REQUESTS`. The requesting side
   * queues its own requests above the same number per (peer, protocol).
   *
   * @default 64
   */
  maxInFlightPerPeer?: number

  /**
   * How long a request waits for its response (and a streamed request for
   * each next item) unless the call passes its own `timeout`, in ms
   *
   * @default 10_000
   */
  requestTimeout?: number

  /**
   * Longest time a handler may run (for streaming handlers: between two items),
   * in ms. The requester's own timeout, carried in the request, lowers it.
   *
   * @default 30_000
   */
  handlerTimeout?: number

  /**
   * An inbound stream with no request in flight that receives no frame for this
   * long is closed (defends against peers that open streams and never write)
   *
   * @default 60_000
   */
  idleTimeout?: number

  /**
   * An outbound stream with no request in flight is closed after this long
   *
   * @default 30_000
   */
  outboundIdleTimeout?: number

  /**
   * How many items a streaming handler may send before the requester grants
   * more (flow-control window)
   *
   * @default 16
   */
  streamWindow?: number

  /**
   * Inbound streams per connection per protocol
   *
   * @default 8
   */
  maxInboundStreams?: number
}

export interface MessagingComponents {
  registrar: Registrar
  connectionManager: ConnectionManager
  logger: ComponentLogger
}

/** What a handler learns about the request it serves */
export interface RequestContext {
  /** The peer that sent the request */
  peer: PeerId
  /** The connection the request arrived on */
  connection: Connection
  protocol: string
  method: string
  /** Aborted when the requester cancels or the handler runs out of time */
  signal: AbortSignal
}

/** Answers one request with one response */
export type UnaryHandler = (payload: unknown, context: RequestContext) => unknown

/** Answers one request with a stream of items */
export type StreamingHandler = (payload: unknown, context: RequestContext) => AsyncIterable<unknown> | Iterable<unknown>

export interface RequestOptions extends AbortOptions {
  /**
   * Overrides `requestTimeout` for this call, in ms
   */
  timeout?: number
}

/** Where to send: a peer id (dialled through the peer store) or address(es) */
export type MessageTarget = PeerId | Multiaddr | Multiaddr[]

export interface MessagingStats {
  /** Open outbound streams (one per peer and protocol in use) */
  outboundStreams: number
  /** Open inbound streams */
  inboundStreams: number
  /** Requests sent and awaiting their answer */
  pendingRequests: number
  /** Handlers running on this node */
  activeHandlers: number
  /** Bytes held in partial frames, over all streams (`bufferStats()` has them per peer and address) */
  bufferedBytes: number
  /**
   * Entries in the tables kept per remote peer and per address (calls in
   * flight, buffered bytes, decode budgets not yet refilled); goes back to
   * its baseline when peers go away
   */
  peerEntries: number
}

export interface Messaging {
  /** Serve `method` on `protocol` with a handler that returns one response */
  handle(protocol: string, method: string, handler: UnaryHandler): Promise<void>
  /** Serve `method` on `protocol` with a handler that yields a stream of items */
  handleStream(protocol: string, method: string, handler: StreamingHandler): Promise<void>
  /** Stop serving one method, or the whole protocol when `method` is omitted */
  unhandle(protocol: string, method?: string): Promise<void>
  /** Send a request and wait for its response */
  request<T = unknown>(target: MessageTarget, protocol: string, method: string, payload?: unknown, options?: RequestOptions): Promise<T>
  /** Send a request and iterate the items the handler streams back; breaking out cancels it */
  stream<T = unknown>(target: MessageTarget, protocol: string, method: string, payload?: unknown, options?: RequestOptions): AsyncGenerator<T, void, undefined>
  /** Counters for open streams and calls, for health checks and leak tests */
  stats(): MessagingStats
  /** Bytes held in partial frames: in total, per remote peer and per remote IP address */
  bufferStats(): BufferStats
}

interface Defaults extends Required<PeerBudgetInit> {
  maxFrameSize: number
  maxInFlightPerPeer: number
  requestTimeout: number
  handlerTimeout: number
  idleTimeout: number
  outboundIdleTimeout: number
  streamWindow: number
  maxInboundStreams: number
}

export const MESSAGING_DEFAULTS: Readonly<Defaults> = Object.freeze({
  maxFrameSize: 1_048_576,
  maxInFlightPerPeer: 64,
  requestTimeout: 10_000,
  handlerTimeout: 30_000,
  idleTimeout: 60_000,
  outboundIdleTimeout: 30_000,
  streamWindow: 16,
  maxInboundStreams: 8,
  ...PEER_BUDGET_DEFAULTS
})

/** Longest timeout, in ms (the largest delay setTimeout accepts) */
const MAX_TIMEOUT = 2_147_483_647

/** Most credit a requester may grant a stream at once */
const MAX_WINDOW = 1024

type Handler = { kind: 'unary', fn: UnaryHandler } | { kind: 'stream', fn: StreamingHandler }

interface PendingCall {
  onResponse?(payload: unknown): void
  onItem?(payload: unknown): void
  onEnd?(): void
  fail(err: Error): void
}

/**
 * Reject with the signal's reason as soon as it aborts
 */
async function raceSignal<T> (value: T | Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) {
    throw signal.reason
  }
  if (!(value instanceof Promise)) {
    return value
  }
  let onAbort: (() => void) | undefined
  try {
    return await Promise.race([
      value,
      new Promise<never>((_resolve, reject) => {
        onAbort = () => { reject(signal.reason) }
        signal.addEventListener('abort', onAbort, { once: true })
      })
    ])
  } finally {
    if (onAbort != null) {
      signal.removeEventListener('abort', onAbort)
    }
  }
}

function validateName (protocol: string, method: string): void {
  if (typeof protocol !== 'string' || !/^\/[\x21-\x7e]{1,255}$/.test(protocol)) {
    throw new InvalidArgumentError(`Invalid protocol id "${String(protocol)}"`)
  }
  if (typeof method !== 'string' || !METHOD_PATTERN.test(method)) {
    throw new InvalidArgumentError(`Invalid method name "${String(method)}"`)
  }
}

function targetPeer (target: MessageTarget): string | undefined {
  if (isMultiaddr(target)) {
    return target.getComponents().findLast(c => c.name === 'p2p')?.value
  }
  if (Array.isArray(target)) {
    return target.length > 0 ? targetPeer(target[0]) : undefined
  }
  return target.toString()
}

/**
 * Calls `onIdle` once nothing happened for `ms` while `isIdle()` holds. Hot
 * paths only record the time (`touch`); one timer re-arms itself, instead of
 * a timer being cleared and created for every request.
 */
class IdleWatch {
  private last = Date.now()
  private timer?: ReturnType<typeof setTimeout>
  private readonly ms: number
  private readonly isIdle: () => boolean
  private readonly onIdle: () => void

  constructor (ms: number, isIdle: () => boolean, onIdle: () => void) {
    this.ms = ms
    this.isIdle = isIdle
    this.onIdle = onIdle
    this.schedule(ms)
  }

  touch (): void {
    this.last = Date.now()
  }

  private schedule (delay: number): void {
    this.timer = setTimeout(() => { this.check() }, delay)
    this.timer.unref?.()
  }

  private check (): void {
    const elapsed = Date.now() - this.last
    if (elapsed >= this.ms) {
      if (this.isIdle()) {
        this.timer = undefined
        this.onIdle()
        return
      }
      this.schedule(this.ms)
      return
    }
    this.schedule(this.ms - elapsed)
  }

  stop (): void {
    clearTimeout(this.timer)
    this.timer = undefined
  }
}

/**
 * One outbound stream to a peer for one protocol, carrying many requests
 */
class OutboundChannel {
  readonly key: string
  readonly framed: FramedStream
  private readonly owner: DefaultMessaging
  private readonly calls = new Map<number, PendingCall>()
  private nextId = 1
  private inFlight = 0
  private readonly waiters: Array<() => void> = []
  private readonly idle: IdleWatch

  constructor (key: string, stream: Stream, connection: Connection, owner: DefaultMessaging) {
    this.key = key
    this.owner = owner
    this.framed = new FramedStream(stream, {
      ...owner.framing(connection),
      onFrame: (frame) => { this.onFrame(frame) },
      onBadFrame: (err, id) => {
        const call = this.calls.get(id)
        if (call != null) {
          this.cancel(id)
          call.fail(err)
        }
      },
      onClose: (err) => { this.onClose(err) }
    })
    this.idle = new IdleWatch(owner.opts.outboundIdleTimeout, () => this.inFlight === 0 && this.calls.size === 0, () => {
      this.framed.close()
    })
  }

  get pending (): number {
    return this.calls.size
  }

  /** Take a request slot if one is free right now */
  tryAcquire (): boolean {
    if (this.inFlight >= this.owner.opts.maxInFlightPerPeer) {
      return false
    }
    this.inFlight++
    return true
  }

  get isOpen (): boolean {
    return this.framed.isOpen
  }

  /** Wait for a free request slot (client-side backpressure) */
  async acquire (signal: AbortSignal): Promise<void> {
    while (this.inFlight >= this.owner.opts.maxInFlightPerPeer) {
      await raceSignal(new Promise<void>(resolve => { this.waiters.push(resolve) }), signal)
    }
    this.inFlight++
  }

  release (): void {
    this.inFlight--
    this.idle.touch()
    this.waiters.shift()?.()
  }

  newId (): number {
    const id = this.nextId
    this.nextId = this.nextId >= Number.MAX_SAFE_INTEGER ? 1 : this.nextId + 1
    return id
  }

  register (id: number, call: PendingCall): void {
    this.calls.set(id, call)
  }

  unregister (id: number): void {
    this.calls.delete(id)
  }

  /** Forget a call and tell the remote end to stop working on it */
  cancel (id: number): void {
    if (this.calls.delete(id)) {
      this.framed.sendFrameNow({ type: FrameType.CANCEL, id })
    }
  }

  private failCall (id: number, err: Error): void {
    const call = this.calls.get(id)
    if (call != null) {
      this.calls.delete(id)
      call.fail(err)
    }
  }

  private onFrame (frame: Frame): void {
    const call = this.calls.get(frame.id)

    switch (frame.type) {
      case FrameType.RESPONSE:
        if (call?.onResponse != null) {
          this.calls.delete(frame.id)
          call.onResponse(frame.payload)
        }
        break
      case FrameType.ITEM:
        call?.onItem?.(frame.payload)
        break
      case FrameType.END:
        if (call?.onEnd != null) {
          this.calls.delete(frame.id)
          call.onEnd()
        }
        break
      case FrameType.ERROR: {
        const err = errorFromWire(frame.code, frame.message)
        if (frame.id === 0) {
          this.framed.abort(err)
        } else {
          this.failCall(frame.id, err)
        }
        break
      }
      case FrameType.REQUEST:
      case FrameType.STREAM_REQUEST:
        // the answering side never sends requests on this stream
        this.framed.sendFrameNow({
          type: FrameType.ERROR,
          id: frame.id,
          code: MalformedFrameError.code,
          message: 'Requests are not accepted on an outbound stream'
        })
        break
      default:
        break
    }
  }

  private onClose (err?: Error): void {
    this.idle.stop()
    this.owner.channelClosed(this)
    const reason = err instanceof Error && (err as MessagingError).code != null
      ? err
      : new StreamClosedError(err != null ? `Stream closed: ${err.message}` : 'Stream closed', { cause: err })
    for (const [id, call] of this.calls) {
      this.calls.delete(id)
      call.fail(reason)
    }
    for (const wake of this.waiters.splice(0)) {
      wake()
    }
  }

  close (err: Error): void {
    this.framed.abort(err)
  }
}

/**
 * A request being served. Its AbortController is made only when someone asks
 * for the signal, so a quick handler that never looks at it costs nothing.
 */
class ActiveRequest {
  credit: number
  wakeCredit?: () => void
  /** the requester is gone or canceled: send nothing more for this id */
  canceled = false
  /** why the request was stopped */
  reason?: Error
  /** settles a pending race against the handler */
  onStop?: (reason: Error) => void
  private controller?: AbortController

  constructor (credit: number) {
    this.credit = credit
  }

  get signal (): AbortSignal {
    if (this.controller == null) {
      this.controller = new AbortController()
      if (this.reason != null) this.controller.abort(this.reason)
    }
    return this.controller.signal
  }

  stop (reason: Error, canceled: boolean): void {
    if (this.reason != null) return
    this.reason = reason
    if (canceled) this.canceled = true
    this.controller?.abort(reason)
    this.onStop?.(reason)
  }

  /** Wait for a promise unless the request is stopped first */
  async race<T> (value: Promise<T>): Promise<T> {
    if (this.reason != null) throw this.reason
    try {
      return await new Promise<T>((resolve, reject) => {
        this.onStop = reject
        value.then(resolve, reject)
      })
    } finally {
      this.onStop = undefined
    }
  }
}

function isPromiseLike (value: unknown): value is PromiseLike<unknown> {
  return value != null && typeof (value as { then?: unknown }).then === 'function'
}

/**
 * One inbound stream: reads requests, runs handlers, writes answers
 */
class InboundSession {
  readonly framed: FramedStream
  private readonly owner: DefaultMessaging
  private readonly protocol: string
  private readonly connection: Connection
  private readonly peerKey: string
  private readonly active = new Map<number, ActiveRequest>()
  private readonly idle: IdleWatch

  constructor (protocol: string, stream: Stream, connection: Connection, owner: DefaultMessaging) {
    this.owner = owner
    this.protocol = protocol
    this.connection = connection
    this.peerKey = connection.remotePeer.toString()
    this.framed = new FramedStream(stream, {
      ...owner.framing(connection),
      onFrame: (frame) => { this.onFrame(frame) },
      onBadFrame: (err, id) => {
        // the request is broken: stop its handler, send nothing more for it
        this.active.get(id)?.stop(err, true)
        this.sendError(id, err)
      },
      onClose: () => { this.onClose() }
    })
    this.idle = new IdleWatch(owner.opts.idleTimeout, () => this.active.size === 0, () => {
      this.owner.log('closing idle inbound stream from %s', this.peerKey)
      this.sendError(0, new TimeoutError(`No request for ${this.owner.opts.idleTimeout} ms`))
      this.framed.close()
      // a peer that does not read cannot stall our close for long
      const hardStop = setTimeout(() => { this.framed.abort(new TimeoutError('Idle stream')) }, 1_000)
      hardStop.unref?.()
    })
  }

  get activeCount (): number {
    return this.active.size
  }

  private sendError (id: number, err: { code: string, message: string }): void {
    this.framed.sendFrameNow({
      type: FrameType.ERROR,
      id,
      code: err.code,
      message: err.message.slice(0, MAX_ERROR_MESSAGE)
    })
  }

  private onFrame (frame: Frame): void {
    this.idle.touch()

    switch (frame.type) {
      case FrameType.REQUEST:
      case FrameType.STREAM_REQUEST:
        this.onRequest(frame)
        break
      case FrameType.CANCEL:
        this.active.get(frame.id)?.stop(new CanceledError('Canceled by requester'), true)
        break
      case FrameType.CREDIT: {
        const req = this.active.get(frame.id)
        if (req != null) {
          req.credit = Math.min(req.credit + frame.credit, MAX_WINDOW * 2)
          req.wakeCredit?.()
        }
        break
      }
      case FrameType.ERROR:
        if (frame.id === 0) {
          this.framed.abort(errorFromWire(frame.code, frame.message))
        }
        break
      default:
        // answers have no meaning on an inbound stream; never answer an
        // unexpected frame with another frame that could be answered in turn
        break
    }
  }

  private onRequest (frame: RequestFrame): void {
    if (this.active.has(frame.id)) {
      this.sendError(frame.id, new MalformedFrameError(`Request id ${frame.id} is already in flight`))
      return
    }

    const handler = this.owner.lookup(this.protocol, frame.method)
    if (handler == null) {
      this.sendError(frame.id, new UnknownMethodError(`Unknown method "${frame.method}" on ${this.protocol}`))
      return
    }
    const streaming = frame.type === FrameType.STREAM_REQUEST
    if ((handler.kind === 'stream') !== streaming) {
      this.sendError(frame.id, new UnknownMethodError(`Method "${frame.method}" on ${this.protocol} is ${handler.kind === 'stream' ? 'streaming' : 'unary'}`))
      return
    }

    if (!this.owner.takeSlot(this.peerKey)) {
      this.sendError(frame.id, new TooManyRequestsError(`More than ${this.owner.opts.maxInFlightPerPeer} requests in flight`))
      return
    }

    const req = new ActiveRequest(Math.min(frame.credit ?? this.owner.opts.streamWindow, MAX_WINDOW))
    this.active.set(frame.id, req)

    const connection = this.connection
    const protocol = this.protocol
    const context: RequestContext = {
      peer: connection.remotePeer,
      connection,
      protocol,
      method: frame.method,
      get signal () { return req.signal }
    }

    const done = (): void => {
      this.active.delete(frame.id)
      this.owner.releaseSlot(this.peerKey)
      this.idle.touch()
    }

    if (handler.kind === 'unary') {
      this.runUnary(frame, handler.fn, req, context, done)
      return
    }
    this.runStream(frame, handler.fn, req, context).catch((err) => {
      this.owner.log.error('handler bookkeeping failed - %e', err)
    }).finally(done)
  }

  private timeLimit (frame: RequestFrame): number {
    const own = this.owner.opts.handlerTimeout
    return frame.timeout != null && frame.timeout > 0 ? Math.min(own, frame.timeout) : own
  }

  private respond (frame: RequestFrame, req: ActiveRequest, result: unknown, done: () => void): void {
    if (req.canceled) {
      done()
      return
    }
    let bytes
    try {
      bytes = this.framed.encode({ type: FrameType.RESPONSE, id: frame.id, payload: result ?? null })
    } catch (err: any) {
      this.sendError(frame.id, err instanceof PayloadTooLargeError
        ? err
        : new HandlerError(`Handler result cannot be encoded: ${err?.message ?? err}`))
      done()
      return
    }
    const pending = this.framed.send(bytes)
    if (pending == null) {
      done()
      return
    }
    pending.catch((err: any) => {
      this.owner.log('could not write response - %s', err?.message ?? err)
    }).finally(done)
  }

  private fail (frame: RequestFrame, req: ActiveRequest, err: unknown, done: () => void): void {
    if (!req.canceled) {
      this.sendError(frame.id, errorToWire(err, MAX_ERROR_MESSAGE))
    }
    done()
  }

  /**
   * Run a unary handler. A handler that answers synchronously is answered at
   * once; only a pending promise gets a timer and a race against cancellation.
   */
  private runUnary (frame: RequestFrame, fn: UnaryHandler, req: ActiveRequest, context: RequestContext, done: () => void): void {
    let result: unknown
    try {
      result = fn(frame.payload, context)
    } catch (err) {
      this.fail(frame, req, err, done)
      return
    }
    if (!isPromiseLike(result)) {
      this.respond(frame, req, result, done)
      return
    }

    const limit = this.timeLimit(frame)
    const timer = setTimeout(() => {
      req.stop(new TimeoutError(`Handler exceeded ${limit} ms`), false)
    }, limit)
    req.race(Promise.resolve(result)).then(
      (value) => { clearTimeout(timer); this.respond(frame, req, value, done) },
      (err) => { clearTimeout(timer); this.fail(frame, req, err, done) }
    )
  }

  private async runStream (frame: RequestFrame, fn: StreamingHandler, req: ActiveRequest, context: RequestContext): Promise<void> {
    const limit = this.timeLimit(frame)
    let timer: ReturnType<typeof setTimeout> | undefined
    const rearm = (): void => {
      clearTimeout(timer)
      timer = setTimeout(() => {
        req.stop(new TimeoutError(`Streaming handler idle for ${limit} ms`), false)
      }, limit)
    }
    rearm()

    let iterator: AsyncIterator<unknown> | Iterator<unknown> | undefined
    try {
      const source = fn(frame.payload, context)
      iterator = Symbol.asyncIterator in source
        ? source[Symbol.asyncIterator]()
        : source[Symbol.iterator]()

      while (true) {
        const next = await req.race(Promise.resolve(iterator.next()))
        if (next.done === true) {
          break
        }
        while (req.credit <= 0) {
          await req.race(new Promise<void>(resolve => { req.wakeCredit = resolve }))
          req.wakeCredit = undefined
        }
        req.credit--
        let item
        try {
          item = this.framed.encode({ type: FrameType.ITEM, id: frame.id, payload: next.value ?? null })
        } catch (err: any) {
          throw err instanceof PayloadTooLargeError ? err : new HandlerError(`Stream item cannot be encoded: ${err?.message ?? err}`)
        }
        await req.race(this.framed.write(item))
        rearm()
      }
      this.framed.sendFrameNow({ type: FrameType.END, id: frame.id })
    } catch (err: any) {
      if (!req.canceled) {
        this.sendError(frame.id, err instanceof PayloadTooLargeError ? err : errorToWire(err, MAX_ERROR_MESSAGE))
      }
      // let the handler's generator run its finally blocks
      Promise.resolve(iterator?.return?.()).catch(() => {})
    } finally {
      clearTimeout(timer)
    }
  }

  private onClose (): void {
    this.idle.stop()
    for (const req of this.active.values()) {
      req.stop(new StreamClosedError('Inbound stream closed'), true)
    }
    this.owner.sessionClosed(this)
  }

  close (err: Error): void {
    this.framed.abort(err)
  }
}

class DefaultMessaging implements Messaging, Startable {
  readonly opts: Defaults
  readonly log: Logger
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
    this.log = components.logger.forComponent('ioa:transport:messaging')
    this.opts = { ...MESSAGING_DEFAULTS }
    for (const [key, value] of Object.entries(init)) {
      if (value == null) continue
      if (!(key in MESSAGING_DEFAULTS) || typeof value !== 'number' || !Number.isInteger(value) || value <= 0 || value > MAX_TIMEOUT) {
        throw new InvalidArgumentError(`Invalid messaging option ${key}=${String(value)}`)
      }
      ;(this.opts as unknown as Record<string, number>)[key] = value
    }
    this.opts.streamWindow = Math.min(this.opts.streamWindow, MAX_WINDOW)
    this.budgets = new PeerBudgets(this.opts, this.opts.maxFrameSize, this.log)
  }

  /** What every framed stream to or from `connection` shares */
  framing (connection: Connection): Pick<FramedStreamInit, 'maxFrameSize' | 'log' | 'scan' | 'account' | 'charge'> {
    return { maxFrameSize: this.opts.maxFrameSize, log: this.log, ...this.budgets.forConnection(connection) }
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

  private async channel (target: MessageTarget, protocol: string, signal: AbortSignal): Promise<OutboundChannel> {
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
        if (signal.aborted) throw signal.reason
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
        if (signal.aborted) throw signal.reason
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
      open.catch(() => {}).finally(() => { this.opening.delete(known) })
    }

    return open
  }

  /**
   * Combine the caller's signal with the call's timeout
   */
  private guard (options: RequestOptions, what: string): { signal: AbortSignal, timeout: number, done(): void } {
    const timeout = this.timeoutOf(options)
    const controller = new AbortController()
    const timer = setTimeout(() => {
      controller.abort(new TimeoutError(`${what} timed out after ${timeout} ms`))
    }, timeout)
    const outer = options.signal
    const onAbort = (): void => {
      controller.abort(new CanceledError(`${what} canceled`, { cause: outer?.reason }))
    }
    if (outer?.aborted === true) {
      onAbort()
    } else {
      outer?.addEventListener('abort', onAbort, { once: true })
    }
    return {
      signal: controller.signal,
      timeout,
      done: () => {
        clearTimeout(timer)
        outer?.removeEventListener('abort', onAbort)
      }
    }
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

    // warm path: an open stream with a free slot, no dial and no extra promise
    const peer = targetPeer(target)
    let channel = peer != null ? this.channels.get(`${peer}|${protocol}`) : undefined
    if (channel?.isOpen !== true || !channel.tryAcquire()) {
      const guard = this.guard({ timeout, signal: options.signal }, what)
      try {
        channel = await this.channel(target, protocol, guard.signal)
        await channel.acquire(guard.signal)
      } catch (err: any) {
        if (guard.signal.aborted) {
          throw guard.signal.reason
        }
        throw err
      } finally {
        guard.done()
      }
    }
    return this.call<T>(channel, method, payload, deadline, timeout, options.signal, what)
  }

  /**
   * Send one request on a channel whose slot the caller holds; the slot is
   * released exactly once, when the call settles
   */
  private async call<T> (channel: OutboundChannel, method: string, payload: unknown, deadline: number, timeout: number, signal: AbortSignal | undefined, what: string): Promise<T> {
    const remaining = deadline - Date.now()
    if (remaining <= 0) {
      channel.release()
      throw new TimeoutError(`${what} timed out after ${timeout} ms`)
    }
    const id = channel.newId()
    let bytes
    try {
      bytes = channel.framed.encode({ type: FrameType.REQUEST, id, method, payload, timeout: Math.ceil(remaining) })
    } catch (err) {
      channel.release()
      throw err
    }

    return new Promise<T>((resolve, reject) => {
      let settled = false
      const settle = (err: Error | undefined, value?: unknown): void => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        signal?.removeEventListener('abort', onAbort)
        channel.release()
        if (err != null) {
          reject(err)
        } else {
          resolve(value as T)
        }
      }
      const timer = setTimeout(() => {
        channel.cancel(id)
        settle(new TimeoutError(`${what} timed out after ${timeout} ms`))
      }, remaining)
      const onAbort = (): void => {
        channel.cancel(id)
        settle(new CanceledError(`${what} canceled`, { cause: signal?.reason }))
      }
      signal?.addEventListener('abort', onAbort, { once: true })
      channel.register(id, {
        onResponse: (value) => { settle(undefined, value) },
        fail: (err) => { settle(err) }
      })
      channel.framed.send(bytes)?.catch((err: Error) => {
        channel.unregister(id)
        settle(err)
      })
    })
  }

  async * stream<T = unknown> (target: MessageTarget, protocol: string, method: string, payload: unknown = null, options: RequestOptions = {}): AsyncGenerator<T, void, undefined> {
    if (!this.started) {
      throw new NotStartedError()
    }
    validateName(protocol, method)
    const what = `Stream ${protocol} ${method}`
    const window = this.opts.streamWindow
    const itemTimeout = options.timeout ?? this.opts.requestTimeout
    const outer = options.signal

    // the connection and first item share one guard; each next item gets a
    // fresh one so a long stream is bounded per item, not in total
    let guard = this.guard({ timeout: itemTimeout, signal: outer }, what)
    let channel: OutboundChannel | undefined
    let id = 0
    let finished = false
    let acquired = false

    const queue: unknown[] = []
    /** items the server may still send under the credit granted so far */
    let granted = window
    let ended = false
    let failure: Error | undefined
    let wake: (() => void) | undefined

    try {
      channel = await raceSignal(this.channel(target, protocol, guard.signal), guard.signal)
      await channel.acquire(guard.signal)
      acquired = true
      id = channel.newId()
      const bytes = channel.framed.encode({
        type: FrameType.STREAM_REQUEST,
        id,
        method,
        payload,
        timeout: guard.timeout,
        credit: window
      })
      channel.register(id, {
        onItem: (value) => {
          if (granted <= 0) {
            failure = new MalformedFrameError('Server sent more items than the granted credit')
            channel?.cancel(id)
          } else {
            granted--
            queue.push(value)
          }
          wake?.()
        },
        onEnd: () => { ended = true; wake?.() },
        fail: (err) => { failure = err; wake?.() }
      })
      await channel.framed.write(bytes, guard.signal)

      let consumed = 0
      while (true) {
        if (queue.length > 0) {
          const item = queue.shift() as T
          consumed++
          if (consumed >= Math.ceil(window / 2) && !ended) {
            channel.framed.sendFrameNow({ type: FrameType.CREDIT, id, credit: consumed })
            granted += consumed
            consumed = 0
          }
          guard.done()
          guard = this.guard({ timeout: itemTimeout, signal: outer }, what)
          yield item
          continue
        }
        if (failure != null) {
          throw failure
        }
        if (ended) {
          finished = true
          return
        }
        await raceSignal(new Promise<void>(resolve => { wake = resolve }), guard.signal)
        wake = undefined
      }
    } catch (err: any) {
      if (guard.signal.aborted) {
        throw guard.signal.reason
      }
      throw err
    } finally {
      guard.done()
      if (channel != null && id !== 0) {
        if (!finished && failure == null) {
          channel.cancel(id)
        } else {
          channel.unregister(id)
        }
      }
      if (channel != null && acquired) {
        channel.release()
      }
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
