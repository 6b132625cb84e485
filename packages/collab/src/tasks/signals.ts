/**
 * A signal aborted when any of several signals aborts, with its reason, that
 * can be unlinked from them once it is no longer needed (so long-lived
 * signals do not collect listeners)
 */

/** A signal aborted with the first of `signals` to abort; `done()` unlinks it */
export function linked (...signals: Array<AbortSignal | undefined>): { signal: AbortSignal, done(): void } {
  const controller = new AbortController()
  const sources = signals.filter((s): s is AbortSignal => s != null)
  const listeners = sources.map(s => [s, (): void => { controller.abort(s.reason) }] as const)
  const aborted = sources.find(s => s.aborted)
  if (aborted != null) controller.abort(aborted.reason)
  else for (const [s, on] of listeners) s.addEventListener('abort', on, { once: true })
  return {
    signal: controller.signal,
    done: () => {
      for (const [s, on] of listeners) s.removeEventListener('abort', on)
    }
  }
}
