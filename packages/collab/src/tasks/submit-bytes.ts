/**
 * The DAG-CBOR encoding of a `submit` request `{ body, trace?, envelope }`
 * (spec/collab-tasks.md 3) put together from parts the requester encoded
 * once already: the body (encoded for its size check and hashed for the
 * envelope's body CID) and the envelope payload (signed, or vouched for by a
 * session binding). The bytes are those `dagCbor.encode` gives for the same
 * value: keys in DAG-CBOR order (shorter first, then bytewise), `body`,
 * `trace`, `envelope`; in the envelope, `sig` then `payload`.
 */
import { encodeWith } from '../cbor-write.js'
import type { TraceContext } from './wire-v2.js'

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
  if (parts.sig != null && parts.sig.byteLength !== 64) throw new RangeError('An envelope signature is 64 bytes')
  const trace = parts.trace
  return encodeWith(w => {
    w.head(5, trace != null ? 3 : 2).text('body').raw(parts.body)
    // the trace map written in place (keys in DAG-CBOR order: `tracestate`,
    // the shorter, first): dagCbor.encode of it cost more per traced task
    // than the OpenTelemetry SDK's serialising of the span
    if (trace != null) {
      w.text('trace')
      if (trace.tracestate != null) w.head(5, 2).text('tracestate').text(trace.tracestate)
      else w.head(5, 1)
      w.text('traceparent').text(trace.traceparent)
    }
    w.text('envelope')
    if (parts.sig != null) w.head(5, 2).text('sig').head(2, 64).raw(parts.sig)
    else w.head(5, 1)
    w.text('payload').raw(parts.payload)
  })
}
