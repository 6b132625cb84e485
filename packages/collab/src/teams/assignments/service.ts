/**
 * Assignments as tasks (spec/teams.md 10.6): the assigner's runner
 * (runner.ts), the assignee's wrapper of skill handlers (serve.ts), the
 * waits of pause-and-trigger, over a team service and a task service.
 */
import { InvalidMessageError, InvalidTeamRecordError, TeamConcludedError, UnknownTeamError } from '../errors.js'
import { ASSIGNMENT_DEFAULTS } from './api.js'
import { AssignmentRunner, toOutcome } from './runner.js'
import { AssignmentServer } from './serve.js'
import { AssignmentSupervisor } from './supervisor.js'
import type { AssignOptions, Assignment, AssignmentComponents, AssignmentLimits, AssignmentOutcome, AssignmentService, AssignmentsInit } from './api.js'
import type { Team } from '../api.js'
import type { TeamRuntime } from '../team.js'
import type { ServeOptions, SkillHandler, TaskService } from '../../tasks/api.js'
import type { Did } from '@ioa/interconnect'
import type { AbortOptions, Logger } from '@libp2p/interface'

class DefaultAssignmentService implements AssignmentService {
  readonly tasks: TaskService
  private readonly components: AssignmentComponents
  private readonly log: Logger
  private readonly runner: AssignmentRunner
  private readonly server: AssignmentServer
  private readonly supervisor: AssignmentSupervisor

  constructor (components: AssignmentComponents, init: AssignmentsInit = {}) {
    const limits: Record<string, number> = { ...ASSIGNMENT_DEFAULTS }
    for (const key of Object.keys(ASSIGNMENT_DEFAULTS)) {
      const v = (init as Record<string, unknown>)[key]
      if (v === undefined) continue
      const min = key === 'attemptTimeout' ? 0 : 1
      if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > 2_147_483_647) {
        throw new InvalidTeamRecordError(`Assignment option ${key} must be an integer from ${min} to 2147483647`)
      }
      limits[key] = v
    }
    const all = Object.freeze(limits) as unknown as AssignmentLimits
    this.components = components
    this.log = components.logger.forComponent(init.logName ?? 'ioa:collab:teams:assign')
    this.runner = new AssignmentRunner(components, all, this.log)
    this.server = new AssignmentServer(components, all, this.log)
    this.supervisor = new AssignmentSupervisor(all, this.log)
    const t = components.tasks
    this.tasks = {
      start: async () => { await t.start() },
      stop: async () => { await t.stop() },
      serve: async (agent, skill, handler, options) => { await this.serve(agent, skill, handler, options) },
      unserve: (agent, skill) => { t.unserve(agent, skill) },
      submit: (from, to, request, options) => t.submit(from, to, request, options),
      submitAndWait: async (from, to, request, options) => await t.submitAndWait(from, to, request, options),
      get: async (to, id, options) => await t.get(to, id, options),
      cancel: async (to, id, options) => await t.cancel(to, id, options),
      resubscribe: (to, id, options) => t.resubscribe(to, id, options),
      approve: async (to, id, approval, options) => await t.approve(to, id, approval, options)
    }
  }

  private runtime (team: Team): TeamRuntime {
    const held = this.components.teams.team(team.id)
    if (held == null) throw new UnknownTeamError(`This node holds no team ${team.id}`)
    return held as TeamRuntime
  }

  async assign (team: Team, options: AssignOptions): Promise<Assignment> {
    return await this.runner.assign(this.runtime(team), options)
  }

  async result (team: Team, task: string, options: AbortOptions = {}): Promise<AssignmentOutcome> {
    const t = this.runtime(team)
    const closed = t.assignments.closed(task)
    if (closed != null) return toOutcome(closed, t.assignments.open(task)?.assignees ?? [closed.assignee])
    const open = t.assignments.open(task)
    if (open == null) throw new InvalidMessageError(`Task ${task} is not assigned in team ${team.id}`)
    const assignees = open.assignees
    const controller = new AbortController()
    const onAbort = (): void => { controller.abort(options.signal?.reason) }
    options.signal?.addEventListener('abort', onAbort, { once: true })
    if (options.signal?.aborted === true) onAbort()
    try {
      // a team that concludes first ends the wait: no result can come after its conclude entry
      const concluded = (async () => {
        for await (const e of t.events({ signal: controller.signal })) {
          if (e.type === 'concluded') throw new TeamConcludedError(`Team ${team.id} concluded before task ${task} had a result`)
        }
        if (t.concluded && t.assignments.closed(task) == null) throw new TeamConcludedError()
        return await new Promise<never>(() => {})
      })()
      if (t.concluded) throw new TeamConcludedError()
      const closed = await Promise.race([t.assignments.result(task, controller.signal), concluded])
      return toOutcome(closed, assignees)
    } finally {
      options.signal?.removeEventListener('abort', onAbort)
      controller.abort()
    }
  }

  async pause (team: Team, tasks: string[], options: AbortOptions = {}): Promise<AssignmentOutcome[]> {
    const t = this.runtime(team)
    const unknown = tasks.filter(k => t.assignments.open(k) == null && t.assignments.closed(k) == null)
    if (unknown.length > 0) throw new InvalidMessageError(`pause lists tasks not assigned in team ${team.id}: ${unknown.slice(0, 5).join(', ')}`)
    await t.post('pause', { tasks }, options)
    return await Promise.all(tasks.map(async k => await this.result(team, k, options)))
  }

  async serve (agent: Did, skill: string, handler: SkillHandler, options?: ServeOptions): Promise<void> {
    await this.components.tasks.serve(agent, skill, this.server.wrap(agent, handler), options)
  }

  supervise (team: Team, options: AbortOptions = {}): void {
    this.supervisor.watch(this.runtime(team), options)
  }

  async stop (): Promise<void> {
    this.supervisor.stop()
    await this.runner.stop()
  }
}

/** The assignment service of a node's team and task services */
export function createAssignmentService (components: AssignmentComponents, init: AssignmentsInit = {}): AssignmentService {
  return new DefaultAssignmentService(components, init)
}
