/**
 * A unary request waiting for its answer on a channel: one object per call
 * that is its own abort listener (`handleEvent`) and its own deadline entry
 * (`expire`, driven by the channel's one timer), so a call makes no timer
 * and no closure beyond its promise's.
 */
import { CanceledError, TimeoutError } from '../errors.js'
import type { Expiring } from './deadlines.js'
import type { OutboundChannel, PendingCall } from './outbound-channel.js'

export class UnaryCall implements PendingCall, Expiring {
  readonly deadline: number
  readonly promise: Promise<unknown>
  private readonly channel: OutboundChannel
  private readonly id: number
  private readonly signal: AbortSignal | undefined
  private readonly what: string
  private readonly timeout: number
  private resolve!: (value: unknown) => void
  private reject!: (err: Error) => void
  private settled = false

  /**
   * Call `id` on `channel`, whose request slot the caller holds (released
   * when the call settles), named `what` in errors, failing with
   * `TimeoutError` at `deadline` (`timeout` ms after it started)
   */
  constructor (channel: OutboundChannel, id: number, deadline: number, timeout: number, signal: AbortSignal | undefined, what: string) {
    this.channel = channel
    this.id = id
    this.deadline = deadline
    this.timeout = timeout
    this.signal = signal
    this.what = what
    this.promise = new Promise((resolve, reject) => {
      this.resolve = resolve
      this.reject = reject
    })
    signal?.addEventListener('abort', this, { once: true })
    channel.register(id, this)
  }

  onResponse (payload: unknown): void {
    this.settle(undefined, payload)
  }

  fail (err: Error): void {
    this.settle(err)
  }

  /** The channel's timer found the deadline passed */
  expire (): void {
    this.channel.cancel(this.id)
    this.settle(new TimeoutError(`${this.what} timed out after ${this.timeout} ms`))
  }

  /** The caller's signal aborted */
  handleEvent (): void {
    this.channel.cancel(this.id)
    this.settle(new CanceledError(`${this.what} canceled`, { cause: this.signal?.reason }))
  }

  /** Writing the request failed (the stream closed while it waited to drain) */
  sendFailed (err: Error): void {
    this.channel.unregister(this.id)
    this.settle(err)
  }

  private settle (err: Error | undefined, value?: unknown): void {
    if (this.settled) return
    this.settled = true
    this.signal?.removeEventListener('abort', this)
    this.channel.release()
    if (err != null) {
      this.reject(err)
    } else {
      this.resolve(value)
    }
  }
}
