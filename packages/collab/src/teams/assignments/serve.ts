/**
 * The assignee's side of assignments as tasks (spec/teams.md 10.6): a skill
 * handler wrapped so that a task whose `contextId` names a team assignment
 * is run only if the team's log gives that assignment to this agent, and
 * posts the assignee's `progress` (at a bounded rate) and its `result` to
 * the team before the task ends. Tasks of no team run as they would.
 */
import { anySignal } from 'any-signal'
import { raceSignal } from 'race-signal'
import { isMap } from '../../shape.js'
import { NotAssignedError, TooManyAssignmentsError } from '../errors.js'
import { encodedSize } from '../records.js'
import { parseAssignmentContext } from './authority.js'
import type { AssignmentComponents, AssignmentLimits } from './api.js'
import type { SkillContext, SkillHandler } from '../../tasks/api.js'
import type { TeamRuntime } from '../team.js'
import type { Did } from '@ioa/interconnect'
import type { Logger } from '@libp2p/interface'

/** Room left in a message for everything but a result's `output` (signature, ids, keys) */
const RESULT_OVERHEAD = 1_024
const MAX_TEXT = 8_192

export class AssignmentServer {
  /** Team tasks being served, per team */
  private readonly served = new Map<string, number>()

  constructor (
    private readonly components: AssignmentComponents,
    private readonly limits: AssignmentLimits,
    private readonly log: Logger
  ) {}

  wrap (agent: Did, handler: SkillHandler): SkillHandler {
    return async (input, ctx) => {
      const ref = parseAssignmentContext(ctx.task.contextId)
      if (ref == null) return await handler(input, ctx)
      const team = await this.check(agent, ref, ctx)
      const count = this.served.get(team.id) ?? 0
      if (count >= this.limits.maxServedPerTeam) throw new TooManyAssignmentsError(`${count} tasks of team ${team.id} served here`)
      this.served.set(team.id, count + 1)
      try {
        return await this.run(team, agent, ref.seq, input, ctx, handler)
      } finally {
        const left = (this.served.get(team.id) ?? 1) - 1
        if (left <= 0) this.served.delete(team.id)
        else this.served.set(team.id, left)
      }
    }
  }

  /** The task must be the assignment of entry `seq` to this agent, by its poster, and still open with this agent */
  private async check (agent: Did, ref: { team: string, seq: number }, ctx: SkillContext): Promise<TeamRuntime> {
    const signal = anySignal([ctx.signal, AbortSignal.timeout(this.limits.entryTimeout)])
    let team: TeamRuntime | undefined
    try {
      // the task may arrive before this node has the team's first roster, or the entry that assigns it
      team = await this.held(ref.team, signal)
      if (team == null || team.agent !== agent) throw new NotAssignedError(`${agent} holds no team ${ref.team} here`)
      await team.waitFor(ref.seq, { signal })
    } catch (err) {
      if (err instanceof NotAssignedError) throw err
      throw new NotAssignedError(`Team ${ref.team} or its entry ${ref.seq} did not arrive within ${this.limits.entryTimeout} ms`)
    } finally {
      signal.clear()
    }
    const m = team.history(ref.seq, ref.seq)[0]?.msg.payload
    const open = team.assignments.open(ctx.task.id)
    if (m?.type !== 'assign' || m.body.task !== ctx.task.id || m.body.assignee !== agent || m.body.skill !== ctx.task.skill ||
      m.from !== ctx.caller || open?.seq !== ref.seq || open.assignee !== agent) {
      this.log('team %s: task %s from %s is not the open assignment of entry %d to %s; refused', ref.team, ctx.task.id, ctx.caller, ref.seq, agent)
      throw new NotAssignedError(`Entry ${ref.seq} of team ${ref.team} does not assign task ${ctx.task.id} (${ctx.task.skill}) to ${agent} now`)
    }
    return team
  }

