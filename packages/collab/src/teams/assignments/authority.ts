/**
 * What ties a task to a team assignment (spec/teams.md 10.6): the task's
 * `contextId` names the team and the `assign` entry, and the task's chain is
 * the assigner's team chain with one more token, narrowed to the assigned
 * skill, addressed to the assignee, expiring no later than the team.
 */
import { decodeToken, delegate, skillCovers } from '../../auth/delegation.js'
import { EscalationError } from '../../errors.js'
import { NotAssignedError } from '../errors.js'
import type { Capability, Token } from '../../auth/delegation.js'
import type { TeamRuntime } from '../team.js'
import type { Did, Identity } from '@ioa/interconnect'

const PREFIX = 'ioa-team:'
const CONTEXT = /^ioa-team:(t[a-z2-7]{26}):(0|[1-9][0-9]{0,14})$/

/** The task's `contextId` for the `assign` entry `seq` of `team` */
export function assignmentContext (team: string, seq: number): string {
  return `${PREFIX}${team}:${seq}`
}

/**
 * The team and `assign` seq a task's `contextId` names, or undefined for a
 * task of no team (no `ioa-team:` prefix); throws `NotAssignedError` for a
 * malformed one
 */
export function parseAssignmentContext (contextId: string | undefined): { team: string, seq: number } | undefined {
  if (contextId == null || !contextId.startsWith(PREFIX)) return undefined
  const m = CONTEXT.exec(contextId)
  if (m == null) throw new NotAssignedError(`Malformed team context ${contextId.slice(0, 80)}`)
  return { team: m[1], seq: Number(m[2]) }
}

/** The local member's team chain, leaf first: its invitation's token and proofs, or the convener's own proofs */
export function teamChain (team: TeamRuntime): Token[] {
  const inv = team.invitation
  if (inv != null) return [decodeToken(inv.payload.token), ...inv.payload.proofs.map(t => decodeToken(t))]
  return team.convenerProofs ?? []
}

/**
 * The token `T` of an assignment (spec 10.6): from `issuer` (the assigner)
 * to `assignee` for exactly `skill`, with the constraints its leaf token has
 * for it, expiring at `expiresAt` or the chain's earliest `exp`, whichever
 * is sooner, its `prf` the chain's leaf. Throws `EscalationError` when the
 * chain does not grant the skill. `nonce` is for test vectors only.
 */
export async function assignmentToken (issuer: Identity, chain: Token[], assignee: Did, skill: string, expiresAt: number, options: { signal?: AbortSignal, nonce?: string } = {}): Promise<Token> {
  let cap: Capability = { skill }
  if (chain.length > 0) {
    const granted = chain[0].payload.cap.find(c => skillCovers(c.skill, skill))
    if (granted == null) throw new EscalationError(`The team token of ${issuer.did} does not grant ${skill}`)
    if (granted.constraints != null) cap = { skill, constraints: granted.constraints }
  }
  const exp = Math.min(expiresAt, ...chain.map(t => t.payload.exp))
  return await delegate(issuer, {
    audience: assignee, capabilities: [cap], expiresAt: exp, proofs: chain.slice(0, 1), ...(options.nonce != null ? { nonce: options.nonce } : {})
  }, { signal: options.signal })
}

/**
 * The proofs of an assignment's task: `T` (above, valid until the team's
 * deadline at the latest) followed by the local member's team chain.
 * Throws `EscalationError` when the chain does not grant the skill
 * (nothing is posted then).
 */
export async function assignmentProofs (team: TeamRuntime, assignee: Did, skill: string, expiresAt: number, signal?: AbortSignal): Promise<Token[]> {
  const chain = teamChain(team)
  const token = await assignmentToken(team.identity, chain, assignee, skill, Math.min(expiresAt, team.roster.deadline), { signal })
  return [token, ...chain]
}
