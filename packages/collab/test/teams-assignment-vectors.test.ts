/**
 * Assignments against the `assignment-vectors` block of `spec/teams.md`
 * section 12 (read at run time): the task's `contextId` that names a team's
 * `assign` entry, and the token an assigner issues to its assignee from its
 * team chain (10.6), rebuilt from the same seeds and nonce.
 */
import { identityFromPrivateKey } from '@ioa/interconnect'
import { describe, expect, it } from 'vitest'
import { ed25519KeyFromSeed, expectErrorCode, fromHex, readSpecBlock, toHex } from '../../../test/util.js'
import { decodeToken, encodeToken, tokenCid, verifyChain } from '../src/auth/delegation.js'
import { assignmentContext, assignmentToken, parseAssignmentContext } from '../src/teams/assignments/authority.js'
import type { Did } from '@ioa/interconnect'

interface TeamVectors {
  principals: Record<string, { seed: string, did: string }>
  tokens: Record<string, { token: string, cid: string }>
}

interface AssignmentVectors {
  team: string
  seq: number
  contextId: string
  assigner: string
  assignee: string
  skill: string
  expiresAt: number
  chain: string[]
  token: { payload: Record<string, unknown>, token: string, cid: string }
}

const teams = readSpecBlock<TeamVectors>('teams.md', 'team-vectors')
const v = readSpecBlock<AssignmentVectors>('teams.md', 'assignment-vectors')
const NONCE = Buffer.alloc(16, 0x46).toString('base64url')

describe('spec/teams.md assignment vectors', () => {
  it('the contextId names the team and the assign entry, and parses back; a malformed one is refused', () => {
    expect(assignmentContext(v.team, v.seq)).toBe(v.contextId)
    expect(parseAssignmentContext(v.contextId)).toEqual({ team: v.team, seq: v.seq })
    expect(parseAssignmentContext('some-context')).toBeUndefined()
    for (const bad of [`ioa-team:${v.team}:05`, `ioa-team:${v.team}:-1`, `ioa-team:x${v.team}:5`, `ioa-team:${v.team}`]) {
      expect(() => parseAssignmentContext(bad)).toThrow(expect.objectContaining({ code: 'NOT_ASSIGNED' }))
    }
  })

  it('the assignment token: rebuilt from the chain, it has the vector payload, encoding and CID, and verifies under the chain', async () => {
    const assigner = identityFromPrivateKey(await ed25519KeyFromSeed(teams.principals[v.assigner].seed))
    const chain = v.chain.map(name => decodeToken(fromHex(teams.tokens[name].token)))
    const token = await assignmentToken(assigner, chain, teams.principals[v.assignee].did as Did, v.skill, v.expiresAt, { nonce: NONCE })
    expect(token.payload).toEqual(v.token.payload)
    expect(toHex(encodeToken(token))).toBe(v.token.token)
    expect((await tokenCid(token)).toString()).toBe(v.token.cid)
    expect(token.payload.prf).toEqual([teams.tokens[v.chain[0]].cid])
    const verified = await verifyChain(decodeToken(fromHex(v.token.token)), chain, { now: v.expiresAt - 60_000 })
    expect(verified.audience).toBe(teams.principals[v.assignee].did)
    expect(verified.capabilities).toEqual([{ skill: v.skill }])
    // the assigner cannot hand on what its team token does not grant
    await expectErrorCode(assignmentToken(assigner, chain, teams.principals[v.assignee].did as Did, 'travel.payment.pay', v.expiresAt), 'ESCALATION')
  })
})
