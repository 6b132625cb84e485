/**
 * Pieces of DAG-CBOR written by hand where a value's shape is fixed and its
 * parts are encoded already (a request put together from bytes encoded once,
 * `tasks/submit-bytes.ts`; an envelope payload, `auth/envelope.ts`). Each
 * gives the bytes the generic encoder gives for the same value.
 */
import { cborHead } from '@ioa/transport/internal'

export { cborHead }

/** A text string of ASCII characters only (undefined for any other string: the caller encodes it the generic way) */
export function asciiText (s: string): Uint8Array | undefined {
  const head = cborHead(3, s.length)
  const out = new Uint8Array(head.byteLength + s.length)
  out.set(head)
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i)
    if (c > 0x7f) return undefined
    out[head.byteLength + i] = c
  }
  return out
}

/** The parts one after the other, in one buffer */
export function concatParts (parts: Uint8Array[]): Uint8Array {
  let size = 0
  for (const p of parts) size += p.byteLength
  const out = new Uint8Array(size)
  let at = 0
  for (const p of parts) {
    out.set(p, at)
    at += p.byteLength
  }
  return out
}
