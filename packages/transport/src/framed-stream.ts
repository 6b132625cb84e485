/**
 * A libp2p stream carrying length-prefixed messaging frames in both
 * directions. Shared by the requesting side (outbound channel) and the
 * answering side (inbound session).
 */
import * as varint from 'uint8-varint'
import { decodeFrame, encodeFramePrefixed } from './codec.js'
import { MalformedFrameError, MessagingError, PayloadTooLargeError, StreamClosedError } from './errors.js'
import { FrameReader } from './length-prefix.js'
import { WriteCoalescer } from './write-coalescer.js'
import type { BufferAccount } from './buffer-budget.js'
import type { ScanLimits } from './cbor-scan.js'
import type { DecodeFrameOptions, Frame } from './codec.js'
import type { Logger, Stream } from '@libp2p/interface'
import type { Uint8ArrayList } from 'uint8arraylist'

/**
 * Decode cost of one data item, in bytes: decoding a frame costs its length
 * plus this much per item (`spec/transport.md` section 11)
 */
export const ITEM_COST = 16

/** How long a graceful close may take before the stream is reset */
const CLOSE_TIMEOUT = 5_000

export interface FramedStreamInit {
  maxFrameSize: number
  /** Most bytes of frames written in one turn that are sent as one write (`WriteCoalescer`) */
  coalesceBytes: number
  log: Logger
  /** Item and nesting limits of one frame body */
  scan: ScanLimits
  /** Counts the bytes this stream holds in a partial frame against the remote's budgets */
  account: BufferAccount
  /**
   * Charge decoding work to the remote: a frame's length plus a cost per
   * item, after its pre-decode scan and before it is decoded. Returns the
   * error to close the stream with when the remote's budget is spent.
   */
  charge(cost: number): MessagingError | undefined
  /** Called for every well-formed frame */
  onFrame(frame: Frame): void
  /** Called for a frame that parsed far enough to read its id but broke a rule */
  onBadFrame(err: MalformedFrameError, id: number): void
  /** Called once when the stream is gone, with the reason if it failed */
  onClose(err?: Error): void
}

/** What every framed stream of a connection shares (the rest is per stream) */
export type FramingInit = Pick<FramedStreamInit, 'maxFrameSize' | 'coalesceBytes' | 'log' | 'scan' | 'account' | 'charge'>

export class FramedStream {
  readonly stream: Stream
  private readonly reader: FrameReader
  private readonly init: FramedStreamInit
  private readonly decodeOptions: DecodeFrameOptions
  /** frames written in this turn, sent together at its end */
  private readonly out: WriteCoalescer
  private closed = false
  /** length of the frame being decoded, for its decode charge */
  private frameBytes = 0
  private charged = false

  constructor (stream: Stream, init: FramedStreamInit) {
    this.stream = stream
    this.init = init
    this.reader = new FrameReader(init.maxFrameSize)
    this.out = new WriteCoalescer(init.coalesceBytes, (data) => { this.flushTo(data) })
    this.decodeOptions = {
      ...init.scan,
      beforeDecode: (items) => {
        this.charged = true
        const err = init.charge(this.frameBytes + items * ITEM_COST)
        if (err != null) throw err
      }
    }

    stream.addEventListener('message', (evt) => {
      this.onData(evt.data)
    })
    stream.addEventListener('close', (evt) => {
      this.finish(evt.error)
    })
    stream.addEventListener('remoteCloseWrite', () => {
      // the remote end will send nothing more; nothing we write can be
      // answered, so close our side too
      this.close()
    })
  }

  get isOpen (): boolean {
    return !this.closed && this.stream.status === 'open'
  }

  private onData (data: Uint8Array | Uint8ArrayList): void {
    if (this.closed) {
      return
    }

    try {
      this.reader.push(data)
      while (true) {
        const bytes = this.reader.next()
        if (bytes == null) {
          break
        }
        this.frameBytes = bytes.byteLength
        this.charged = false
        let frame: Frame
        try {
          frame = decodeFrame(bytes, this.decodeOptions)
        } catch (err: any) {
          // a frame refused by the scan still cost its scan
          const spent = this.charged ? undefined : this.init.charge(this.frameBytes)
          if (spent != null) {
            throw spent
          }
          const id = err?.frameId
          if (typeof id === 'number' && id > 0) {
            this.init.log('refusing frame for call %d - %s', id, err.message)
            this.init.onBadFrame(err, id)
            continue
          }
          throw err
        }
        this.init.onFrame(frame)
        if (this.closed) {
          return
        }
      }
      // what is left is one partial frame: it counts against the budgets
      const over = this.init.account.set(this.reader.buffered)
      if (over != null) {
        throw over
      }
    } catch (err: any) {
      // framing is lost or the peer is over a budget: tell it why (best
      // effort), let go of its bytes and drop the stream
      const wireErr = err instanceof MessagingError ? err : new MalformedFrameError(String(err?.message ?? err))
      this.init.log('closing stream after bad input - %s: %s', wireErr.code, wireErr.message)
      this.sendFrameNow({ type: 6, id: 0, code: wireErr.code, message: wireErr.message })
      this.close()
      this.finish(wireErr)
    }
  }

