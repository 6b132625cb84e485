/**
 * Tokens checked before, so that a token that arrives again (the same
 * delegation on every request of a requester) is not encoded and hashed
 * again: for each token, by its signature, its own clean payload (a private
 * copy, never handed out), its DAG-CBOR bytes, its payload's bytes and,
 * once a chain verification computed it, its CID.
 *
 * A token is taken from the memo only when its freshly validated payload is
 * the same data as the remembered one (`sameData`); two clean payloads with
 * the same data have the same canonical encoding, so the bytes, and the CID
 * hashed from them, are those the token would be encoded to. Anything else
 * (another payload under the same signature) is encoded as if it were new.
 */
import { toString as uint8ToString } from 'uint8arrays/to-string'
import { BoundedMemo } from '../bounded-memo.js'
import type { TokenPayload } from './delegation.js'

/** What the memo knows of one token; `cid` is filled in by the first chain verification */
export interface KnownToken {
  readonly bytes: Uint8Array
  readonly body: Uint8Array
  cid?: string
}

interface Entry extends KnownToken {
  readonly payload: TokenPayload
}

/** Deepest nesting compared (a clean token payload is far shallower: constraints nest at most 8 levels) */
const MAX_DEPTH = 16

/**
 * Are `a` and `b` the same DAG-CBOR data: equal scalars (`Object.is` for
 * numbers, so `-0` is not `0`), byte strings with equal bytes, lists of
 * the same data, and plain maps with the same keys (none `undefined`) whose
 * values are the same data. Anything else, or deeper than 16 levels, is not.
 */
export function sameData (a: unknown, b: unknown, depth = 0): boolean {
  if (typeof a !== 'object' || a === null) return typeof a === 'number' ? Object.is(a, b) : a === b && a !== undefined
  if (typeof b !== 'object' || b === null || depth > MAX_DEPTH) return false
  if (a instanceof Uint8Array) {
    if (!(b instanceof Uint8Array) || a.length !== b.length) return false
    for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false
    return true
  }
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false
    for (let i = 0; i < a.length; i++) if (!sameData(a[i], b[i], depth + 1)) return false
    return true
  }
  if (!isPlain(a) || !isPlain(b)) return false
  const keys = Object.keys(a)
  if (keys.length !== Object.keys(b).length) return false
  const x = a as Record<string, unknown>
  const y = b as Record<string, unknown>
  for (const k of keys) {
    if (!Object.prototype.hasOwnProperty.call(y, k) || !sameData(x[k], y[k], depth + 1)) return false
  }
  return true
}

/** A copy of JSON-like data (the constraints of a clean token), keys in their order */
function copyData (v: unknown): unknown {
  if (typeof v !== 'object' || v === null) return v
  if (Array.isArray(v)) return v.map(copyData)
  const out: Record<string, unknown> = {}
  for (const [k, x] of Object.entries(v)) out[k] = copyData(x)
  return out
}

/** A copy of a clean token payload, with the fields in the order `parsePayload` makes them */
function copyPayload (p: TokenPayload): TokenPayload {
  const out: TokenPayload = {
    v: p.v,
    iss: p.iss,
    aud: p.aud,
    cap: p.cap.map(c => c.constraints !== undefined ? { skill: c.skill, constraints: copyData(c.constraints) as Record<string, unknown> } : { skill: c.skill }),
    exp: p.exp,
    nonce: p.nonce,
    prf: [...p.prf]
  }
  if (p.nbf !== undefined) out.nbf = p.nbf
  return out
}

function isPlain (v: object): boolean {
  if (Array.isArray(v) || v instanceof Uint8Array) return false
  const proto = Object.getPrototypeOf(v)
  return proto === Object.prototype || proto === null
}

/** @internal Checked tokens by signature, at most `max`, the oldest dropped first */
export class TokenMemo {
  private readonly entries: BoundedMemo<string, Entry>

  constructor (max: number) {
    this.entries = new BoundedMemo(max)
  }

  get size (): number {
    return this.entries.size
  }

  /** The token signed `sig` with this (clean, validated) payload, when it was checked before */
  get (sig: Uint8Array, payload: TokenPayload): KnownToken | undefined {
    const entry = this.entries.get(uint8ToString(sig, 'base64'))
    return entry != null && sameData(payload, entry.payload) ? entry : undefined
  }

  /**
   * The token signed `sig` whose payload as received (`raw`, not yet
   * validated) is the same data as a payload checked before: then it is that
   * clean, valid payload, and `payload` is a private copy of it
   */
  match (sig: Uint8Array, raw: unknown): { known: KnownToken, payload: TokenPayload } | undefined {
    const entry = this.entries.get(uint8ToString(sig, 'base64'))
    if (entry == null || !sameData(raw, entry.payload)) return undefined
    return { known: entry, payload: copyPayload(entry.payload) }
  }

  /** Remember a token just checked (its payload is copied: the caller's may change) */
  set (sig: Uint8Array, payload: TokenPayload, bytes: Uint8Array, body: Uint8Array): KnownToken {
    const entry: Entry = { payload: structuredClone(payload), bytes, body }
    this.entries.set(uint8ToString(sig, 'base64'), entry)
    return entry
  }
}
