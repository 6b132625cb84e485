/**
 * The DAG-CBOR encoding of a checked envelope payload (spec/collab-tasks.md
 * 2.2), written field by field around the tokens' own encodings: a
 * receiver has the bytes of each token in `proofs` already (it checked
 * them, or found them in its token memo), so the payload's bytes for the
 * signature and the size limit are a concatenation, not a second pass of
 * the generic encoder over the whole chain.
 *
 * Only for payloads whose fields `checkPayloadFields` accepted: `v` is 1,
 * `iat` and `exp` are non-negative safe integers, the other fields are
 * text; the result is then exactly `dagCbor.encode(payload)` (a test
 * compares the two).
 */
import { headLength, textLength, textOf, writeHead, writeText } from '../cbor-write.js'
import type { Text } from '../cbor-write.js'
import type { EnvelopePayload } from './envelope.js'

/** The payload's text fields in DAG-CBOR key order (length first, then bytewise), between `iat` and `proofs` */
const TEXT_FIELDS = ['body', 'from', 'task', 'nonce', 'skill'] as const

/** The payload's text fields made ready, and the length of its encoding */
function layout (payload: EnvelopePayload, tokens: readonly Uint8Array[]): { to: Text, texts: Text[], length: number } {
  const to = textOf(payload.to)
  const texts = TEXT_FIELDS.map(k => textOf(payload[k]))
  // map head; keys: v (2), to (3), exp and iat (4 each), the texts (5 or 6), proofs (7)
  let length = 1 + 2 + headLength(payload.v) + 3 + textLength(to) + 4 + headLength(payload.exp) + 4 + headLength(payload.iat) + 7 + headLength(tokens.length)
  for (let i = 0; i < texts.length; i++) length += 1 + TEXT_FIELDS[i].length + textLength(texts[i])
  for (const t of tokens) length += t.length
  return { to, texts, length }
}

/** The length of `envelopePayloadBytes(payload, tokens)`, without writing them */
export function envelopePayloadLength (payload: EnvelopePayload, tokens: readonly Uint8Array[]): number {
  return layout(payload, tokens).length
}

/** The DAG-CBOR bytes of `payload`, whose `proofs` encode to `tokens` (same order) */
export function envelopePayloadBytes (payload: EnvelopePayload, tokens: readonly Uint8Array[]): Uint8Array {
  const { to, texts, length } = layout(payload, tokens)
  const out = new Uint8Array(length)
  out[0] = 0xaa
  let at = writeText(out, 1, 'v')
  at = writeHead(out, at, 0, payload.v)
  at = writeText(out, at, 'to')
  at = writeText(out, at, to)
  at = writeText(out, at, 'exp')
  at = writeHead(out, at, 0, payload.exp)
  at = writeText(out, at, 'iat')
  at = writeHead(out, at, 0, payload.iat)
  for (let i = 0; i < texts.length; i++) {
    at = writeText(out, at, TEXT_FIELDS[i])
    at = writeText(out, at, texts[i])
  }
  at = writeText(out, at, 'proofs')
  at = writeHead(out, at, 4, tokens.length)
  for (const t of tokens) {
    out.set(t, at)
    at += t.length
  }
  return out
}
