/**
 * The journal's record encoder: the same bytes as
 * `dagCbor.encode(<record without its undefined map values>)`, written by
 * hand for what journal records are made of (plain maps, lists, strings,
 * integers, booleans, null) in one pass, without the generic encoder's
 * per-value type dispatch and token objects. Anything else (floats, bytes,
 * CIDs, class instances, a map with a `/` or `asCID` key, nesting deeper
 * than MAX_DEPTH) is encoded by `@ipld/dag-cbor` itself at its place: a
 * DAG-CBOR value's encoding does not depend on where it sits, so the record's
 * bytes stay those of the spec (spec/collab-orchestration.md, section 6).
 *
 * Map keys are ordered as DAG-CBOR orders them (length first, then bytes).
 */
import * as dagCbor from '@ipld/dag-cbor'
import { encodeWith } from '../cbor-write.js'
import type { CborWriter } from '../cbor-write.js'

/** Below this depth the generic encoder takes over (it also catches cycles) */
const MAX_DEPTH = 32

const utf8 = new TextEncoder()

function byteLength (s: string): number {
  // ASCII (every key the journal writes itself): one byte a character
  for (let i = 0; i < s.length; i++) {
    if (s.charCodeAt(i) > 0x7f) return utf8.encode(s).length
  }
  return s.length
}

function compareKeys (a: string, b: string): number {
  const la = byteLength(a)
  const lb = byteLength(b)
  if (la !== lb) return la - lb
  if (la === a.length && lb === b.length) return a < b ? -1 : a > b ? 1 : 0
  const ea = utf8.encode(a)
  const eb = utf8.encode(b)
  for (let i = 0; i < ea.length; i++) {
    if (ea[i] !== eb[i]) return ea[i] - eb[i]
  }
  return 0
}

/** The keys in DAG-CBOR's order, sorted in place (an insertion sort for the few keys of a record's maps) */
function sortKeys (keys: string[]): string[] {
  if (keys.length > 16) return keys.sort(compareKeys)
  for (let i = 1; i < keys.length; i++) {
    const k = keys[i]
    let j = i - 1
    while (j >= 0 && compareKeys(keys[j], k) > 0) {
      keys[j + 1] = keys[j]
      j--
    }
    keys[j + 1] = k
  }
  return keys
}

const TRUE = Uint8Array.of(0xf5)
const FALSE = Uint8Array.of(0xf4)
const NULL = Uint8Array.of(0xf6)

function isPlain (value: object): boolean {
  const proto = Object.getPrototypeOf(value)
  return proto === Object.prototype || proto === null
}

function write (w: CborWriter, value: unknown, depth: number): void {
  switch (typeof value) {
    case 'string':
      w.text(value)
      return
    case 'boolean':
      w.raw(value ? TRUE : FALSE)
      return
    case 'number':
      if (Number.isSafeInteger(value)) {
        if (value >= 0) w.head(0, value)
        else w.head(1, -value - 1)
        return
      }
      break
    case 'object':
      if (value === null) {
        w.raw(NULL)
        return
      }
      if (depth >= MAX_DEPTH) break
      if (Array.isArray(value)) {
        w.head(4, value.length)
        for (const v of value) write(w, v, depth + 1)
        return
      }
      if (isPlain(value) && !('/' in value) && !('asCID' in value)) {
        const obj = value as Record<string, unknown>
        const keys = sortKeys(Object.keys(obj))
        let n = 0
        for (const k of keys) if (obj[k] !== undefined) n++
        w.head(5, n)
        for (const k of keys) {
          const v = obj[k]
          if (v === undefined) continue
          w.text(k)
          write(w, v, depth + 1)
        }
        return
      }
      break
  }
  // floats, bytes, CIDs, undefined in a list, anything else: the generic encoder (which also rejects what DAG-CBOR cannot hold)
  w.raw(dagCbor.encode(value))
}

/** A journal record's DAG-CBOR bytes (undefined map values left out) */
export function encodeRecord (value: unknown): Uint8Array {
  return encodeWith(w => { write(w, value, 0) })
}
