/**
 * Approval rules of a node's config (`tasks.approvals`): which tasks wait in
 * `auth-required` for the approval of their chain's root principal
 * (spec/collab-tasks.md 4.1 and 4.2). Without rules no task asks for one.
 */
import { allOf, approvalPolicy, isSkillPattern, skillCovers } from '@ioa/collab'
import { ConfigError } from './errors.js'
import type { ApprovalRuleConfig } from './config.js'
import type { IoaNodeInit } from './ioa-node.js'
import type { Policy, PolicyContext } from '@ioa/collab'

/** Whether a rule asks for approval of this call */
function asks (rule: ApprovalRuleConfig, ctx: PolicyContext): boolean {
  if (!skillCovers(rule.skill, ctx.skill)) return false
  if (rule.above == null) return true
  const input = ctx.input != null && typeof ctx.input === 'object' && !Array.isArray(ctx.input) ? ctx.input as Record<string, unknown> : {}
  return Object.entries(rule.above).some(([field, bound]) => {
    const value = input[field]
    // fail closed: an input that does not say how much is asked about
    return typeof value !== 'number' || !Number.isFinite(value) || value > bound
  })
}

/** The policy of the rules: approve when one asks (with its reason), else allow */
export function approvalRulesPolicy (rules: readonly ApprovalRuleConfig[]): Policy {
  for (const [i, rule] of rules.entries()) {
    if (!isSkillPattern(rule.skill)) {
      throw new ConfigError(`Invalid config at "tasks.approvals.${i}.skill": a capability name, a name followed by '.*', or '*'`, `tasks.approvals.${i}.skill`)
    }
  }
  return allOf(...rules.map(rule => approvalPolicy(ctx => asks(rule, ctx), rule.reason)))
}

/** Node options with the config's approval rules added after the task service's own policy */
export function withApprovalRules (init: IoaNodeInit, rules: readonly ApprovalRuleConfig[] | undefined): IoaNodeInit {
  if (rules == null || rules.length === 0) return init
  const approvals = approvalRulesPolicy(rules)
  const policy = init.tasks?.policy
  return { ...init, tasks: { ...init.tasks, policy: policy != null ? allOf(policy, approvals) : approvals } }
}
