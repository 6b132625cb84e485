/**
 * The responder side: one inbound stream, its requests and the handlers that
 * answer them (unary and streamed, with credit, time limits and cancellation)
 */
import { FrameType, MAX_ERROR_MESSAGE } from '../codec.js'
import {
  CanceledError, HandlerError, MalformedFrameError, PayloadTooLargeError, StreamClosedError, TimeoutError, TooManyRequestsError,
  UnknownMethodError, errorFromWire, errorToWire
} from '../errors.js'
import { FramedStream } from '../framed-stream.js'
import { ActiveRequest, isPromiseLike } from './active-request.js'
import { MAX_WINDOW } from './api.js'
import { Deadlines } from './deadlines.js'
import { IdleWatch } from './idle-watch.js'
import type { Handler, MessagingDefaults, RequestContext, StreamingHandler, UnaryHandler } from './api.js'
import type { Frame, RequestFrame } from '../codec.js'
import type { FramingInit } from '../framed-stream.js'
import type { Connection, CounterGroup, Logger, Stream } from '@libp2p/interface'

/** What a session needs from the service that owns it */
export interface SessionOwner {
  readonly opts: Pick<MessagingDefaults, 'idleTimeout' | 'maxInFlightPerPeer' | 'streamWindow' | 'handlerTimeout'>
  /** logger of the responder side */
  readonly inboundLog: Logger
  /** request counters, when the node has metrics */
  readonly requests?: CounterGroup<'served' | 'refused'>
  framing(connection: Connection): FramingInit
  lookup(protocol: string, method: string): Handler | undefined
  /** take one of the remote peer's request slots, false when all are taken */
  takeSlot(peer: string): boolean
  releaseSlot(peer: string): void
  sessionClosed(session: InboundSession): void
}

/**
 * One inbound stream: reads requests, runs handlers, writes answers
 */
export class InboundSession {
  readonly framed: FramedStream
  private readonly owner: SessionOwner
  private readonly protocol: string
  private readonly connection: Connection
  private readonly peerKey: string
  private readonly active = new Map<number, ActiveRequest>()
  private readonly idle: IdleWatch
  /** the one timer of the handlers' time limits */
  private readonly deadlines = new Deadlines(() => this.active.values())

  constructor (protocol: string, stream: Stream, connection: Connection, owner: SessionOwner) {
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
      this.owner.inboundLog('closing idle inbound stream from %s', this.peerKey)
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
      this.owner.requests?.increment({ refused: true })
      this.sendError(frame.id, new UnknownMethodError(`Unknown method "${frame.method}" on ${this.protocol}`))
      return
    }
    const streaming = frame.type === FrameType.STREAM_REQUEST
    if ((handler.kind === 'stream') !== streaming) {
      this.owner.requests?.increment({ refused: true })
      this.sendError(frame.id, new UnknownMethodError(`Method "${frame.method}" on ${this.protocol} is ${handler.kind === 'stream' ? 'streaming' : 'unary'}`))
      return
    }

    if (!this.owner.takeSlot(this.peerKey)) {
      this.owner.requests?.increment({ refused: true })
      this.sendError(frame.id, new TooManyRequestsError(`More than ${this.owner.opts.maxInFlightPerPeer} requests in flight`))
      return
    }

    this.owner.requests?.increment({ served: true })
    const req = new ActiveRequest(Math.min(frame.credit ?? this.owner.opts.streamWindow, MAX_WINDOW))
    this.active.set(frame.id, req)

    const connection = this.connection
    const protocol = this.protocol
    const context: RequestContext = {
      peer: connection.remotePeer,
      connection,
      protocol,
      method: frame.method,
      canonical: frame.nonCanonical !== true,
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
      this.owner.inboundLog.error('handler bookkeeping failed - %e', err)
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
      this.owner.inboundLog('could not write response - %s', err?.message ?? err)
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

    req.limit = this.timeLimit(frame)
    req.deadline = Date.now() + req.limit
    this.deadlines.watch(req.deadline)
    req.race(Promise.resolve(result)).then(
      (value) => { this.respond(frame, req, value, done) },
      (err) => { this.fail(frame, req, err, done) }
    )
  }

  private async runStream (frame: RequestFrame, fn: StreamingHandler, req: ActiveRequest, context: RequestContext): Promise<void> {
    const limit = this.timeLimit(frame)
    req.limit = limit
    req.streaming = true
    req.deadline = Date.now() + limit
    this.deadlines.watch(req.deadline)

    let iterator: AsyncIterator<unknown> | Iterator<unknown> | undefined
    try {
      const source = fn(frame.payload, context)
      iterator = Symbol.asyncIterator in source
        ? source[Symbol.asyncIterator]()
        : source[Symbol.iterator]()

      while (true) {
        // a synchronous source is read without a promise per item
        const step = iterator.next()
        let next: IteratorResult<unknown>
        if (isPromiseLike(step)) {
          next = await req.race(Promise.resolve(step))
        } else if (req.reason != null) {
          throw req.reason
        } else {
          next = step
        }
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
        const pending = this.framed.send(item)
        if (pending != null) {
          await req.race(pending)
        }
        // the next item has the full limit again; the timer catches up when it fires
        req.deadline = Date.now() + limit
      }
      this.framed.sendFrameNow({ type: FrameType.END, id: frame.id })
    } catch (err: any) {
      if (!req.canceled) {
        this.sendError(frame.id, err instanceof PayloadTooLargeError ? err : errorToWire(err, MAX_ERROR_MESSAGE))
      }
      // let the handler's generator run its finally blocks
      Promise.resolve(iterator?.return?.()).catch((returnErr: unknown) => {
        this.owner.inboundLog.error('streaming handler for %s %s failed while finishing - %e', this.protocol, frame.method, returnErr)
      })
    }
  }

  private onClose (): void {
    this.idle.stop()
    this.deadlines.stop()
    for (const req of this.active.values()) {
      req.stop(new StreamClosedError('Inbound stream closed'), true)
    }
    this.owner.sessionClosed(this)
  }

  close (err: Error): void {
    this.framed.abort(err)
  }
}
