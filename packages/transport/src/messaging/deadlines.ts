/**
 * One timer for all the calls of a stream, each with its own deadline,
 * instead of a timer made and cleared per call (or per item). The timer is
 * set for the earliest deadline known when it was set; a call that moves
 * its deadline later only writes the field. When the timer fires it expires
 * every call whose deadline has passed and sets itself for the earliest
 * deadline left. So a steady flow of calls with the same timeout costs one
 * timer per timeout period, not one per call.
 */

/** A call that may have a deadline (epoch ms; none when absent or `Infinity`) */
export interface Expiring {
  readonly deadline?: number
  /** The deadline passed */
  expire?(): void
}

export class Deadlines {
  private readonly entries: () => Iterable<Expiring>
  private timer?: ReturnType<typeof setTimeout>
  /** when the timer fires; `Infinity` when there is none */
  private at = Infinity
  private readonly fire = (): void => {
    this.timer = undefined
    this.at = Infinity
    const now = Date.now()
    let next = Infinity
    const due: Expiring[] = []
    for (const entry of this.entries()) {
      const deadline = entry.deadline
      if (deadline == null) {
        continue
      }
      if (deadline <= now) {
        due.push(entry)
      } else if (deadline < next) {
        next = deadline
      }
    }
    // expiring a call may remove it from the entries: not while iterating them
    for (const entry of due) {
      entry.expire?.()
    }
    this.watch(next)
  }

  /** `entries` lists every call that may have a deadline (read when the timer fires) */
  constructor (entries: () => Iterable<Expiring>) {
    this.entries = entries
  }

  /** A call now has this deadline: make sure the timer fires by then */
  watch (deadline: number): void {
    if (deadline >= this.at || deadline === Infinity) {
      return
    }
    clearTimeout(this.timer)
    this.at = deadline
    this.timer = setTimeout(this.fire, Math.max(0, deadline - Date.now()))
  }

  stop (): void {
    clearTimeout(this.timer)
    this.timer = undefined
    this.at = Infinity
  }
}
