/**
 * The assigner's side of assignments as tasks (spec/teams.md 10.6): post
 * `assign`, run the task at the assignee under a token derived from the
 * assigner's team chain, watch its lease, the assignee's membership and the
 * attempt's time, and when the assignee is silent reassign the task to
 * another member that holds the skill (bounded), or post `result` with
 * `error.code = 'LEASE_LAPSED'` so that the conversation moves on.
 */
import { anySignal } from 'any-signal'
import { isCapability } from '@ioa/interconnect'
import { isTerminal } from '../../tasks/model.js'
import { skillCovers } from '../../auth/delegation.js'
import { InvalidMessageError, NotMemberError, TeamConcludedError, TooManyAssignmentsError } from '../errors.js'
import { memberOf } from '../records.js'
import { assignmentContext, assignmentProofs } from './authority.js'
import { LEASE_LAPSED } from './tracker.js'
import type { AssignOptions, Assignment, AssignmentComponents, AssignmentLimits, AssignmentOutcome, ClosedAssignment } from './api.js'
import type { TeamRuntime } from '../team.js'
import type { Token } from '../../auth/delegation.js'
import type { Did } from '@ioa/interconnect'
import type { Logger } from '@libp2p/interface'

/** How long the cancel of a task taken back from an assignee may take, ms */
const CANCEL_TIMEOUT = 5_000
const TASK_ID = /^[A-Za-z0-9._:-]{1,128}$/

/** One assignment this node runs as its assigner */
interface Run {
  team: TeamRuntime
  task: string
  mode: 'sync' | 'async'
  skill: string
  input: Record<string, unknown>
  candidates?: Did[]
  attemptTimeout: number
  assignees: Did[]
  controller: AbortController
}

/** Why an attempt ended */
type AttemptEnd =
  | { kind: 'result' }
  /** The task ended through the task protocol: its `result` entry should follow */
  | { kind: 'ended', state: string }
  /** The assignee is gone or refused: reassign or lapse */
  | { kind: 'silent', code: string, message: string }

export class AssignmentRunner {
  private readonly runs = new Map<string, Map<string, Run>>()
  private stopped = false

  constructor (
    private readonly components: AssignmentComponents,
    private readonly limits: AssignmentLimits,
    private readonly log: Logger
  ) {}

  async assign (team: TeamRuntime, o: AssignOptions): Promise<Assignment> {
    if (this.stopped) throw new InvalidMessageError('The assignment service is stopped')
    if (team.concluded) throw new TeamConcludedError()
    const mode = o.mode ?? 'sync'
    if (mode !== 'sync' && mode !== 'async') throw new InvalidMessageError('mode must be sync or async')
    if (!isCapability(o.skill)) throw new InvalidMessageError('skill must be a capability name')
    const task = o.task ?? globalThis.crypto.randomUUID()
    if (!TASK_ID.test(task)) throw new InvalidMessageError('task must match [A-Za-z0-9._:-]{1,128}')
    if (memberOf(team.roster, o.assignee) == null) throw new NotMemberError(`${o.assignee} is not a member of team ${team.id}`)
    if (team.assignments.open(task) != null || team.assignments.closed(task) != null) throw new InvalidMessageError(`Task ${task} is already assigned in team ${team.id}`)
    const mine = this.runs.get(team.id) ?? new Map<string, Run>()
    if (mine.size >= this.limits.maxOpenPerTeam) throw new TooManyAssignmentsError(`${mine.size} open assignments in team ${team.id}`)
    const perAssignee = [...mine.values()].filter(r => r.assignees[r.assignees.length - 1] === o.assignee).length
    if (perAssignee >= this.limits.maxOpenPerAssignee) throw new TooManyAssignmentsError(`${perAssignee} open assignments of ${o.assignee} in team ${team.id}`)
    // the token first: an assigner without the authority posts nothing
    const proofs = await assignmentProofs(team, o.assignee, o.skill, team.roster.deadline, o.signal)
    const input = o.input ?? {}
    const body: Record<string, unknown> = { mode, task, assignee: o.assignee, skill: o.skill, input }
    const run: Run = {
      team, task, mode, skill: o.skill, input, candidates: o.candidates, attemptTimeout: o.attemptTimeout ?? this.limits.attemptTimeout,
      assignees: [o.assignee], controller: new AbortController()
    }
    mine.set(task, run)
    this.runs.set(team.id, mine)
    let seq: number
    try {
      seq = (await team.post('assign', body, { signal: o.signal })).seq
    } catch (err) {
      this.forget(run)
      throw err
    }
    this.log('team %s: task %s (%s, %s) assigned to %s at %d', team.id, task, mode, o.skill, o.assignee, seq)
    const done = this.drive(run, seq, proofs)
      .catch((err: Error) => { this.log.error('team %s: assignment %s failed - %e', team.id, task, err) })
      .then(async () => await this.outcome(run))
      .finally(() => { this.forget(run) })
    return { task, seq, done }
  }

