/**
 * One DAG-CBOR encoding of an entry serves everything a member does with it
 * (spec/teams.md 8.3): the history budget and the CID take the whole
 * encoding, the message's size check takes the slice of `msg`, and the
 * signature check takes the slice of `msg.payload` (DAG-CBOR is canonical,
 * so the encoding of a value inside a map is the same bytes as the value
 * encoded alone). A member used to encode each entry three times.
 *
 * The slicing walks only the heads of CBOR items that `dagCbor.encode`
 * itself made; it validates nothing (the value was checked before it was
 * encoded).
 */
import * as dagCbor from '@ipld/dag-cbor'
import type { Entry } from './records.js'

export interface EncodedEntry {
  /** The entry's DAG-CBOR encoding */
  bytes: Uint8Array
  /** The encoding of `entry.msg` (a view into `bytes`) */
  msg: Uint8Array
  /** The encoding of `entry.msg.payload` (a view into `bytes`) */
  payload: Uint8Array
}

/** Encode an entry once and find the message and payload inside */
export function encodeEntry (entry: Entry): EncodedEntry {
  const bytes = dagCbor.encode(entry)
  const msg = mapValue(bytes, 0, MSG)
  const payload = mapValue(msg, 0, PAYLOAD)
  return { bytes, msg, payload }
}

const MSG = new TextEncoder().encode('msg')
const PAYLOAD = new TextEncoder().encode('payload')

/** The head of the item at `pos`: its major type, its argument and where its content starts */
function head (buf: Uint8Array, pos: number): { major: number, arg: number, next: number } {
  const b = buf[pos]
  const major = b >> 5
  const info = b & 31
  if (info < 24) return { major, arg: info, next: pos + 1 }
  if (info === 24) return { major, arg: buf[pos + 1], next: pos + 2 }
  if (info === 25) return { major, arg: (buf[pos + 1] << 8) | buf[pos + 2], next: pos + 3 }
  if (info === 26) return { major, arg: ((buf[pos + 1] << 24) >>> 0) + ((buf[pos + 2] << 16) | (buf[pos + 3] << 8) | buf[pos + 4]), next: pos + 5 }
  // 27: an 8-byte argument (a 64-bit float, or an integer above 2^32)
  let arg = 0
  for (let i = 1; i <= 8; i++) arg = arg * 256 + buf[pos + i]
  return { major, arg, next: pos + 9 }
}

/** Where the item at `pos` ends */
function skip (buf: Uint8Array, pos: number): number {
  const { major, arg, next } = head(buf, pos)
  switch (major) {
    case 2: case 3: return next + arg
    case 4: { let p = next; for (let i = 0; i < arg; i++) p = skip(buf, p); return p }
    case 5: { let p = next; for (let i = 0; i < arg * 2; i++) p = skip(buf, p); return p }
    case 6: return skip(buf, next)
    // integers and simple values end with their head (a float's 8 bytes are its argument)
    default: return next
  }
}

/** The encoding of the value under the text key `key` of the map at `pos` */
function mapValue (buf: Uint8Array, pos: number, key: Uint8Array): Uint8Array {
  const { major, arg, next } = head(buf, pos)
  if (major !== 5) throw new TypeError('Not a map')
  let p = next
  for (let i = 0; i < arg; i++) {
    const k = head(buf, p)
    const keyEnd = k.next + k.arg
    const valueEnd = skip(buf, keyEnd)
    if (k.major === 3 && k.arg === key.byteLength && sameBytes(buf, k.next, key)) return buf.subarray(keyEnd, valueEnd)
    p = valueEnd
  }
  throw new TypeError('Key not in the map')
}

function sameBytes (buf: Uint8Array, at: number, key: Uint8Array): boolean {
  for (let i = 0; i < key.byteLength; i++) if (buf[at + i] !== key[i]) return false
  return true
}
