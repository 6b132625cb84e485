/**
 * What the planners share (not part of the package's public API): skill
 * discovery by capability prefix, plan ids
 */
import { raceSignal } from 'race-signal'
import { PlannerFailedError } from '../../errors.js'
import type { PlannerContext } from '../plan.js'
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
