/**
 * Team formation on the convener's side (`spec/teams.md` 2, 3): candidates
 * found by capability and ranked by the matcher, one invitation at a time per
 * role (roles in parallel), each carrying the member's narrowed delegation,
 * until every role has a member; then the first roster.
 */
import { peerIdFromString } from '@libp2p/peer-id'
import { delegate, encodeToken, tokenCid } from '../auth/delegation.js'
import { skillCovers } from '../auth/chain.js'
import { TEAM_PROTOCOL } from './api.js'
import { DepthExceededError, InvalidTeamRecordError, TeamFormationError } from './errors.js'
import { cidOf, newId, parseAcceptance, parseDecline, parseGoal, parseRosterLimits, signRecord, verifyRecord } from './records.js'
import { flowLimits } from './flow/options.js'
import { repetitionLimits } from './repetition.js'
import { isMap } from '../shape.js'
import type { FormOptions, Matcher, RoleFailure, RoleInit, TeamServiceComponents, TeamsLimits } from './api.js'
import type { Capability, Token } from '../auth/delegation.js'
import type { Acceptance, InvitationPayload, Roster, RosterMember, RosterPayload, TeamGoal } from './records.js'
import type { DiscoveredAgent, Did, Identity } from '@ioa/interconnect'
import type { Logger } from '@libp2p/interface'

export interface FormationDeps {
  components: TeamServiceComponents
  limits: TeamsLimits
  log: Logger
  matcher: Matcher
}

export interface Formed {
  roster: Roster
  /** Members that accepted, with the invitation each accepted */
  accepted: Array<{ member: RosterMember, acceptance: Acceptance }>
}

interface Candidate {
  agent: Did
  peer: string
}

/** Capabilities a token grants for a role: each name and everything below it */
function roleCapabilities (role: RoleInit, goal: TeamGoal): Capability[] {
  return role.capabilities.map(c => goal.constraints == null ? { skill: `${c}.*` } : { skill: `${c}.*`, constraints: goal.constraints })
}

/** Does a discovered agent serve every capability of the role? */
function servesAll (d: DiscoveredAgent, caps: string[]): boolean {
  return caps.every(c => d.card.skills.some(s => skillCovers(`${c}.*`, s.id)))
}

/** One lookup per capability per formation, shared by the roles that need it */
type Lookups = Map<string, Promise<DiscoveredAgent[]>>

async function candidatesFor (deps: FormationDeps, convener: Did, goal: TeamGoal, role: RoleInit, options: FormOptions, exclude: ReadonlySet<Did>, lookups: Lookups, share: number): Promise<Candidate[]> {
  if (role.candidates != null) return role.candidates.filter(c => !exclude.has(c.agent) && c.agent !== convener)
  const capability = role.capabilities[0]
  let lookup = lookups.get(capability)
  if (lookup == null) {
    lookup = deps.components.interconnect.discoverAll({ capability }, { timeout: options.discoveryTimeout ?? 5_000, cache: options.cache, signal: options.signal })
    lookups.set(capability, lookup)
  }
  const found = await lookup
  const fit = found.filter(d => d.card.id !== convener && !exclude.has(d.card.id) && servesAll(d, role.capabilities))
  const ranked = await deps.matcher(goal, capability, fit)
  // the roles that share a capability share its ranking: each may try its number of candidates
  return ranked.slice(0, (options.candidates ?? deps.limits.candidatesPerCapability) * share).map(d => ({ agent: d.card.id, peer: d.card.peer }))
}

/**
 * Invite one candidate (spec 3.2, 3.3): resolves with its verified acceptance
 * or throws with the decline's code and reason
 */
export async function invite (deps: FormationDeps, convener: Identity, team: string, goal: TeamGoal, role: RoleInit, candidate: Candidate, extra: {
  proofs: Token[], depth: number, parent?: InvitationPayload['parent'], signal?: AbortSignal
  /** Peer id of the team's current sequencer @default this node (the convener sequences epoch 0) */
  sequencer?: string
}): Promise<{ member: RosterMember, acceptance: Acceptance }> {
  const { inviteTimeout } = deps.limits
  // a member's token lasts until the deadline, but never past the convener's own authority
  const expiresAt = Math.min(goal.deadline, ...extra.proofs.map(p => p.payload.exp))
  // the token's direct proof is the chain's leaf (a member's sub-team: its own team token); the rest travels in `proofs`
  const token = await delegate(convener, {
    audience: candidate.agent, capabilities: roleCapabilities(role, goal), expiresAt, proofs: extra.proofs.slice(0, 1)
  }, { signal: extra.signal })
  const payload: InvitationPayload = {
    v: 1,
    team,
    from: convener.did,
    to: candidate.agent,
    goal,
    role: role.role,
    capabilities: role.capabilities,
    token: encodeToken(token),
    proofs: extra.proofs.map(t => encodeToken(t)),
    depth: extra.depth,
    sequencer: extra.sequencer ?? deps.components.peerId.toString(),
    exp: Date.now() + Math.min(inviteTimeout, 60_000),
    nonce: newId()
  }
  if (extra.parent != null) payload.parent = extra.parent
  const invitation = await signRecord('invite', payload, convener)
  const answer = await deps.components.messaging.request(peerIdFromString(candidate.peer), TEAM_PROTOCOL, 'invite', { invitation }, { timeout: inviteTimeout, signal: extra.signal })
  if (!isMap(answer)) throw new TeamFormationError('Malformed answer to an invitation')
  if (answer.decline != null) {
    const d = parseDecline(answer.decline)
    throw Object.assign(new TeamFormationError(`${candidate.agent} declined: ${d.code} ${d.reason}`), { decline: d })
  }
  const acceptance = parseAcceptance(answer.accept)
  const a = acceptance.payload
  if (a.team !== team || a.from !== candidate.agent || a.invite !== await cidOf(invitation) || a.peer !== candidate.peer) {
    throw new TeamFormationError(`${candidate.agent} accepted another invitation`)
  }
  if (!await verifyRecord('accept', acceptance, candidate.agent)) throw new TeamFormationError(`${candidate.agent}'s acceptance does not verify`)
  const chain = [(await tokenCid(token)).toString(), ...await Promise.all(extra.proofs.map(async t => (await tokenCid(t)).toString()))]
  return { member: { agent: candidate.agent, peer: candidate.peer, role: role.role, token: chain[0], chain }, acceptance }
}

