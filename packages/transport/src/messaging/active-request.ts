import { TimeoutError } from '../errors.js'
import type { Expiring } from './deadlines.js'

/**
 * A request being served. Its AbortController is made only when someone asks
 * for the signal, so a quick handler that never looks at it costs nothing.
 * Its time limit is a deadline the session's one timer watches (`expire`).
 */
export class ActiveRequest implements Expiring {
  credit: number
  /** when the handler runs out of time (epoch ms): a unary handler's end, a streaming handler's next item */
  deadline = Infinity
  /** the time limit, ms (for the error) */
  limit = 0
  /** a streaming handler: the limit is per item */
  streaming = false
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

  /** The session's timer found the deadline passed */
  expire (): void {
    this.deadline = Infinity
    this.stop(new TimeoutError(this.streaming ? `Streaming handler idle for ${this.limit} ms` : `Handler exceeded ${this.limit} ms`), false)
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

export function isPromiseLike (value: unknown): value is PromiseLike<unknown> {
  return value != null && typeof (value as { then?: unknown }).then === 'function'
}
