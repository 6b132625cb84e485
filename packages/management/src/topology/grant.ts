/**
 * The operator's grant to a management agent (`TopologyInit.proofs`,
 * the config's `management.proofs`), checked when the agent starts: a grant
 * the watched nodes would refuse on every call fails the start with a
 * reason instead (spec/management.md 1.7).
 */
import { skillCovers } from '@ioa/collab'
import { InvalidGrantError } from '../errors.js'
import type { Token } from '@ioa/collab'
import type { Did } from '@ioa/interconnect'

/** The method a management agent calls on every node it watches */
const WATCH = 'ioa.manage.watch'

/** Throw `InvalidGrantError` unless `proofs` (leaf first) is addressed to `holder`, grants `ioa.manage.watch` and is not expired at `now` */
export function checkGrant (proofs: Token[], holder: Did, now = Date.now()): void {
  const first = proofs[0]
  if (first == null) return
  if (first.payload.aud !== holder) {
    throw new InvalidGrantError(`The grant's first token is addressed to ${first.payload.aud}, not to this node's key ${holder}`)
  }
  if (!first.payload.cap.some(c => skillCovers(c.skill, WATCH))) {
    throw new InvalidGrantError(`The grant's first token does not grant ${WATCH} (it grants ${first.payload.cap.map(c => c.skill).join(', ')})`)
  }
  const expired = proofs.findIndex(p => p.payload.exp <= now)
  if (expired >= 0) throw new InvalidGrantError(`Token ${expired} of the grant expired at ${new Date(proofs[expired].payload.exp).toISOString()}`)
}
