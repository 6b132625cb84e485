/**
 * The receiver's check of an envelope without a second encoding pass: the
 * payload's bytes written around the tokens' own (the same bytes as the
 * generic encoder), tokens seen before taken from the verifier's memo only
 * when their data is the same, and the body compared by digest.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { createIdentity } from '@ioa/interconnect'
import { base58btc } from 'multiformats/bases/base58'
import { CID } from 'multiformats/cid'
import { beforeAll, describe, expect, it } from 'vitest'
import { delegate } from '../src/auth/delegation.js'
import { envelopePayloadBytes, envelopePayloadLength } from '../src/auth/envelope-bytes.js'
import {
  ReplayCache, bodyCid, bodyCidOfBytes, bodyDigestOfBytes, checkEnvelope, createEnvelope, verifyCheckedEnvelope, verifyEnvelope
} from '../src/auth/envelope.js'
import { sameData } from '../src/auth/token-memo.js'
import { VerificationCache } from '../src/auth/verification-cache.js'
import { expectErrorCode } from '../../../test/util.js'
import type { Token } from '../src/auth/delegation.js'
import type { EnvelopePayload } from '../src/auth/envelope.js'
import type { Identity } from '@ioa/interconnect'

let user: Identity
let caller: Identity
let agent: Identity
let grant: Token

beforeAll(async () => {
  user = await createIdentity()
  caller = await createIdentity()
  agent = await createIdentity()
  grant = await delegate(user, {
    audience: caller.did,
    capabilities: [{ skill: 'bench.echo', constraints: { maxAmount: 300, tags: ['a', 'b'], nested: { x: [1, { y: true }] } } }],
    expiresAt: Date.now() + 3_600_000
  })
})

const body = { input: { n: 1, text: 'hello' } }

/** what arrives over the wire */
function wire<T> (v: T): T {
  return dagCbor.decode(dagCbor.encode(v))
}

describe('envelope payload bytes', () => {
  it('are the generic DAG-CBOR encoding of the payload, for every size of integer and text', async () => {
    const proofs = [grant, grant]
    const tokenBytes = proofs.map(t => dagCbor.encode(t))
    const base = (await createEnvelope(caller, { to: agent.did, skill: 'bench.echo', task: 't-1', body, proofs: [grant] })).payload
    const times = [0, 1, 23, 24, 255, 256, 65_535, 65_536, 4_294_967_295, 4_294_967_296, Date.now(), Number.MAX_SAFE_INTEGER - 1]
    const texts = ['n'.repeat(8), 'x'.repeat(23), 'y'.repeat(24), 'é'.repeat(100), '😀'.repeat(64), 'z'.repeat(128)]
    for (const iat of times) {
      for (const nonce of texts) {
        const payload: EnvelopePayload = { ...base, iat, exp: iat + 1, nonce, task: nonce.length <= 128 ? 'task:' + String(iat) : base.task, proofs }
        expect(envelopePayloadBytes(payload, tokenBytes)).toEqual(dagCbor.encode(payload))
        expect(envelopePayloadLength(payload, tokenBytes)).toBe(dagCbor.encode(payload).length)
      }
    }
    const none: EnvelopePayload = { ...base, proofs: [] }
    expect(envelopePayloadBytes(none, [])).toEqual(dagCbor.encode(none))
  })

  it('checkEnvelope keeps the bytes the signature covers: a received envelope verifies', async () => {
    const env = await createEnvelope(caller, { to: agent.did, skill: 'bench.echo', task: 't-2', body, proofs: [grant], nonce: 'ü'.repeat(20) })
    const checked = checkEnvelope(wire(env))
    expect(checked.payloadBytes).toEqual(dagCbor.encode(env.payload))
    const out = await verifyEnvelope(wire(env), wire(body), { self: agent.did, replayCache: new ReplayCache() })
    expect(out.bodyCid).toBe(env.payload.body)
  })
})

