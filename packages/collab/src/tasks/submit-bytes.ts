/**
 * The DAG-CBOR encoding of a `submit` request `{ body, trace?, envelope }`
 * (spec/collab-tasks.md 3) put together from parts the requester encoded
 * once already: the body (encoded for its size check and hashed for the
 * envelope's body CID) and the envelope payload (signed, or vouched for by a
 * session binding). The bytes are those `dagCbor.encode` gives for the same
 * value: keys in DAG-CBOR order (shorter first, then bytewise), `body`,
 * `trace`, `envelope`; in the envelope, `sig` then `payload`.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { asciiText, concatParts } from '../cbor-parts.js'
import type { TraceContext } from './wire-v2.js'

/** The keys, as CBOR text strings */
const key = (name: string): Uint8Array => asciiText(name) as Uint8Array
const BODY = key('body')
const TRACE = key('trace')
const ENVELOPE = key('envelope')
const SIG = key('sig')
const PAYLOAD = key('payload')
/** A byte string of 64 bytes: major type 2, length in the next byte */
const SIG_HEAD = Uint8Array.of(0x58, 64)

export interface SubmitParts {
  /** DAG-CBOR of the request body */
  body: Uint8Array
  /** DAG-CBOR of the envelope payload */
  payload: Uint8Array
  /** The envelope's signature (envelope mode); none in session mode */
  sig?: Uint8Array
  /** The trace context, if the request carries one */
  trace?: TraceContext
}

/** The encoded `submit` request of `parts` */
export function submitBytes (parts: SubmitParts): Uint8Array {
  const chunks: Uint8Array[] = [Uint8Array.of(0xa0 | (parts.trace != null ? 3 : 2)), BODY, parts.body]
  if (parts.trace != null) chunks.push(TRACE, dagCbor.encode(parts.trace))
  chunks.push(ENVELOPE)
  if (parts.sig != null) {
    if (parts.sig.byteLength !== 64) throw new RangeError('An envelope signature is 64 bytes')
    chunks.push(Uint8Array.of(0xa2), SIG, SIG_HEAD, parts.sig)
  } else {
    chunks.push(Uint8Array.of(0xa1))
  }
  chunks.push(PAYLOAD, parts.payload)
  return concatParts(chunks)
}