/**
 * Form a team: fill every role, then sign the first roster. Throws
 * `TeamFormationError` with `failures` when a role stays empty.
 */
export async function formTeam (deps: FormationDeps, convener: Identity, team: string, goal: TeamGoal, options: FormOptions = {}): Promise<Formed> {
  parseGoal(goal)
  const depth = options.depth ?? 0
  if (depth > deps.limits.maxDepth) throw new DepthExceededError(`Team depth ${depth} is deeper than ${deps.limits.maxDepth}`)
  const roles = options.roles ?? goal.capabilities.map(c => ({ role: c, capabilities: [c] }))
  if (roles.length + 1 > deps.limits.maxMembers) throw new TeamFormationError(`${roles.length} roles do not fit ${deps.limits.maxMembers} members`)
  const limits = parseRosterLimits({
    maxMessageBytes: deps.limits.maxMessageBytes, rate: deps.limits.rate, burst: deps.limits.burst, historyBytes: deps.limits.historyBytes, ...flowLimits(options.flow), ...repetitionLimits(deps.limits)
  }, InvalidTeamRecordError)
  const proofs = options.proofs ?? []
  const used = new Set<Did>([convener.did])
  const lookups: Lookups = new Map()
  const failures: RoleFailure[] = []
  const results = await Promise.all(roles.map(async (role) => {
    const failure: RoleFailure = { role: role.role, tried: [] }
    let candidates: Candidate[]
    try {
      candidates = await candidatesFor(deps, convener.did, goal, role, options, used, lookups, roles.filter(r => r.capabilities[0] === role.capabilities[0]).length)
    } catch (err: any) {
      deps.log.error('team %s: discovery for role %s failed - %e', team, role.role, err)
      candidates = []
    }
    for (const c of candidates) {
      if (used.has(c.agent)) continue
      used.add(c.agent)
      try {
        return await invite(deps, convener, team, goal, role, c, { proofs, depth, parent: options.parent, signal: options.signal })
      } catch (err: any) {
        used.delete(c.agent)
        const declined = err?.decline != null
        failure.tried.push({ agent: c.agent, outcome: declined ? 'declined' : 'failed', code: declined ? err.decline.code : (err?.code ?? 'ERROR'), reason: declined ? err.decline.reason : String(err?.message) })
        deps.log('team %s: %s for role %s: %s', team, c.agent, role.role, err?.message)
      }
    }
    failures.push(failure)
    return undefined
  }))
  if (failures.length > 0) {
    throw Object.assign(new TeamFormationError(`No member for role(s) ${failures.map(f => f.role).join(', ')}`), { failures })
  }
  const accepted = results as Array<{ member: RosterMember, acceptance: Acceptance }>
  const leafCid = proofs.length > 0 ? (await tokenCid(proofs[0])).toString() : undefined
  const self: RosterMember = {
    agent: convener.did,
    peer: deps.components.peerId.toString(),
    role: 'convener',
    chain: await Promise.all(proofs.map(async t => (await tokenCid(t)).toString()))
  }
  if (leafCid != null) self.token = leafCid
  const members = [self, ...accepted.map(a => a.member)].sort((a, b) => a.agent < b.agent ? -1 : 1)
  const roster: RosterPayload = {
    v: 1,
    team,
    version: 1,
    epoch: 0,
    goal,
    convener: convener.did,
    members,
    successors: [convener.did, ...accepted.map(a => a.member.agent)],
    depth,
    deadline: goal.deadline,
    limits,
    signer: convener.did,
    ts: Date.now()
  }
  if (options.parent != null) roster.parent = options.parent
  return { roster: await signRecord('roster', roster, convener), accepted }
}
