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

/** The bytes each wire value (a map or list made by `wireValue`) was decoded from */
const encoded = new WeakMap<object, Uint8Array>()

/**
 * @internal The DAG-CBOR bytes a value made by `wireValue` was decoded from
 * (so that storing it does not encode it again); undefined for any other
 * object
 */
export function encodedValue (value: object): Uint8Array | undefined {
  return encoded.get(value)
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
  const decoded: unknown = dagCbor.decode(bytes)
  if (typeof decoded === 'object' && decoded !== null) encoded.set(decoded, bytes)
  return { bytes, value: decoded }
}
