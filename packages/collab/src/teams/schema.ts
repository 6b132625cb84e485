/**
 * Strict field checks for the team records: every record is a DAG-CBOR map
 * with a fixed set of keys, each of a fixed kind and bound. One table per
 * record (in records.ts) instead of a hand-written check per field.
 */
import { isMap } from '../shape.js'
import type { CollabError } from '../errors.js'

export type FieldKind = 'text' | 'int' | 'number' | 'map' | 'list' | 'bytes' | 'bool'

export interface FieldSpec {
  kind: FieldKind
  /** @default true */
  required?: boolean
  /** Longest text (characters), list (items) or bytes (length) */
  max?: number
  /** Shortest text or list @default 0 (1 for text) */
  min?: number
  /** A text must match */
  pattern?: RegExp
  /** A text must be one of these */
  oneOf?: readonly string[]
}

export type Fields = Record<string, FieldSpec>

type ErrorClass = new (message?: string) => CollabError

/** Largest integer a record field may hold */
const MAX_INT = Number.MAX_SAFE_INTEGER

/**
 * Check that `value` is a map with exactly the keys of `fields` (optional
 * ones may be absent), each of its kind and within its bounds; throws `Err`
 * naming the record and the field
 */
export function checkFields (value: unknown, fields: Fields, what: string, Err: ErrorClass): Record<string, unknown> {
  if (!isMap(value)) throw new Err(`${what} must be a map`)
  for (const key in value) {
    if (!Object.hasOwn(fields, key)) throw new Err(`${what} has an unknown field "${key}"`)
  }
  for (const key in fields) {
    const spec = fields[key]
    const v = value[key]
    if (v === undefined) {
      if (spec.required !== false) throw new Err(`${what} lacks "${key}"`)
      continue
    }
    const problem = fieldProblem(v, spec)
    if (problem != null) throw new Err(`${what}.${key} ${problem}`)
  }
  return value
}

function fieldProblem (v: unknown, spec: FieldSpec): string | undefined {
  switch (spec.kind) {
    case 'text': {
      if (typeof v !== 'string') return 'must be text'
      if (v.length < (spec.min ?? 1)) return `must have at least ${spec.min ?? 1} characters`
      if (spec.max != null && v.length > spec.max) return `must have at most ${spec.max} characters`
      if (spec.pattern != null && !spec.pattern.test(v)) return 'has an invalid form'
      if (spec.oneOf != null && !spec.oneOf.includes(v)) return `must be one of ${spec.oneOf.join(', ')}`
      return undefined
    }
    case 'int':
      if (typeof v !== 'number' || !Number.isInteger(v) || v < (spec.min ?? 0) || v > (spec.max ?? MAX_INT)) {
        return `must be an integer from ${spec.min ?? 0} to ${spec.max ?? MAX_INT}`
      }
      return undefined
    case 'number':
      if (typeof v !== 'number' || !Number.isFinite(v) || v < (spec.min ?? 0) || v > (spec.max ?? MAX_INT)) {
        return `must be a number from ${spec.min ?? 0} to ${spec.max ?? MAX_INT}`
      }
      return undefined
    case 'bool':
      return typeof v === 'boolean' ? undefined : 'must be a boolean'
    case 'map':
      return isMap(v) ? undefined : 'must be a map'
    case 'bytes':
      if (!(v instanceof Uint8Array)) return 'must be bytes'
      if (spec.max != null && v.byteLength > spec.max) return `must have at most ${spec.max} bytes`
      return undefined
    case 'list':
      if (!Array.isArray(v)) return 'must be a list'
      if (v.length < (spec.min ?? 0)) return `must have at least ${spec.min ?? 0} items`
      if (spec.max != null && v.length > spec.max) return `must have at most ${spec.max} items`
      return undefined
  }
}

/** Every item of `list` is text of 1 to `max` characters matching `pattern`, no duplicates */
export function checkTextList (list: unknown[], what: string, Err: ErrorClass, opts: { max?: number, pattern?: RegExp, unique?: boolean } = {}): string[] {
  const seen = new Set<string>()
  for (const item of list) {
    if (typeof item !== 'string' || item.length === 0 || item.length > (opts.max ?? 256) || (opts.pattern != null && !opts.pattern.test(item))) {
      throw new Err(`${what} has an invalid item`)
    }
    if (opts.unique !== false && seen.has(item)) throw new Err(`${what} lists "${item}" twice`)
    seen.add(item)
  }
  return list as string[]
}

/** A signed record's envelope `{ payload, sig }`: a map payload and a 64-byte Ed25519 signature */
export function checkSigned (value: unknown, what: string, Err: ErrorClass): { payload: Record<string, unknown>, sig: Uint8Array } {
  const v = checkFields(value, SIGNED_FIELDS, what, Err)
  if ((v.sig as Uint8Array).byteLength !== 64) throw new Err(`${what}.sig must be 64 bytes`)
  return v as { payload: Record<string, unknown>, sig: Uint8Array }
}

const SIGNED_FIELDS: Fields = { payload: { kind: 'map' }, sig: { kind: 'bytes', max: 64 } }
