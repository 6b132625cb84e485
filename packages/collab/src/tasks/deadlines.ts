/**
 * One timer for the deadlines of every running task of an executor, in
 * place of a timer per task: a task that ends before its deadline (nearly
 * all do; the default deadline is an hour away) costs a map entry, not a
 * timer armed and cleared. The timer is armed for the earliest deadline;
 * when it fires, the tasks whose deadline has passed are handed to `onDue`
 * and it is armed again for the earliest one left. Bounded by the tasks
 * running (`maxActiveTasks`).
 */

/** Longest delay a Node.js timer takes (about 24.8 days); a later deadline is looked at again then */
const MAX_DELAY = 2_147_483_647

export class Deadlines<T> {
  private readonly due = new Map<T, number>()
  private readonly onDue: (item: T) => void
  private readonly keepArmed: boolean
  private timer?: ReturnType<typeof setTimeout>
  /** When the armed timer fires (Infinity: none armed) */
  private armedFor = Infinity

  /**
   * `keepArmed`: the timer stays armed when the last item goes (it finds
   * nothing when it fires), so that items added and deleted one after the
   * other, each due later than the one before, arm no timer each
   */
  constructor (onDue: (item: T) => void, options: { keepArmed?: boolean } = {}) {
    this.onDue = onDue
    this.keepArmed = options.keepArmed === true
  }

  get size (): number {
    return this.due.size
  }

  /** Watch `item` until `at` (ms since the epoch); a finite `at` only */
  add (item: T, at: number): void {
    this.due.set(item, at)
    if (at < this.armedFor) this.arm(at)
  }

  /** Stop watching `item` (it ended); the timer stays armed while others are watched */
  delete (item: T): void {
    if (!this.due.delete(item) || this.due.size > 0 || this.keepArmed) return
    clearTimeout(this.timer)
    this.timer = undefined
    this.armedFor = Infinity
  }

  /** Stop watching every item and disarm the timer */
  clear (): void {
    this.due.clear()
    clearTimeout(this.timer)
    this.timer = undefined
    this.armedFor = Infinity
  }

  private arm (at: number): void {
    clearTimeout(this.timer)
    this.armedFor = at
    this.timer = setTimeout(() => { this.fire() }, Math.min(Math.max(0, at - Date.now()), MAX_DELAY))
    this.timer.unref?.()
  }

  private fire (): void {
    this.timer = undefined
    this.armedFor = Infinity
    const now = Date.now()
    const passed: T[] = []
    for (const [item, at] of this.due) {
      if (at <= now) passed.push(item)
    }
    try {
      for (const item of passed) {
        this.due.delete(item)
        this.onDue(item)
      }
    } finally {
      // (armed again also when `onDue` threw: the other deadlines still hold)
      let next = Infinity
      for (const at of this.due.values()) next = Math.min(next, at)
      if (next < this.armedFor) this.arm(next)
    }
  }
}
