/**
 * The requester encodes a submit's parts once (issue 15, "encode every
 * object once"): the envelope payload's bytes are put together from its
 * checked proofs' encodings, and the request's bytes from the body's and the
 * payload's. Both must be exactly the DAG-CBOR encoding of the same value
 * (the executor checks canonical form and hashes what it decodes).
 */
import * as dagCbor from '@ipld/dag-cbor'
import { createIdentity } from '@ioa/interconnect'
import { beforeAll, describe, expect, it } from 'vitest'
import { delegate } from '../src/auth/delegation.js'
import { createEncodedEnvelope, createEncodedUnsignedEnvelope, parseEnvelope } from '../src/auth/envelope.js'
import { submitBytes } from '../src/tasks/submit-bytes.js'
import type { Token } from '../src/auth/delegation.js'
import type { EnvelopeInit } from '../src/auth/envelope.js'
import type { Identity } from '@ioa/interconnect'

let user: Identity
let requester: Identity
let executor: Identity
let grant: Token
let narrower: Token

beforeAll(async () => {
  user = await createIdentity()
  requester = await createIdentity()
  executor = await createIdentity()
  grant = await delegate(user, { audience: requester.did, capabilities: [{ skill: 'bench.*' }], expiresAt: Date.now() + 3_600_000 })
  narrower = await delegate(requester, { audience: executor.did, capabilities: [{ skill: 'bench.echo', constraints: { max: 3 } }], expiresAt: Date.now() + 3_600_000 })
})

const body = { input: { n: 1, text: 'x'.repeat(90) }, deadline: 2_000_000_000_000 }

function init (proofs: Token[], extra: Partial<EnvelopeInit> = {}): EnvelopeInit {
  return { to: executor.did, skill: 'bench.echo', task: 'task-1', body, bodyBytes: dagCbor.encode(body), proofs, ...extra }
}

describe('encoded once', () => {
  it('gives the payload bytes DAG-CBOR gives for the payload, signed and unsigned, with one or more proofs', async () => {
    for (const proofs of [[grant], [narrower, grant], []]) {
      const signed = await createEncodedEnvelope(requester, init(proofs))
      expect(signed.payloadBytes).toEqual(dagCbor.encode(signed.envelope.payload))
      const unsigned = await createEncodedUnsignedEnvelope(requester.did, init(proofs, { nonce: 'a-nonce-of-ours' }))
      expect(unsigned.payloadBytes).toEqual(dagCbor.encode(unsigned.envelope.payload))
      // a string of other than ASCII characters, and times beyond 32 bits
      const other = await createEncodedUnsignedEnvelope(requester.did, init(proofs, { nonce: 'ünïcode-nonce', issuedAt: 2 ** 40, expiresAt: 2 ** 40 + 1 }))
      expect(other.payloadBytes).toEqual(dagCbor.encode(other.envelope.payload))
    }
  })

  it('puts a submit request together as DAG-CBOR encodes it, with and without sig and trace', async () => {
    const trace = { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', tracestate: 'a=b' }
    const signed = await createEncodedEnvelope(requester, init([grant]))
    const unsigned = await createEncodedUnsignedEnvelope(requester.did, init([grant]))
    const bodyBytes = dagCbor.encode(body)
    for (const made of [signed, unsigned]) {
      for (const t of [undefined, trace, { traceparent: trace.traceparent }]) {
        const value = t != null ? { envelope: made.envelope, body, trace: t } : { envelope: made.envelope, body }
        const bytes = submitBytes({ body: bodyBytes, payload: made.payloadBytes, sig: made.envelope.sig, trace: t })
        expect(bytes).toEqual(dagCbor.encode(value))
        // and it reads back as the envelope that was made
        const decoded = dagCbor.decode(bytes) as { envelope: unknown }
        if (made.envelope.sig != null) expect(parseEnvelope(decoded.envelope)).toEqual(made.envelope)
      }
    }
  })

  it('checks a proof again when the token object was given another payload or signature', async () => {
    const token: Token = { payload: grant.payload, sig: grant.sig }
    await createEncodedEnvelope(requester, init([token]))
    ;(token as { sig: Uint8Array }).sig = new Uint8Array(63)
    await expect(createEncodedEnvelope(requester, init([token]))).rejects.toMatchObject({ name: 'InvalidSignatureError' })
    ;(token as { sig: Uint8Array }).sig = grant.sig
    ;(token as { payload: unknown }).payload = { ...grant.payload, extra: 1 }
    await expect(createEncodedEnvelope(requester, init([token]))).rejects.toMatchObject({ name: 'InvalidTokenError' })
  })
})
