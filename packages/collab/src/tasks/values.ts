/**
 * What a handler hands to the executor (results, progress messages,
 * artifacts) made wire-ready: `undefined` map values are dropped as
 * `JSON.stringify` drops them, `undefined` list items become `null` (as in
 * JSON), and the rest must be DAG-CBOR encodable (spec/collab-tasks.md,
 * "Handler values").
 */
import * as dagCbor from '@ipld/dag-cbor'
import type { CollabError } from '../errors.js'

/** Deepest nesting copied; deeper values are refused as not encodable */
const MAX_DEPTH = 256

function isPlain (value: object): boolean {
  const proto = Object.getPrototypeOf(value)
  return proto === Object.prototype || proto === null
}

/** A copy of `value` without `undefined` map values (`undefined` list items become `null`) */
export function withoutUndefined (value: unknown, depth = 0): unknown {
  if (value === undefined) return null
  if (value === null || typeof value !== 'object' || depth > MAX_DEPTH) return value
  if (Array.isArray(value)) return value.map(v => withoutUndefined(v, depth + 1))
  if (!isPlain(value)) return value
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(value)) {
    if (v !== undefined) out[k] = withoutUndefined(v, depth + 1)
  }
  return out
}

/**
 * A handler value as it goes on the wire: its DAG-CBOR bytes and the value
 * decoded from them. Throws `fail(message)` when it cannot be encoded.
 */
export function wireValue (value: unknown, what: string, fail: (message: string) => CollabError): { bytes: Uint8Array, value: unknown } {
  let bytes: Uint8Array
  try {
    bytes = dagCbor.encode(withoutUndefined(value))
  } catch (err: any) {
    throw fail(`${what} is not DAG-CBOR encodable: ${String(err?.message ?? err).slice(0, 200)}`)
  }
  return { bytes, value: dagCbor.decode(bytes) }
}
