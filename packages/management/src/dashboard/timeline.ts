/**
 * The dashboard's timeline (spec/management.md 2.6): the node's task events
 * and the messages of its teams' conversations, numbered in the order they
 * happened, in a bounded ring; readers long-poll for the entries after the
 * last number they saw. Bounded: entries held, entries per answer, time a
 * reader waits, readers waiting at once.
 */
import type { ExecutorEvent } from '@ioa/collab'

/** A task event of the node's executor, as the timeline shows it */
export interface TaskEntry {
  seq: number
  /** ms since the epoch */
  at: number
  kind: 'task'
  /** `server`: served by an agent of this node; `client`: submitted from this node, one entry as it ends */
  side: 'server' | 'client'
  /**
   * server: `started`, `completed`, `failed`, `canceled`, `refused`;
   * client: how the stream ended (a task state, `lapsed`, `error`)
   */
  type: string
  skill?: string
  taskId?: string
  /** The executing agent (a did:key) */
  agent?: string
  /** The agent that sent the request */
  caller?: string
  /** ms from the handler's start (server) or from the submit (client), once ended */
  duration?: number
  /** The error code, on `failed`, `canceled`, `refused` */
  code?: string
}

/** A message ordered in a conversation of a team this node holds */
export interface ConversationEntry {
  seq: number
  at: number
  kind: 'conversation'
  team: string
  /** The message type of spec/teams.md (`discuss`, `assign`, `result`, …) */
  type: string
  /** Its author (a did:key) */
  from: string
}

export type TimelineEntry = TaskEntry | ConversationEntry

/** An entry before it is numbered */
export type NewEntry = Omit<TaskEntry, 'seq'> | Omit<ConversationEntry, 'seq'>

/** The timeline entry of an executor event (one object literal per kind: no spread on the task path) */
export function taskEntry (e: ExecutorEvent): Omit<TaskEntry, 'seq'> {
  switch (e.type) {
    case 'task-refused':
      return { at: e.at, kind: 'task', side: 'server', type: 'refused', skill: e.skill, taskId: e.taskId, agent: e.agent, caller: e.caller, code: e.code }
    case 'task-started':
      return { at: e.at, kind: 'task', side: 'server', type: 'started', skill: e.skill, taskId: e.taskId, agent: e.agent, caller: e.caller }
    case 'task-completed':
      return { at: e.at, kind: 'task', side: 'server', type: 'completed', skill: e.skill, taskId: e.taskId, agent: e.agent, caller: e.caller, duration: e.duration }
    default:
      return { at: e.at, kind: 'task', side: 'server', type: e.state, skill: e.skill, taskId: e.taskId, agent: e.agent, caller: e.caller, duration: e.duration, code: e.error?.code }
  }
}

interface Waiter {
  after: number
  wake: () => void
}

/** Entries numbered from 1, the last `max` held (a ring: a push costs the same however many are held) */
export class Timeline {
  /** Entry number `n` is at `(n - 1) % max` while held */
  private readonly ring: Array<TimelineEntry | undefined>
  private readonly waiters = new Set<Waiter>()
  private last = 0
  private closed = false

  constructor (private readonly max: number) {
    this.ring = new Array<TimelineEntry | undefined>(max)
  }

  /** The number of the newest entry (0: none yet) */
  get seq (): number {
    return this.last
  }

  /** Readers waiting now */
  get waiting (): number {
    return this.waiters.size
  }

  /** Number `entry` and hold it (the object itself: the caller makes a new one per entry) */
  push (entry: NewEntry): void {
    if (this.closed) return
    const seq = ++this.last
    const numbered = entry as TimelineEntry
    numbered.seq = seq
    this.ring[(seq - 1) % this.max] = numbered
    for (const w of this.waiters) if (seq > w.after) w.wake()
  }

  /**
   * Up to `limit` entries after `after`, oldest first; `after` above the
   * newest number (a reader from before the node restarted) reads from the
   * oldest held
   */
  read (after: number, limit: number): TimelineEntry[] {
    const from = after > this.last ? 0 : after
    const first = Math.max(1, this.last - this.max + 1)
    const out: TimelineEntry[] = []
    for (let n = Math.max(from + 1, first); n <= this.last && out.length < limit; n++) out.push(this.ring[(n - 1) % this.max] as TimelineEntry)
    return out
  }

  /** Resolves when an entry after `after` exists, `ms` passed, or the timeline closed */
  async wait (after: number, ms: number): Promise<void> {
    if (this.last !== after || ms <= 0 || this.closed) return
    await new Promise<void>(resolve => {
      const w: Waiter = {
        after,
        wake: () => {
          clearTimeout(timer)
          this.waiters.delete(w)
          resolve()
        }
      }
      const timer = setTimeout(w.wake, ms)
      this.waiters.add(w)
    })
  }

  /** Wake every reader; no entry is added after */
  close (): void {
    this.closed = true
    for (const w of this.waiters) w.wake()
  }
}
