/**
 * Helpers shared by the spec-vector tests of teams (teams-vectors.test.ts,
 * teams-negotiation-vectors.test.ts): the shape of one signed record of
 * `spec/teams.md` section 12, and the refusal a strict parser throws.
 */
import type { RecordKind } from '../src/teams/records.js'

/** One signed record of the vectors: payload, signing bytes, signature, encoding and CID */
export interface VectorRecord {
  kind: RecordKind
  signer: string
  payload: Record<string, unknown>
  signingBytes: string
  signature: string
  record: string
  cid: string
}

/** The error `fn` throws (undefined when it does not throw) */
export function refusal (fn: () => unknown): unknown {
  try {
    fn()
  } catch (err) {
    return err
  }
  return undefined
}
