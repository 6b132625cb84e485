/**
 * The lookups of this node that are running (discovery marks each from its
 * start to its end), so that work a lookup does not need waits for their
 * end: a newcomer's gossip hello (spec `interconnect.md` 12.4) when it
 * announces nothing.
 */
export class RunningLookups {
  private running = 0
  private readonly idle = new Set<() => void>()

  /** Mark a lookup as running; the returned function ends it (once) */
  started (): () => void {
    this.running++
    let ended = false
    return () => {
      if (ended) return
      ended = true
      if (--this.running === 0) {
        for (const wake of this.idle) wake()
        this.idle.clear()
      }
    }
  }

  /** Resolves once no lookup runs, at most `maxWait` ms or until `signal` aborts */
  async quiet (maxWait: number, signal?: AbortSignal): Promise<void> {
    if (this.running === 0 || maxWait <= 0 || signal?.aborted === true) return
    await new Promise<void>(resolve => {
      const done = (): void => {
        clearTimeout(timer)
        signal?.removeEventListener('abort', done)
        this.idle.delete(done)
        resolve()
      }
      const timer = setTimeout(done, maxWait)
      timer.unref?.()
      signal?.addEventListener('abort', done, { once: true })
      this.idle.add(done)
    })
  }
}
