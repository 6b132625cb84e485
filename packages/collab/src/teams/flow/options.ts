/**
 * The convener's flow options (`FormOptions.flow`) as the optional fields of
 * the first roster's `limits` (spec 3.5, 10): only what differs from the
 * defaults is written, so a team without flow options has the roster of
 * Teams I.
 */
import { FLOW_DEFAULTS } from './state.js'
import type { FlowOptions } from '../api.js'
import type { RosterLimits } from '../records.js'

export function flowLimits (flow: FlowOptions = {}): Partial<RosterLimits> {
  const out: Partial<RosterLimits> = {}
  if (flow.policy != null && flow.policy !== FLOW_DEFAULTS.policy) out.policy = flow.policy
  if (flow.maxTurns != null && flow.maxTurns !== FLOW_DEFAULTS.maxTurns) out.maxTurns = flow.maxTurns
  if (flow.moderator != null && flow.moderator !== FLOW_DEFAULTS.moderator) out.moderator = flow.moderator
  if (flow.priority != null) out.priority = flow.priority
  if (flow.turnTimeout != null && flow.turnTimeout !== FLOW_DEFAULTS.turnTimeout) out.turnTimeout = flow.turnTimeout
  return out
}
