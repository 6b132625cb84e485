/**
 * A sub-team formed by a member of a team whose convener holds a delegated
 * chain (a team formed inside a task, as in the festival demo), over TCP on
 * 127.0.0.1: the sub-team's invitations carry the member's whole chain
 * (root -> convener -> member -> sub-member) with the member's own team
 * token as the one direct proof. Before the fix every invitation of such a
 * sub-team failed `PRINCIPAL_MISMATCH` (the whole chain was given as direct
 * proofs) and the sub-team could not form.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { delegate, tokenCid } from '../src/auth/delegation.js'
import { goal, settled, startTeamPeers } from './teams-fixture.js'
import { createIdentity } from '@ioa/interconnect'
import type { Team } from '../src/teams/index.js'

let closers: Array<() => Promise<unknown>> = []

afterEach(async () => {
  for (const c of closers.reverse()) await c().catch(() => {})
  closers = []
})

describe('sub-teams under a delegated chain', () => {
  it('a member of a team convened under a user\'s token forms its sub-team; the sub-member\'s chain ends at the user', async () => {
    const [root, lead, helper] = await startTeamPeers(closers, 3, i => ({ skills: [['event.plan', 'transport.plan', 'transport.bus'][i]] }))
    const user = await createIdentity()
    const authority = await delegate(user, { audience: root.agent.did, capabilities: [{ skill: 'transport.*' }], expiresAt: Date.now() + 3_600_000 })
    const team = await root.teams.form(root.agent.did, goal('move the festival day', ['transport']), {
      proofs: [authority],
      roles: [{ role: 'transport', capabilities: ['transport'], candidates: [lead.ref] }]
    })
    await settled([lead], team.id, 1)
    const leadTeam = lead.teams.team(team.id) as Team
    const sub = await leadTeam.formSubteam(goal('shuttle buses', ['transport.bus']), { roles: [{ role: 'bus', capabilities: ['transport.bus'], candidates: [helper.ref] }] })
    expect(sub.roster.parent).toEqual({ team: team.id, member: lead.agent.did })
    const member = sub.roster.members.find(m => m.agent === helper.agent.did)
    // the helper's token, the lead's team token, the user's token to the convener
    expect(member?.chain).toHaveLength(3)
    expect(member?.chain.at(-1)).toBe((await tokenCid(authority)).toString())
  })
})