  private forget (run: Run): void {
    const mine = this.runs.get(run.team.id)
    if (mine?.get(run.task) === run) mine.delete(run.task)
    if (mine?.size === 0) this.runs.delete(run.team.id)
  }

  /** The task's result entry, or what the runner knows when none came */
  private async outcome (run: Run): Promise<AssignmentOutcome> {
    const closed = run.team.assignments.closed(run.task)
    if (closed != null) return toOutcome(closed, run.assignees)
    return {
      task: run.task, seq: -1, state: 'failed', assignee: run.assignees[run.assignees.length - 1], assignees: run.assignees,
      error: { code: run.team.concluded ? TeamConcludedError.code : 'STOPPED', message: 'No result entry was ordered' }
    }
  }

  /** Run attempts until the result entry is in the log or the assignment lapses */
  private async drive (run: Run, firstSeq: number, firstProofs: Token[]): Promise<void> {
    let seq = firstSeq
    let proofs = firstProofs
    for (let attempt = 0; ; attempt++) {
      const assignee = run.assignees[run.assignees.length - 1]
      const end = await this.attempt(run, assignee, seq, proofs)
      // after the team's conclude entry nothing more can be posted
      if (end.kind === 'result' || run.controller.signal.aborted || run.team.concluded) return
      if (end.kind === 'ended') {
        // the assignee posts its result before its task ends; give the entry time to arrive
        if (await this.awaitResult(run, this.limits.resultTimeout)) return
        await this.lapse(run, 'NO_RESULT', `Task ended ${end.state} at ${assignee}, but no result entry came`)
        return
      }
      this.log('team %s: task %s at %s: %s (%s)', run.team.id, run.task, assignee, end.code, end.message)
      const next = attempt < this.limits.maxReassignments ? await this.nextAssignee(run) : undefined
      if (next == null) {
        await this.lapse(run, end.code, end.message)
        return
      }
      try {
        proofs = await assignmentProofs(run.team, next, run.skill, run.team.roster.deadline, run.controller.signal)
        seq = (await run.team.post('assign', { mode: run.mode, task: run.task, assignee: next, skill: run.skill, input: run.input }, { signal: run.controller.signal })).seq
      } catch (err: any) {
        this.log('team %s: reassignment of %s to %s failed - %s', run.team.id, run.task, next, err?.message)
        await this.lapse(run, end.code, end.message)
        return
      }
      run.assignees.push(next)
      this.log('team %s: task %s reassigned from %s to %s at %d', run.team.id, run.task, assignee, next, seq)
      this.cancelAt(assignee, run.task)
    }
  }

  /** One assignee's attempt: submit, and watch the lease, the roster, the result entry and the time */
  private async attempt (run: Run, assignee: Did, seq: number, proofs: Token[]): Promise<AttemptEnd> {
    const team = run.team
    const controller = new AbortController()
    const stop = (reason: AttemptEnd): void => { if (!controller.signal.aborted) controller.abort(reason) }
    const onRun = (): void => { stop({ kind: 'silent', code: 'STOPPED', message: 'The runner stopped' }) }
    run.controller.signal.addEventListener('abort', onRun, { once: true })
    if (run.controller.signal.aborted) onRun()
    const timer = run.attemptTimeout > 0
      ? setTimeout(() => { stop({ kind: 'silent', code: 'TIMEOUT', message: `No result within ${run.attemptTimeout} ms` }) }, run.attemptTimeout)
      : undefined
    timer?.unref?.()
    // the result entry, whoever posted it, ends the attempt
    team.assignments.result(run.task, controller.signal).then(() => { stop({ kind: 'result' }) }, () => {})
    // an assignee that leaves the team (or is removed) is silent from then on
    void this.watchRoster(team, assignee, controller.signal, stop)
    try {
      if (memberOf(team.roster, assignee) == null) stop({ kind: 'silent', code: NotMemberError.code, message: `${assignee} is no longer a member` })
      const events = this.components.tasks.submit(team.identity, assignee, {
        skill: run.skill, input: run.input, proofs, deadline: team.roster.deadline, taskId: run.task, contextId: assignmentContext(team.id, seq)
      }, { signal: controller.signal })
      for await (const e of events) {
        if (e.type === 'lapsed') return { kind: 'silent', code: LEASE_LAPSED, message: e.error.message }
        if (e.type === 'status' && isTerminal(e.task.state)) {
          if (e.task.state === 'completed') return { kind: 'ended', state: e.task.state }
          // a task the assignee's handler failed was reported in its result entry; one refused or canceled was not
          if (await this.awaitResult(run, Math.min(this.limits.resultTimeout, 1_000))) return { kind: 'result' }
          return { kind: 'silent', code: e.task.error?.code ?? e.task.state.toUpperCase(), message: e.task.error?.message ?? `Task ${e.task.state}` }
        }
      }
      if (controller.signal.aborted) return controller.signal.reason as AttemptEnd
      return { kind: 'silent', code: LEASE_LAPSED, message: 'The task stream ended without a final state' }
    } catch (err: any) {
      if (controller.signal.aborted) return controller.signal.reason as AttemptEnd
      // refused before any handler ran (ESCALATION, POLICY_DENIED, NOT_ASSIGNED, UNKNOWN_AGENT, ...)
      return { kind: 'silent', code: typeof err?.code === 'string' ? err.code : 'FAILED', message: err?.message ?? String(err) }
    } finally {
      clearTimeout(timer)
      run.controller.signal.removeEventListener('abort', onRun)
      stop({ kind: 'silent', code: 'DONE', message: 'attempt over' })
    }
  }

