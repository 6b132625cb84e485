/**
 * Bridges between teams and the orchestrator, inside the collaboration
 * layer (spec/teams.md 10.6):
 *
 * - `teamStep`: an orchestrator step executed by a team. A skill handler for
 *   a sub-goal step (`{ goal }`, collab-orchestration.md): the serving agent
 *   convenes a team for the goal under the step task's chain and deadline,
 *   runs its conversation (by default one sync assignment per role) and
 *   returns its conclusion as the step's result.
 * - `orchestratedPart`: a team hands a sub-goal to an orchestrator. A skill
 *   handler for an assignment whose input is `{ goal }` or `{ plan }`: the
 *   assignee's orchestrator runs it under the assignee's team chain (its
 *   part of the team's authority, 3.4), within the task's deadline; the
 *   run's result is the assignment's result.
 */
import { isMap } from '../../shape.js'
import { InvalidPlanError } from '../../errors.js'
import { parseAssignmentContext, teamChain } from './authority.js'
import type { AssignmentOutcome, AssignmentService } from './api.js'
import type { RoleInit, Team, TeamService } from '../api.js'
import type { TeamRuntime } from '../team.js'
import type { Goal, Plan } from '../../planning/plan.js'
import type { Orchestrator } from '../../orchestration/api.js'
import type { SkillContext, SkillHandler } from '../../tasks/api.js'
import type { Did } from '@ioa/interconnect'
import type { ComponentLogger } from '@libp2p/interface'

/** Longest a step's team lives when its task has no deadline, ms */
const DEFAULT_STEP_TTL = 600_000

/** What a conversation conducted for a step concludes with */
export interface StepConclusion {
  summary: string
  outcome?: 'done' | 'failed'
  /** The step's result (besides `team`, `summary` and `outcome`) */
  output?: Record<string, unknown>
}

export interface TeamStepInit {
  logger: ComponentLogger
  teams: Pick<TeamService, 'form'>
  assignments: Pick<AssignmentService, 'assign'>
  /** The agent that serves the step and convenes its team */
  agent: Did
  /** The team's roles (each with its candidates, or found by discovery) */
  roles: RoleInit[] | ((goal: Goal) => RoleInit[])
  /** Runs the conversation @default one sync assignment per role: its first capability, with the goal's input */
  conduct?: (team: Team, goal: Goal, ctx: SkillContext) => Promise<StepConclusion>
}

/** The goal of a sub-goal step's task: `{ goal }`, or the input itself as the goal's input */
function goalOf (input: unknown, ctx: SkillContext): Goal {
  if (isMap(input) && isMap(input.goal) && typeof input.goal.intent === 'string') return input.goal as unknown as Goal
  return { intent: ctx.task.skill, input: isMap(input) ? input : { value: input ?? null } }
}

/** The default conversation of a step's team: one sync assignment per role, in turn */
function assignEachRole (assignments: TeamStepInit['assignments'], roles: RoleInit[]): (team: Team, goal: Goal, ctx: SkillContext) => Promise<StepConclusion> {
  return async (team, goal, ctx) => {
    const output: Record<string, unknown> = {}
    const outcomes: AssignmentOutcome[] = []
    for (const role of roles) {
      const member = team.roster.members.find(m => m.role === role.role)
      if (member == null) continue
      const a = await assignments.assign(team, { mode: 'sync', assignee: member.agent, skill: role.capabilities[0], input: goal.input, signal: ctx.signal })
      const outcome = await a.done
      outcomes.push(outcome)
      output[role.role] = outcome.output ?? outcome.error ?? null
      ctx.progress({ team: team.id, role: role.role, state: outcome.state })
    }
    const ok = outcomes.every(o => o.state === 'completed')
    return { summary: outcomes.map(o => `${o.assignee.slice(-8)}: ${o.state}`).join('; ') || 'nothing to do', outcome: ok ? 'done' : 'failed', output }
  }
}

/** A skill handler that executes an orchestrator step with a team (see the file's comment) */
export function teamStep (init: TeamStepInit): SkillHandler {
  const log = init.logger.forComponent('ioa:collab:teams:step')
  return async (input, ctx) => {
    const goal = goalOf(input, ctx)
    const roles = typeof init.roles === 'function' ? init.roles(goal) : init.roles
    const capabilities = [...new Set(roles.flatMap(r => r.capabilities))]
    const deadline = ctx.deadline ?? Date.now() + DEFAULT_STEP_TTL
    // the step's chain is the convener's authority; the team lives no longer than the step
    const team = await init.teams.form(init.agent, { text: goal.intent.slice(0, 4096), capabilities, deadline }, { roles, proofs: [...ctx.chain.path], signal: ctx.signal })
    ctx.progress({ team: team.id, state: 'formed' })
    const conduct = init.conduct ?? assignEachRole(init.assignments, roles)
    let conclusion: StepConclusion
    try {
      conclusion = await conduct(team, goal, ctx)
    } catch (err: any) {
      log('team %s of step task %s: the conversation failed - %s', team.id, ctx.task.id, err?.message)
      await team.conclude(`The step failed: ${String(err?.message ?? err)}`.slice(0, 8192), 'failed')
        .catch((e: Error) => { log.error('team %s: could not conclude - %e', team.id, e) })
      throw err
    }
    const outcome = conclusion.outcome ?? 'done'
    await team.conclude(conclusion.summary.slice(0, 8192) || 'done', outcome)
    return { ...conclusion.output, team: team.id, summary: conclusion.summary, outcome }
  }
}

export interface OrchestratedPartInit {
  logger: ComponentLogger
  teams: Pick<TeamService, 'team'>
  /** Its agent is the assignee */
  orchestrator: Pick<Orchestrator, 'runToCompletion' | 'agent'>
}

/** A skill handler that hands an assignment's sub-goal (or plan) to an orchestrator (see the file's comment) */
export function orchestratedPart (init: OrchestratedPartInit): SkillHandler {
  const log = init.logger.forComponent('ioa:collab:teams:part')
  return async (input, ctx) => {
    const work = isMap(input) && isMap(input.plan) ? input.plan as unknown as Plan : isMap(input) && isMap(input.goal) ? input.goal as unknown as Goal : undefined
    if (work == null) throw new InvalidPlanError('An orchestrated part takes { goal } or { plan }')
    const ref = parseAssignmentContext(ctx.task.contextId)
    const team = ref == null ? undefined : init.teams.team(ref.team) as TeamRuntime | undefined
    const own = team != null && team.agent === init.orchestrator.agent.did
    // in a team: the assignee's own part of the team's authority; else the task's chain (as serveGoals)
    const proofs = own ? teamChain(team) : [...ctx.chain.path]
    const deadline = Math.min(ctx.deadline ?? Infinity, own ? team.roster.deadline : Infinity)
    log('task %s: orchestrating a %s under %s', ctx.task.id, 'steps' in work ? 'plan' : 'goal', own ? `the team chain of ${team.id}` : 'the task chain')
    const run = await init.orchestrator.runToCompletion(work, {
      proofs, signal: ctx.signal, ...(Number.isFinite(deadline) ? { deadline } : {}),
      onEvent: (e) => {
        if (e.type === 'step-completed' || e.type === 'step-failed') {
          try {
            ctx.progress(`${e.type} ${e.stepId}`)
          } catch (err: any) {
            log.trace('progress of task %s not sent - %s', ctx.task.id, err?.message)
          }
        }
      }
    })
    return { run: run.runId, result: run.result ?? null }
  }
}
