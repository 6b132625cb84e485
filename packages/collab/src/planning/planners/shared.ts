/**
 * What the planners share (not part of the package's public API): their
 * loggers, skill discovery by capability prefix, plan ids
 */
import { defaultLogger } from '@libp2p/logger'
import { raceSignal } from 'race-signal'
import { PlannerFailedError } from '../../errors.js'
import type { Goal, Plan, PlannerContext } from '../plan.js'
import type { ComponentLogger, Logger } from '@libp2p/interface'
import type { DiscoveredAgent, Skill } from '@ioa/interconnect'

/** What a planner knows about a capability */
export type SkillInfo = Pick<Skill, 'id'> & Partial<Pick<Skill, 'name' | 'description' | 'inputSchema' | 'outputSchema'>>

/**
 * Look up each capability prefix with `discover` and collect the matching
 * skills, best-ranked agent first; one entry per skill id (the first seen)
 */
export async function discoverSkills (discover: NonNullable<PlannerContext['discover']>, prefixes: readonly string[], signal?: AbortSignal): Promise<SkillInfo[]> {
  const seen = new Map<string, SkillInfo>()
  for (const capability of prefixes) {
    signal?.throwIfAborted()
    let agents: DiscoveredAgent[]
    try {
      agents = await raceSignal(discover({ capability }), signal)
    } catch (err) {
      if (signal?.aborted === true) throw signal.reason
      throw new PlannerFailedError(`Discovery of "${capability}" failed: ${(err as Error)?.message ?? String(err)}`, { cause: err })
    }
    for (const a of agents) {
      for (const s of a.skills ?? []) {
        if (!seen.has(s.id)) seen.set(s.id, s)
      }
    }
  }
  return [...seen.values()]
}

/** A fresh plan id */
export function newPlanId (): string {
  return globalThis.crypto.randomUUID()
}

/** The logger of planner `name` (`ioa:collab:planner:<name>`), from `logger` or libp2p's default one */
export function plannerLogger (name: string, logger?: ComponentLogger): Logger {
  return (logger ?? defaultLogger()).forComponent(`ioa:collab:planner:${name}`)
}

/**
 * One `plan` call of a planner, logged: with the context's logger when it has
 * one (the orchestrator passes its node's), else the planner's own; the plan
 * made or the reason it was not (the error itself goes to the caller)
 */
export async function loggedPlan (name: string, own: Logger, goal: Goal, ctx: PlannerContext, draw: (log: Logger) => Promise<Plan>): Promise<Plan> {
  const log = ctx.logger != null ? plannerLogger(name, ctx.logger) : own
  try {
    const plan = await draw(log)
    log('planned "%s": plan %s, %d steps', goal.intent.slice(0, 200), plan.id, plan.steps.length)
    return plan
  } catch (err) {
    log('could not plan "%s": %s', String(goal?.intent).slice(0, 200), (err as Error)?.message ?? err)
    throw err
  }
}
