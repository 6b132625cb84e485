/**
 * A streamed request being read on a channel: the items received and not yet
 * read, the credit the server may still use, and why the stream stopped.
 * Like a unary call it is its own abort listener on the caller's signal
 * (`handleEvent`) and its own deadline entry, which the channel's one timer
 * expires (`expire`): a stream makes no timer, no AbortController and no
 * combined signal, and a next item moves its deadline by writing the field.
 */
import { CanceledError, MalformedFrameError, TimeoutError } from '../errors.js'
import type { Expiring } from './deadlines.js'
import type { OutboundChannel, PendingCall } from './outbound-channel.js'

export class StreamCall implements PendingCall, Expiring {
  /** when the next item is due (epoch ms): the timeout from the start, then from each item read */
  deadline: number
  /** items received, not yet read */
  readonly queue: unknown[] = []
  /** items the server may still send under the credit granted so far */
  granted: number
  ended = false
  /** the server's error, or a broken rule of the stream */
  failure?: Error
  /** the deadline passed, or the caller aborted: why the reader stops once nothing is queued */
  stopped?: Error
  /** wakes the reader waiting for news */
  wake?: () => void
  private readonly channel: OutboundChannel
  private readonly id: number
  private readonly timeout: number
  private readonly signal: AbortSignal | undefined
  private readonly what: string

  constructor (channel: OutboundChannel, id: number, timeout: number, window: number, deadline: number, signal: AbortSignal | undefined, what: string) {
    this.channel = channel
    this.id = id
    this.timeout = timeout
    this.granted = window
    this.deadline = deadline
    this.signal = signal
    this.what = what
    signal?.addEventListener('abort', this, { once: true })
  }

  onItem (value: unknown): void {
    if (this.granted <= 0) {
      this.failure = new MalformedFrameError('Server sent more items than the granted credit')
      this.channel.cancel(this.id)
    } else {
      this.granted--
      this.queue.push(value)
    }
    this.wake?.()
  }

  onEnd (): void {
    this.ended = true
    this.wake?.()
  }

  fail (err: Error): void {
    this.failure = err
    this.wake?.()
  }

  /** The channel's timer found the deadline passed */
  expire (): void {
    this.deadline = Infinity
    this.stopped ??= new TimeoutError(`${this.what} timed out after ${this.timeout} ms`)
    this.wake?.()
  }

  /** The caller's signal aborted */
  handleEvent (): void {
    this.stopped ??= new CanceledError(`${this.what} canceled`, { cause: this.signal?.reason })
    this.wake?.()
  }

  /** The reader is done with the stream (its listener goes; the caller cancels or unregisters the id) */
  close (): void {
    this.signal?.removeEventListener('abort', this)
    this.wake = undefined
  }
}
