/**
 * The convener's watch over the assignments of its team (spec/teams.md
 * 10.6): when a task's assigner is no longer a member (it left, was removed,
 * or its node died and the sequencer removed it after `memberTimeout`),
 * nobody runs the task's lease any more; after `resultTimeout` without a
 * `result` entry the convener posts the `LEASE_LAPSED` result itself, so a
 * sync assignment or a pause never waits on a member that is gone.
 */
import { InvalidTeamRecordError } from '../errors.js'
import { memberOf } from '../records.js'
import { LEASE_LAPSED } from './tracker.js'
import type { AssignmentLimits } from './api.js'
import type { TeamRuntime } from '../team.js'
import type { AbortOptions, Logger } from '@libp2p/interface'

export class AssignmentSupervisor {
  private readonly watched = new Map<string, AbortController>()

  constructor (private readonly limits: AssignmentLimits, private readonly log: Logger) {}

  /** Watch a team this node convenes, until it concludes, `stop()` or the signal */
  watch (team: TeamRuntime, options: AbortOptions = {}): void {
    if (team.roster.convener !== team.agent) throw new InvalidTeamRecordError('Only the convener supervises the assignments of a team')
    if (this.watched.has(team.id)) return
    const controller = new AbortController()
    this.watched.set(team.id, controller)
    const onAbort = (): void => { controller.abort() }
    options.signal?.addEventListener('abort', onAbort, { once: true })
    const timers = new Set<ReturnType<typeof setTimeout>>()
    const scheduled = new Set<string>()
    const check = (): void => {
      for (const open of team.assignments.all()) {
        const key = `${open.task}\n${open.seq}`
        if (memberOf(team.roster, open.assigner) != null || scheduled.has(key)) continue
        scheduled.add(key)
        const timer = setTimeout(() => {
          timers.delete(timer)
          void this.lapse(team, open.task, open.seq, open.assigner)
        }, this.limits.resultTimeout)
        timer.unref?.()
        timers.add(timer)
      }
    }
    void (async () => {
      check()
      for await (const e of team.events({ signal: controller.signal })) {
        if (e.type === 'left') check()
        if (e.type === 'concluded') break
      }
    })().catch((err: Error) => {
      if (!controller.signal.aborted) this.log('team %s: supervision ended - %s', team.id, err.message)
    }).finally(() => {
      for (const t of timers) clearTimeout(t)
      options.signal?.removeEventListener('abort', onAbort)
      if (this.watched.get(team.id) === controller) this.watched.delete(team.id)
    })
  }

  /** Close a task whose assigner is gone, unless a result or a reassignment came meanwhile */
  private async lapse (team: TeamRuntime, task: string, seq: number, assigner: string): Promise<void> {
    const open = team.assignments.open(task)
    if (open == null || open.seq !== seq || team.concluded) return
    this.log('team %s: task %s has no assigner (%s left); the convener closes it', team.id, task, assigner)
    try {
      await team.post('result', { task, state: 'failed', error: { code: LEASE_LAPSED, reason: 'ASSIGNER_GONE', message: `The assigner ${assigner} is no longer a member` } })
    } catch (err: any) {
      this.log.error('team %s: could not post the lapse of %s - %e', team.id, task, err)
    }
  }

  stop (): void {
    for (const c of this.watched.values()) c.abort()
    this.watched.clear()
  }
}