describe('token memo', () => {
  it('a token seen before is not encoded again, and its CID is hashed once', async () => {
    const cache = new VerificationCache()
    const first = checkEnvelope(wire(await createEnvelope(caller, { to: agent.did, skill: 'bench.echo', task: 't-3', body, proofs: [grant] })), { verificationCache: cache })
    expect(cache.stats().tokens).toBe(1)
    await verifyCheckedEnvelope(first, async () => await bodyCid(body), { self: agent.did, replayCache: new ReplayCache(), verificationCache: cache })
    const cid = first.proofs[0].known?.cid
    expect(cid).toMatch(/^b/)
    const second = checkEnvelope(wire(await createEnvelope(caller, { to: agent.did, skill: 'bench.echo', task: 't-4', body, proofs: [grant] })), { verificationCache: cache })
    expect(second.proofs[0].known).toBe(first.proofs[0].known)
    expect(second.proofs[0].bytes).toEqual(dagCbor.encode(grant))
    // the token handed out is the request's own copy, not the memo's
    expect(second.proofs[0].token).not.toBe(first.proofs[0].token)
    expect(second.proofs[0].token).toEqual(grant)
    second.proofs[0].token.payload.cap[0].skill = 'changed'
    ;(second.proofs[0].token.payload.cap[0].constraints as Record<string, unknown[]>).tags.push('c')
    const third = checkEnvelope(wire(await createEnvelope(caller, { to: agent.did, skill: 'bench.echo', task: 't-4b', body, proofs: [grant] })), { verificationCache: cache })
    expect(third.proofs[0].known).toBe(first.proofs[0].known)
    expect(third.proofs[0].token).toEqual(grant)
    expect(cache.stats().tokens).toBe(1)
  })

  it('another payload under a remembered signature is encoded as new and its signature fails', async () => {
    const cache = new VerificationCache()
    const replayCache = new ReplayCache()
    const ok = await createEnvelope(caller, { to: agent.did, skill: 'bench.echo', task: 't-5', body, proofs: [grant] })
    await verifyEnvelope(wire(ok), wire(body), { self: agent.did, replayCache, verificationCache: cache })
    // the same signature over a wider grant: the caller signs the envelope itself
    const forged: Token = { payload: { ...grant.payload, cap: [{ skill: 'bench.echo' }] }, sig: grant.sig }
    const env = await createEnvelope(caller, { to: agent.did, skill: 'bench.echo', task: 't-6', body, proofs: [forged] })
    const checked = checkEnvelope(wire(env), { verificationCache: cache })
    expect(checked.proofs[0].known).not.toBe(undefined)
    expect(checked.proofs[0].bytes).toEqual(dagCbor.encode(forged))
    expect(cache.stats().tokens).toBe(1)
    await expectErrorCode(verifyEnvelope(wire(env), wire(body), { self: agent.did, replayCache, verificationCache: cache }), 'INVALID_SIGNATURE')
  })

  it('sameData tells DAG-CBOR data apart', () => {
    expect(sameData({ a: [1, 'x', new Uint8Array([1, 2])], b: null }, { b: null, a: [1, 'x', new Uint8Array([1, 2])] })).toBe(true)
    expect(sameData(0, -0)).toBe(false)
    expect(sameData({ a: 1 }, { a: 1, b: undefined })).toBe(false)
    expect(sameData({ a: undefined }, { a: undefined })).toBe(false)
    expect(sameData([1, 2], { 0: 1, 1: 2 })).toBe(false)
    expect(sameData(new Uint8Array([1]), [1])).toBe(false)
    expect(sameData(new Uint8Array([1, 2]), new Uint8Array([1, 3]))).toBe(false)
    class Box { a = 1 }
    expect(sameData(new Box(), { a: 1 })).toBe(false)
    let deep: unknown = 1
    for (let i = 0; i < 40; i++) deep = [deep]
    expect(sameData(deep, structuredClone(deep))).toBe(false)
  })
})

describe('body by digest', () => {
  it('a body named by the digest of its bytes is accepted; its CID in another base is not', async () => {
    const replayCache = new ReplayCache()
    const bytes = dagCbor.encode(body)
    const env = await createEnvelope(caller, { to: agent.did, skill: 'bench.echo', task: 't-7', body, proofs: [grant] })
    const out = await verifyCheckedEnvelope(checkEnvelope(wire(env)), async () => await bodyDigestOfBytes(bytes), { self: agent.did, replayCache })
    expect(out.bodyCid).toBe(env.payload.body)

    const other = dagCbor.encode({ input: 'other' })
    const env2 = await createEnvelope(caller, { to: agent.did, skill: 'bench.echo', task: 't-8', body, proofs: [grant] })
    await expectErrorCode(verifyCheckedEnvelope(checkEnvelope(wire(env2)), async () => await bodyDigestOfBytes(other), { self: agent.did, replayCache }), 'INVALID_ENVELOPE')

    // the same CID written in base58btc: not the form a receiver computes, refused as before
    const z = CID.parse(env.payload.body).toString(base58btc)
    const env3 = await createEnvelope(caller, { to: agent.did, skill: 'bench.echo', task: 't-9', body, proofs: [grant] })
    const raw = wire({ ...env3, payload: { ...env3.payload, body: z } })
    await expectErrorCode(verifyCheckedEnvelope(checkEnvelope(raw), async () => await bodyDigestOfBytes(bytes), { self: agent.did, replayCache }), 'INVALID_SIGNATURE')
    const unsigned = wire({ payload: { ...env3.payload, body: z, nonce: 'n-base58-body' } })
    await expectErrorCode(verifyCheckedEnvelope(checkEnvelope(unsigned, { unsigned: true }), async () => await bodyDigestOfBytes(bytes), {
      self: agent.did, replayCache, session: () => {}
    }), 'INVALID_ENVELOPE')
  })

  it('a body CID made by hand is the CID that multiformats makes, for bodies of every size', async () => {
    const { sha256 } = await import('multiformats/hashes/sha2')
    for (const b of [null, 'x', { input: 'ü'.repeat(300) }, new Uint8Array(70_000).fill(3)]) {
      const bytes = dagCbor.encode(b)
      const cid = await bodyCidOfBytes(bytes)
      expect(cid).toBe(CID.create(1, dagCbor.code, await sha256.digest(bytes)).toString())
      expect(await bodyCid(b)).toBe(cid)
    }
  })
})
