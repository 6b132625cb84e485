/**
 * The rule policies (`spec/teams.md` 10.4): `round-robin`, `moderator` and
 * `priority`, pure functions of the roster and the state, so that every
 * member can check a rule's decision.
 */
import type { FlowParams } from './state.js'
import type { RosterPayload } from '../records.js'
import type { Did } from '@ioa/interconnect'

/** What a decision follows: a turn ended, its speaker left, or a silent speaker is skipped */
export interface Trigger {
  kind: 'turn' | 'left' | 'skip'
  /** The member whose turn ended, who left, or who is skipped */
  after: Did
  /** The speaker a moderator's message named */
  named?: Did
}

export type RuleName = 'round-robin' | 'moderator' | 'priority'

export function isRulePolicy (name: string): name is RuleName {
  return name === 'round-robin' || name === 'moderator' || name === 'priority'
}

/** The member after `after` in the successor order (wrapping); the first successor when `after` is no longer a member */
export function roundRobin (roster: RosterPayload, after: Did): Did {
  const order = roster.successors
  const i = order.indexOf(after)
  return order[(i + 1) % order.length]
}

/** The moderator: the first successor whose role is `params.moderator` */
export function moderatorOf (params: FlowParams, roster: RosterPayload): Did | undefined {
  return roster.successors.find(a => roster.members.find(m => m.agent === a)?.role === params.moderator)
}

function moderated (params: FlowParams, roster: RosterPayload, t: Trigger): Did {
  const mod = moderatorOf(params, roster)
  // no moderator in the team: the turn goes round
  if (mod == null) return roundRobin(roster, t.after)
  if (t.after === mod) {
    // the moderator names the next speaker; a silent or leaving moderator passes the turn round
    if (t.kind !== 'turn') return roundRobin(roster, t.after)
    return t.named != null && roster.members.some(m => m.agent === t.named) ? t.named : mod
  }
  return mod
}

function prioritised (params: FlowParams, roster: RosterPayload, spoken: ReadonlyMap<Did, number>): Did {
  const rank = (a: Did): number => {
    const role = roster.members.find(m => m.agent === a)?.role ?? ''
    const r = params.priority.indexOf(role)
    return r === -1 ? params.priority.length : r
  }
  // the fewest turns first; among those the highest-priority role, then the successor order
  let best = roster.successors[0]
  for (const a of roster.successors) {
    const da = spoken.get(a) ?? 0
    const db = spoken.get(best) ?? 0
    if (da < db || (da === db && rank(a) < rank(best))) best = a
  }
  return best
}

/** The next speaker under a rule policy */
export function ruleSpeaker (name: string, params: FlowParams, roster: RosterPayload, spoken: ReadonlyMap<Did, number>, t: Trigger): Did {
  switch (name) {
    case 'moderator': return moderated(params, roster, t)
    case 'priority': return prioritised(params, roster, spoken)
    default: return roundRobin(roster, t.after)
  }
}
