/**
 * The signal a call runs under until its first answer (and a stream under
 * until each next item): the caller's signal and the call's timeout, combined
 * with `any-signal`. The timeout is a plain timer cleared by `done()` rather
 * than `AbortSignal.timeout`, so a finished call leaves no timer behind; a
 * stream restarts it per item (`rearm()`) instead of making a new guard.
 */
import { anySignal } from 'any-signal'
import { CanceledError, TimeoutError } from '../errors.js'
import type { ClearableSignal } from 'any-signal'

export interface CallGuard {
  /** Aborted when the caller aborts or the timeout passes */
  readonly signal: ClearableSignal
  /** The timeout, in ms */
  readonly timeout: number
  /**
   * Why the guard aborted, as the call reports it: `TimeoutError` when the
   * time ran out, `CanceledError` (the caller's reason as its `cause`) when
   * the caller aborted. Only meaningful once `signal.aborted`.
   */
  error(): Error
  /** Start the timeout again from now (a stream's next item), unless the guard aborted already */
  rearm(): void
  /** Clear the timer and the listener on the caller's signal */
  done(): void
}

/**
 * Guard a call named `what` (for messages) with `timeout` ms (already
 * checked) and the caller's `outer` signal
 */
export function callGuard (what: string, timeout: number, outer?: AbortSignal): CallGuard {
  const timer = new AbortController()
  const expire = (): void => {
    timer.abort(new TimeoutError(`${what} timed out after ${timeout} ms`))
  }
  let handle = setTimeout(expire, timeout)
  const signal = anySignal([timer.signal, outer])
  let error: Error | undefined
  return {
    signal,
    timeout,
    error: () => {
      // whichever aborted first is the reason `signal` took
      error ??= timer.signal.aborted && signal.reason === timer.signal.reason
        ? timer.signal.reason
        : new CanceledError(`${what} canceled`, { cause: outer?.reason })
      return error as Error
    },
    rearm: () => {
      if (signal.aborted) return
      // Node.js timers restart in place; elsewhere a new timer replaces the old one
      if (typeof (handle as { refresh?: unknown }).refresh === 'function') {
        (handle as unknown as { refresh(): void }).refresh()
      } else {
        clearTimeout(handle)
        handle = setTimeout(expire, timeout)
      }
    },
    done: () => {
      clearTimeout(handle)
      signal.clear()
    }
  }
}
