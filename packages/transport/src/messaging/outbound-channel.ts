/**
 * The requester side: one outbound stream per (peer, protocol), its request
 * slots (client-side backpressure) and the calls waiting for answers
 */
import { raceSignal } from 'race-signal'
import { FrameType } from '../codec.js'
import { MalformedFrameError, StreamClosedError, errorFromWire } from '../errors.js'
import { FramedStream } from '../framed-stream.js'
import { Deadlines } from './deadlines.js'
import { IdleWatch } from './idle-watch.js'
import type { Expiring } from './deadlines.js'
import type { MessagingDefaults } from './api.js'
import type { Frame } from '../codec.js'
import type { MessagingError } from '../errors.js'
import type { FramingInit } from '../framed-stream.js'
import type { Connection, Logger, Stream } from '@libp2p/interface'

/** What a channel needs from the service that owns it */
export interface ChannelOwner {
  readonly opts: Pick<MessagingDefaults, 'outboundIdleTimeout' | 'maxInFlightPerPeer'>
  /** logger of the requester side */
  readonly outboundLog: Logger
  framing(connection: Connection): FramingInit
  channelClosed(channel: OutboundChannel): void
}

/** A call waiting for its answer on a channel; one with a `deadline` is expired by the channel's timer */
export interface PendingCall extends Expiring {
  onResponse?(payload: unknown): void
  onItem?(payload: unknown): void
  onEnd?(): void
  fail(err: Error): void
}

/**
 * One outbound stream to a peer for one protocol, carrying many requests
 */
export class OutboundChannel {
  readonly key: string
  readonly framed: FramedStream
  private readonly owner: ChannelOwner
  private readonly calls = new Map<number, PendingCall>()
  private nextId = 1
  private inFlight = 0
  private readonly waiters: Array<() => void> = []
  private readonly idle: IdleWatch
  /** the one timer of the calls' deadlines */
  private readonly deadlines = new Deadlines(() => this.calls.values())

  constructor (key: string, stream: Stream, connection: Connection, owner: ChannelOwner) {
    this.key = key
    this.owner = owner
    this.framed = new FramedStream(stream, {
      ...owner.framing(connection),
      onFrame: (frame) => { this.onFrame(frame) },
      onBadFrame: (err, id) => {
        const call = this.calls.get(id)
        if (call != null) {
          owner.outboundLog('bad answer to call %d on %s - %s', id, key, err.message)
          this.cancel(id)
          call.fail(err)
        }
      },
      onClose: (err) => { this.onClose(err) }
    })
    this.idle = new IdleWatch(owner.opts.outboundIdleTimeout, () => this.inFlight === 0 && this.calls.size === 0, () => {
      owner.outboundLog('closing idle outbound stream %s', key)
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
    if (call.deadline != null) {
      this.deadlines.watch(call.deadline)
    }
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
        this.owner.outboundLog('refusing request %d sent on outbound stream %s', frame.id, this.key)
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
    this.deadlines.stop()
    this.owner.channelClosed(this)
    const reason = err instanceof Error && (err as MessagingError).code != null
      ? err
      : new StreamClosedError(err != null ? `Stream closed: ${err.message}` : 'Stream closed', { cause: err })
    if (this.calls.size > 0) {
      this.owner.outboundLog('stream %s closed with %d call(s) pending - %s', this.key, this.calls.size, reason.message)
    }
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
