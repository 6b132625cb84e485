/**
 * Retention of finished tasks (spec/collab-tasks.md 9.1): an executor keeps a
 * terminal task, and the idempotency key that names it, for `maxAge` after it
 * finished and keeps at most `maxTasks` of them, oldest removed first, but
 * never before the task's envelope could no longer be replayed.
 */
import { positiveInteger } from '../options.js'

export interface TaskRetentionInit {
  /**
   * Longest time a finished task (and its idempotency key) is kept after it
   * reached its terminal state, in ms
   *
   * @default 86_400_000
   */
  maxAge?: number
  /**
   * Most finished tasks kept (all agents of the service); the oldest are
   * removed first
   *
   * @default 10_000
   */
  maxTasks?: number
  /**
   * How often tasks older than `maxAge` are looked for, in ms
   *
   * @default 60_000
   */
  sweepInterval?: number
}

export const DEFAULT_RETENTION = Object.freeze({ maxAge: 86_400_000, maxTasks: 10_000, sweepInterval: 60_000 })

/** One finished task as retention knows it */
export interface Retained {
  agent: string
  id: string
  owner: string
  idempotencyKey?: string
  /** When it reached its terminal state (ms since the epoch) */
  finishedAt: number
  /** Not removed before this (ms since the epoch): its envelope may be replayed until then */
  keepUntil: number
  /** Resolves when the task's last write is done */
  settled?: Promise<void>
}

/**
 * Finished tasks in the order they finished, removed by age and by count
 * through `remove` (one at a time)
 */
export class TaskRetention {
  readonly maxAge: number
  readonly maxTasks: number
  readonly sweepInterval: number
  private readonly entries = new Map<string, Retained>()
  private readonly remove: (entry: Retained) => Promise<void>
  private readonly onError: (entry: Retained, err: unknown) => void
  private timer?: ReturnType<typeof setInterval>
  private removing: Promise<void> = Promise.resolve()
  private pending = false
  /** Tasks removed so far */
  removed = 0

  constructor (init: TaskRetentionInit, remove: (entry: Retained) => Promise<void>, onError: (entry: Retained, err: unknown) => void) {
    this.maxAge = init.maxAge ?? DEFAULT_RETENTION.maxAge
    this.maxTasks = init.maxTasks ?? DEFAULT_RETENTION.maxTasks
    this.sweepInterval = init.sweepInterval ?? DEFAULT_RETENTION.sweepInterval
    for (const [k, v] of Object.entries({ maxAge: this.maxAge, maxTasks: this.maxTasks, sweepInterval: this.sweepInterval })) {
      positiveInteger(`retention.${k}`, v)
    }
    this.remove = remove
    this.onError = onError
  }

  private static key (agent: string, id: string): string {
    return `${agent}\n${id}`
  }

  /** Finished tasks held */
  get size (): number {
    return this.entries.size
  }

  /** A task reached its terminal state (or was found terminal in the datastore) */
  add (entry: Retained): void {
    const key = TaskRetention.key(entry.agent, entry.id)
    this.entries.delete(key)
    this.entries.set(key, entry)
    if (this.entries.size > this.maxTasks) this.schedule()
  }

  /** Add tasks found at start, in the order they finished */
  load (entries: Retained[]): void {
    for (const e of [...entries].sort((a, b) => a.finishedAt - b.finishedAt)) this.entries.set(TaskRetention.key(e.agent, e.id), e)
    this.schedule()
  }

  start (): void {
    if (this.timer != null) return
    this.timer = setInterval(() => { this.schedule() }, this.sweepInterval)
    this.timer.unref?.()
  }

  /** Stop sweeping; resolves when the removal under way is done */
  async stop (): Promise<void> {
    clearInterval(this.timer)
    this.timer = undefined
    await this.removing
  }

  /** Remove what is due now (tests and benchmarks call it; the timer does too) */
  async sweep (): Promise<void> {
    this.schedule()
    await this.removing
  }

  private due (now: number): Retained | undefined {
    const oldest = this.entries.values().next().value
    if (oldest == null || oldest.keepUntil > now) return undefined
    if (this.entries.size > this.maxTasks || oldest.finishedAt + this.maxAge <= now) return oldest
    return undefined
  }

  private schedule (): void {
    if (this.pending) return
    this.pending = true
    this.removing = this.removing.then(async () => {
      try {
        let entry: Retained | undefined
        while ((entry = this.due(Date.now())) != null) {
          this.entries.delete(TaskRetention.key(entry.agent, entry.id))
          try {
            await this.remove(entry)
            this.removed++
          } catch (err) {
            this.onError(entry, err)
          }
        }
      } finally {
        this.pending = false
      }
    })
  }
}
