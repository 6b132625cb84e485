/**
 * Helpers shared by the spec-vector tests of teams (teams-vectors.test.ts,
 * teams-negotiation-vectors.test.ts): the shape of one signed record of
 * `spec/teams.md` section 12, its JSON form of bytes, and the refusal a strict
 * parser throws.
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

/** The vectors' JSON form of bytes: `{ "/": { "bytes": <base64, no padding> } }` (the DAG-JSON convention) */
export function fromJson (v: unknown): any {
  if (Array.isArray(v)) return v.map(fromJson)
  if (v != null && typeof v === 'object') {
    const o = v as Record<string, any>
    const keys = Object.keys(o)
    if (keys.length === 1 && keys[0] === '/' && typeof o['/']?.bytes === 'string') return new Uint8Array(Buffer.from(o['/'].bytes, 'base64'))
    return Object.fromEntries(keys.map(k => [k, fromJson(o[k])]))
  }
  return v
}