  /** The team once this node holds it with a roster (undefined when the signal aborts first) */
  private async held (id: string, signal: AbortSignal): Promise<TeamRuntime | undefined> {
    const now = this.components.teams.team(id) as TeamRuntime | undefined
    if (now != null) return now
    const events = this.components.teams.events({ signal })
    // subscribed first, then looked again: a team that arrives in between is not missed
    const next = events.next()
    const again = this.components.teams.team(id) as TeamRuntime | undefined
    if (again != null) { void events.return(undefined); return again }
    for (let e = await next; e.done !== true; e = await events.next()) {
      const t = this.components.teams.team(id) as TeamRuntime | undefined
      if (t != null) { void events.return(undefined); return t }
    }
    return undefined
  }

  private async run (team: TeamRuntime, agent: Did, seq: number, input: unknown, ctx: SkillContext, handler: SkillHandler): Promise<unknown> {
    const task = ctx.task.id
    /** still this agent's task (not reassigned, not lapsed), and the task was not taken back */
    const mine = (): boolean => !ctx.signal.aborted && team.assignments.open(task)?.seq === seq && team.assignments.open(task)?.assignee === agent
    let lastProgress = 0
    let dropped = 0
    const progress = (message: unknown): void => {
      ctx.progress(message)
      const now = Date.now()
      if (now - lastProgress < this.limits.progressInterval) {
        dropped++
        this.log.trace('team %s: progress of %s not posted (%d within %d ms)', team.id, task, dropped, this.limits.progressInterval)
        return
      }
      lastProgress = now
      if (!mine()) return
      team.post('progress', { task, state: 'working', text: textOf(message) }).catch((err: Error) => {
        this.log('team %s: progress of %s not posted - %s', team.id, task, err.message)
      })
    }
    const wrapped: SkillContext = {
      get task () { return ctx.task },
      get caller () { return ctx.caller },
      get chain () { return ctx.chain },
      get capability () { return ctx.capability },
      get signal () { return ctx.signal },
      get deadline () { return ctx.deadline },
      get budget () { return ctx.budget },
      spend: (amount) => { ctx.spend(amount) },
      progress,
      artifact: (a) => { ctx.artifact(a) },
      get trace () { return ctx.trace },
      call: async (to, skill, i, options) => await ctx.call(to, skill, i, options),
      tool: async (name, fn, options) => await ctx.tool(name, fn, options)
    }
    let value: unknown
    try {
      // a handler that ignores its signal does not keep the assignment: taken back, it posts nothing
      value = await raceSignal(Promise.resolve(handler(input, wrapped)), ctx.signal)
    } catch (err: any) {
      if (mine()) {
        await this.post(team, task, { task, state: 'failed', error: { code: typeof err?.code === 'string' ? err.code : 'FAILED', message: String(err?.message ?? err).slice(0, 1024) } })
      }
      throw err
    }
    if (mine()) await this.post(team, task, { task, state: 'completed', output: this.outputOf(team, value) })
    return value
  }

  /** The `output` map of a result: the value when it is a map, else `{ value }`; `{ truncated, bytes }` when it does not fit a message */
  private outputOf (team: TeamRuntime, value: unknown): Record<string, unknown> {
    const output = isMap(value) ? value : { value: value ?? null }
    let bytes: number
    try {
      bytes = encodedSize(output)
    } catch {
      return { truncated: true, bytes: 0 }
    }
    return bytes + RESULT_OVERHEAD > team.roster.limits.maxMessageBytes ? { truncated: true, bytes } : output
  }

  private async post (team: TeamRuntime, task: string, body: Record<string, unknown>): Promise<void> {
    try {
      await team.post('result', body)
      this.log('team %s: result of %s posted (%s)', team.id, task, body.state)
    } catch (err: any) {
      // the assigner posts LEASE_LAPSED when no result entry comes (resultTimeout)
      this.log.error('team %s: result of %s not posted - %e', team.id, task, err)
    }
  }
}

function textOf (message: unknown): string {
  if (typeof message === 'string') return message.length > 0 ? message.slice(0, MAX_TEXT) : '-'
  try {
    return (JSON.stringify(message) ?? '-').slice(0, MAX_TEXT)
  } catch {
    return '-'
  }
}
