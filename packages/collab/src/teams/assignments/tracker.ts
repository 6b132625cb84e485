/**
 * The open assignments of one team, derived from its log (spec 10.6): a task
 * is open from its `assign` entry until its `result` entry. Every member
 * applies the same entries in the same order, so every member derives the
 * same open tasks and the same `assignment` events; the runner (runner.ts)
 * and the assignee's wrapper (serve.ts) read it, the team runtime feeds it.
 */
import type { ClosedAssignment } from './api.js'
import type { TeamAssignmentEvent } from '../api.js'
import type { Entry } from '../records.js'
import type { Did } from '@ioa/interconnect'

/** The code of a `result` that the assigner or the convener posts for a silent assignee */
export const LEASE_LAPSED = 'LEASE_LAPSED'

/** An open task as the log holds it */
export interface OpenAssignment {
  task: string
  mode: 'sync' | 'async'
  skill: string
  /** Who posted the first `assign` */
  assigner: Did
  /** The current assignee */
  assignee: Did
  /** seq of the first `assign` */
  opened: number
  /** seq of the latest `assign` (the one the current assignee serves) */
  seq: number
  /** Assignees so far, the current one last */
  assignees: Did[]
}

type Waiter = (r: ClosedAssignment) => void

export class AssignmentTracker {
  private readonly openTasks = new Map<string, OpenAssignment>()
  private readonly closedTasks = new Map<string, ClosedAssignment>()
  private readonly waiters = new Map<string, Set<Waiter>>()

  /** An open task */
  open (task: string): OpenAssignment | undefined {
    return this.openTasks.get(task)
  }

  /** Every open task */
  all (): OpenAssignment[] {
    return [...this.openTasks.values()]
  }

  /** The result of a closed task */
  closed (task: string): ClosedAssignment | undefined {
    return this.closedTasks.get(task)
  }

  /** Resolves with the task's result once its `result` entry is applied (at once when it is) */
  async result (task: string, signal?: AbortSignal): Promise<ClosedAssignment> {
    const done = this.closedTasks.get(task)
    if (done != null) return done
    signal?.throwIfAborted()
    return await new Promise<ClosedAssignment>((resolve, reject) => {
      const set = this.waiters.get(task) ?? new Set<Waiter>()
      const onAbort = (): void => {
        set.delete(waiter)
        if (set.size === 0) this.waiters.delete(task)
        reject(signal?.reason)
      }
      const waiter: Waiter = (r) => { signal?.removeEventListener('abort', onAbort); resolve(r) }
      set.add(waiter)
      this.waiters.set(task, set)
      signal?.addEventListener('abort', onAbort, { once: true })
    })
  }

  /**
   * Apply one entry (already checked and stored); returns the events it
   * causes. Entries that break the rules of 10.6 (a `progress` or `result`
   * from someone else, a reassignment by a member that may not) change
   * nothing here; the flow machine refuses them where it is merged.
   */
  apply (entry: Entry, convener: Did): TeamAssignmentEvent[] {
    const m = entry.msg.payload
    const b = m.body
    const seq = entry.seq
    if (m.type === 'assign') {
      const task = b.task as string
      const mode = b.mode as 'sync' | 'async'
      const assignee = b.assignee as Did
      const open = this.openTasks.get(task)
      if (open == null) {
        if (this.closedTasks.has(task)) return []
        this.openTasks.set(task, { task, mode, skill: b.skill as string, assigner: m.from, assignee, opened: seq, seq, assignees: [assignee] })
        return [{ type: 'assignment', phase: 'opened', seq, task, assignee, mode }]
      }
      if (m.from !== open.assigner && m.from !== convener) return []
      open.assignee = assignee
      open.seq = seq
      open.assignees.push(assignee)
      return [{ type: 'assignment', phase: 'reassigned', seq, task, assignee, mode: open.mode }]
    }
    if (m.type === 'progress') {
      const open = this.openTasks.get(b.task as string)
      if (open == null || m.from !== open.assignee) return []
      const e: TeamAssignmentEvent = { type: 'assignment', phase: 'progress', seq, task: open.task, assignee: open.assignee, mode: open.mode, state: b.state as string }
      if (typeof b.text === 'string') e.text = b.text
      return [e]
    }
    if (m.type === 'result') {
      const open = this.openTasks.get(b.task as string)
      if (open == null) return []
      const error = b.error as Record<string, unknown> | undefined
      const lapsed = error?.code === LEASE_LAPSED
      if (m.from !== open.assignee && !(lapsed && (m.from === open.assigner || m.from === convener))) return []
      this.openTasks.delete(open.task)
      const closed: ClosedAssignment = { task: open.task, seq, state: b.state as string, assignee: open.assignee }
      if (b.output != null) closed.output = b.output as Record<string, unknown>
      if (error != null) closed.error = error
      this.closedTasks.set(open.task, closed)
      const waiting = this.waiters.get(open.task)
      this.waiters.delete(open.task)
      for (const w of waiting ?? []) w(closed)
      const e: TeamAssignmentEvent = { type: 'assignment', phase: lapsed ? 'lapsed' : 'done', seq, task: open.task, assignee: open.assignee, mode: open.mode, state: closed.state }
      if (closed.output != null) e.output = closed.output
      if (error != null) e.error = error
      return [e]
    }
    return []
  }

  /** Forget the derived state (the log is replayed from the start, after a truncation) */
  reset (): void {
    this.openTasks.clear()
    this.closedTasks.clear()
  }
}
