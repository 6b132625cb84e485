/**
 * The DAG-JSON forms the spec's test vectors use for values JSON cannot
 * express (bytes, CIDs), to and from in-memory values
 */
import { CID } from 'multiformats/cid'

/** DAG-JSON forms in the vectors -> in-memory values */
export function revive (v: unknown): unknown {
  if (Array.isArray(v)) return v.map(revive)
  if (v != null && typeof v === 'object') {
    const o = v as Record<string, unknown>
    const keys = Object.keys(o)
    if (keys.length === 1 && keys[0] === '/') {
      const inner = o['/']
      if (typeof inner === 'string') return CID.parse(inner)
      if (inner != null && typeof inner === 'object' && typeof (inner as { bytes?: unknown }).bytes === 'string') {
        return new Uint8Array(Buffer.from((inner as { bytes: string }).bytes, 'base64'))
      }
    }
    return Object.fromEntries(keys.map(k => [k, revive(o[k])]))
  }
  return v
}

/** In-memory values -> DAG-JSON forms, for comparing decoded frames with the vectors */
export function toJson (v: unknown): unknown {
  if (v instanceof Uint8Array) return { '/': { bytes: Buffer.from(v).toString('base64').replace(/=+$/, '') } }
  const cid = CID.asCID(v)
  if (cid != null) return { '/': cid.toString() }
  if (Array.isArray(v)) return v.map(toJson)
  if (v != null && typeof v === 'object') {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, toJson(x)]))
  }
  return v
}
