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

/** The keys in DAG-CBOR's order (sorted in place: an insertion sort, maps here have a few keys) */
function sortKeys (keys: string[]): string[] {
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

class Writer {
  buf = new Uint8Array(4_096)
  len = 0

  private room (n: number): void {
    if (this.len + n <= this.buf.length) return
    let size = this.buf.length * 2
    while (size < this.len + n) size *= 2
    const next = new Uint8Array(size)
    next.set(this.buf.subarray(0, this.len))
    this.buf = next
  }

  head (major: number, n: number): void {
    this.room(9)
    const b = this.buf
    const m = major << 5
    if (n < 24) {
      b[this.len++] = m | n
    } else if (n < 0x100) {
      b[this.len++] = m | 24
      b[this.len++] = n
    } else if (n < 0x10000) {
      b[this.len++] = m | 25
      b[this.len++] = n >>> 8
      b[this.len++] = n & 0xff
    } else if (n < 0x100000000) {
      b[this.len++] = m | 26
      b[this.len++] = n >>> 24
      b[this.len++] = (n >>> 16) & 0xff
      b[this.len++] = (n >>> 8) & 0xff
      b[this.len++] = n & 0xff
    } else {
      const hi = Math.floor(n / 0x100000000)
      const lo = n >>> 0
      b[this.len++] = m | 27
      b[this.len++] = hi >>> 24
      b[this.len++] = (hi >>> 16) & 0xff
      b[this.len++] = (hi >>> 8) & 0xff
      b[this.len++] = hi & 0xff
      b[this.len++] = lo >>> 24
      b[this.len++] = (lo >>> 16) & 0xff
      b[this.len++] = (lo >>> 8) & 0xff
      b[this.len++] = lo & 0xff
    }
  }

  byte (v: number): void {
    this.room(1)
    this.buf[this.len++] = v
  }

  bytes (v: Uint8Array): void {
    this.room(v.length)
    this.buf.set(v, this.len)
    this.len += v.length
  }

  string (s: string): void {
    let ascii = true
    for (let i = 0; i < s.length; i++) {
      if (s.charCodeAt(i) > 0x7f) { ascii = false; break }
    }
    if (!ascii) {
      const e = utf8.encode(s)
      this.head(3, e.length)
      this.bytes(e)
      return
    }
    this.head(3, s.length)
    this.room(s.length)
    const b = this.buf
    for (let i = 0; i < s.length; i++) b[this.len++] = s.charCodeAt(i)
  }
}

function isPlain (value: object): boolean {
  const proto = Object.getPrototypeOf(value)
  return proto === Object.prototype || proto === null
}

function write (w: Writer, value: unknown, depth: number): void {
  switch (typeof value) {
    case 'string':
      w.string(value)
      return
    case 'boolean':
      w.byte(value ? 0xf5 : 0xf4)
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
        w.byte(0xf6)
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
          w.string(k)
          write(w, v, depth + 1)
        }
        return
      }
      break
  }
  // floats, bytes, CIDs, undefined in a list, anything else: the generic encoder (which also rejects what DAG-CBOR cannot hold)
  w.bytes(dagCbor.encode(value))
}

/** One writer for every record: encoding is synchronous, the bytes are copied out */
const writer = new Writer()

/** A journal record's DAG-CBOR bytes (undefined map values left out) */
export function encodeRecord (value: unknown): Uint8Array {
  writer.len = 0
  try {
    write(writer, value, 0)
    return writer.buf.slice(0, writer.len)
  } finally {
    // a record far larger than usual does not keep its buffer
    if (writer.buf.length > 65_536) writer.buf = new Uint8Array(4_096)
  }
}
