/**
 * Calls `onIdle` once nothing happened for `ms` while `isIdle()` holds. Hot
 * paths only record the time (`touch`); one timer re-arms itself, instead of
 * a timer being cleared and created for every request.
 */
export class IdleWatch {
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