  /**
   * Encode a frame, refusing it locally if it would exceed the frame limit
   */
  encode (frame: Frame): Uint8Array {
    const bytes = encodeFramePrefixed(frame)
    const body = varint.decode(bytes)
    if (body > this.init.maxFrameSize) {
      throw new PayloadTooLargeError(`Encoded frame is ${body} bytes, limit is ${this.init.maxFrameSize}`)
    }
    return bytes
  }

  /**
   * Write an encoded frame, waiting for the stream to drain when its send
   * buffer is full (backpressure)
   */
  async write (bytes: Uint8Array, signal?: AbortSignal): Promise<void> {
    if (!this.isOpen) {
      throw new StreamClosedError('Stream is not open')
    }
    this.out.add(bytes)
    if (!this.stream.writableNeedsDrain) {
      return
    }
    try {
      await this.stream.onDrain({ signal })
    } catch (err: any) {
      if (signal?.aborted === true) {
        throw err
      }
      throw new StreamClosedError(`Stream closed while waiting to write: ${err?.message ?? err}`, { cause: err })
    }
  }

  /**
   * Write an encoded frame. It leaves with the other frames written in this
   * turn (`WriteCoalescer`). Returns `undefined` when the stream can take
   * more (the common case, no promise made), or a promise that settles when
   * its send buffer has drained, or fails when the stream closes first.
   */
  send (bytes: Uint8Array): Promise<void> | undefined {
    if (!this.isOpen) {
      return Promise.reject(new StreamClosedError('Stream is not open'))
    }
    this.out.add(bytes)
    if (!this.stream.writableNeedsDrain) {
      return undefined
    }
    return this.stream.onDrain().catch((err: any) => {
      throw new StreamClosedError(`Stream closed while waiting to write: ${err?.message ?? err}`, { cause: err })
    })
  }

  /** One batch of frames to the stream; a stream that refuses it is gone */
  private flushTo (data: Uint8Array): void {
    if (this.stream.writeStatus !== 'writable') {
      // the stream went away before the end of the turn: its calls have
      // failed (or are failing) with the reason it closed
      this.init.log('dropping %d bytes of frames written to a closed stream', data.byteLength)
      return
    }
    try {
      this.stream.send(data)
    } catch (err: any) {
      this.init.log('could not write %d bytes of frames - %s', data.byteLength, err?.message ?? err)
      this.abort(new StreamClosedError(`Stream not writable: ${err?.message ?? err}`, { cause: err }))
    }
  }

  /**
   * Encode and write a frame without waiting; failures are logged, not thrown.
   * Used for control frames (errors, cancels, credit) where nobody waits.
   */
  sendFrameNow (frame: Frame): void {
    if (!this.isOpen) {
      return
    }
    try {
      this.out.add(this.encode(frame))
    } catch (err: any) {
      this.init.log('could not send control frame - %s', err?.message ?? err)
    }
  }

  /** Close gracefully; pending data (frames of this turn included) is flushed */
  close (): void {
    if (this.stream.status !== 'open') {
      return
    }
    this.out.flush()
    if (this.stream.status !== 'open') {
      return
    }
    this.stream.close({ signal: AbortSignal.timeout(CLOSE_TIMEOUT) }).catch((err: any) => {
      this.stream.abort(err)
    })
  }

  /** Drop the stream immediately */
  abort (err: Error): void {
    this.out.clear()
    if (this.stream.status === 'open' || this.stream.status === 'closing') {
      this.stream.abort(err)
    }
    this.finish(err)
  }

  private finish (err?: Error): void {
    if (this.closed) {
      return
    }
    this.closed = true
    this.reader.clear()
    this.out.clear()
    this.init.account.release()
    this.init.onClose(err)
  }
}