  private async watchRoster (team: TeamRuntime, assignee: Did, signal: AbortSignal, stop: (r: AttemptEnd) => void): Promise<void> {
    try {
      for await (const e of team.events({ signal })) {
        if (e.type === 'left' && e.agent === assignee) {
          stop({ kind: 'silent', code: NotMemberError.code, message: `${assignee} left the team` })
          return
        }
        if (e.type === 'concluded') {
          stop({ kind: 'silent', code: TeamConcludedError.code, message: 'The team concluded' })
          return
        }
      }
    } catch (err: any) {
      if (!signal.aborted) this.log('team %s: roster watch of %s ended - %s', team.id, assignee, err?.message)
    }
  }

  /** true once the task's result entry is in the log, false after `ms` */
  private async awaitResult (run: Run, ms: number): Promise<boolean> {
    const signal = anySignal([AbortSignal.timeout(ms), run.controller.signal])
    try {
      await run.team.assignments.result(run.task, signal)
      return true
    } catch {
      return false
    } finally {
      signal.clear()
    }
  }

  /** The next member that holds the skill, not tried yet */
  private async nextAssignee (run: Run): Promise<Did | undefined> {
    const roster = run.team.roster
    const fresh = (d: Did): boolean => !run.assignees.includes(d) && memberOf(roster, d) != null
    if (run.candidates != null) return run.candidates.find(fresh)
    try {
      const found = await this.components.interconnect.discoverAll({ capability: run.skill }, { signal: run.controller.signal })
      return found.find(d => fresh(d.card.id) && d.skills.some(s => s.id === run.skill || skillCovers(s.id, run.skill)))?.card.id
    } catch (err: any) {
      this.log('team %s: no candidate to reassign %s to - %s', run.team.id, run.task, err?.message)
      return undefined
    }
  }

  /** Post the `result` that closes a task whose assignee went silent (shared rule 3) */
  private async lapse (run: Run, reason: string, message: string): Promise<void> {
    if (run.controller.signal.aborted || run.team.assignments.closed(run.task) != null) return
    const assignee = run.assignees[run.assignees.length - 1]
    this.log('team %s: task %s lapsed at %s after %d assignee(s): %s', run.team.id, run.task, assignee, run.assignees.length, reason)
    this.cancelAt(assignee, run.task)
    try {
      await run.team.post('result', { task: run.task, state: 'failed', error: { code: LEASE_LAPSED, reason, message: message.slice(0, 1024) } })
    } catch (err: any) {
      this.log.error('team %s: could not post the lapse of %s - %e', run.team.id, run.task, err)
    }
  }

  /** Take a task back from an assignee (best effort: it may be gone) */
  private cancelAt (assignee: Did, task: string): void {
    this.components.tasks.cancel(assignee, task, { signal: AbortSignal.timeout(CANCEL_TIMEOUT) }).catch((err: any) => {
      this.log.trace('cancel of %s at %s: %s', task, assignee, err?.message)
    })
  }

  async stop (): Promise<void> {
    this.stopped = true
    for (const mine of this.runs.values()) {
      for (const run of mine.values()) {
        run.controller.abort()
        this.cancelAt(run.assignees[run.assignees.length - 1], run.task)
      }
    }
    this.runs.clear()
  }
}

export function toOutcome (c: ClosedAssignment, assignees: Did[]): AssignmentOutcome {
  const out: AssignmentOutcome = { task: c.task, seq: c.seq, state: c.state, assignee: c.assignee, assignees }
  if (c.output != null) out.output = c.output
  if (c.error != null) out.error = c.error
  return out
}
