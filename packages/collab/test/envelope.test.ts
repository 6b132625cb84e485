/**
 * Signed request envelopes: signing, verification order, replay cache bounds
 * and typed errors for every way an envelope can be wrong.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { createIdentity } from '@ioa/interconnect'
import { beforeAll, describe, expect, it } from 'vitest'
import { delegate, tokenCid } from '../src/delegation.js'
import {
  ENVELOPE_LIMITS, ENVELOPE_PREFIX, ReplayCache, bodyCid, createEnvelope, envelopeSigningBytes, parseEnvelope, verifyEnvelope
} from '../src/envelope.js'
import { expectErrorCode } from '../../../test/util.js'
import type { Token } from '../src/delegation.js'
import type { Envelope } from '../src/envelope.js'
import type { Identity } from '@ioa/interconnect'

let driver: Identity
let car: Identity
let pay: Identity
let other: Identity
let carToken: Token

beforeAll(async () => {
  driver = await createIdentity()
  car = await createIdentity()
  pay = await createIdentity()
  other = await createIdentity()
  carToken = await delegate(driver, {
    audience: car.did,
    capabilities: [{ skill: 'payment.pay', constraints: { maxAmount: 300, currency: 'EUR' } }, { skill: 'travel.*' }],
    expiresAt: Date.now() + 3_600_000
  })
})

const body = { input: { amount: 120, currency: 'EUR' } }

async function envelope (init: Partial<Parameters<typeof createEnvelope>[1]> = {}, sender = car): Promise<Envelope> {
  return createEnvelope(sender, { to: pay.did, skill: 'payment.pay', task: 't-1', body, proofs: [carToken], ...init })
}

/** what arrives over the wire */
function wire<T> (v: T): T {
  return dagCbor.decode(dagCbor.encode(v))
}

describe('envelope', () => {
  it('signs over the prefix and DAG-CBOR payload and verifies after a wire round trip', async () => {
    const env = await envelope()
    expect(env.payload.v).toBe(1)
    expect(env.payload.from).toBe(car.did)
    expect(env.payload.body).toBe(await bodyCid(body))
    expect(env.payload.exp - env.payload.iat).toBe(60_000)
    expect(env.sig).toHaveLength(64)
    const bytes = envelopeSigningBytes(env.payload)
    expect(new TextDecoder().decode(bytes.subarray(0, ENVELOPE_PREFIX.length))).toBe('ioa:envelope:v1\n')
    expect(await car.publicKey.verify(bytes, env.sig)).toBe(true)

    const replayCache = new ReplayCache()
    const out = await verifyEnvelope(wire(env), wire(body), { self: pay.did, replayCache })
    expect(out.chain.root).toBe(driver.did)
    expect(out.chain.audience).toBe(car.did)
    expect(out.capability).toEqual({ skill: 'payment.pay', constraints: { maxAmount: 300, currency: 'EUR' } })
    expect(out.bodyCid).toBe(env.payload.body)
    expect(replayCache.size).toBe(1)
  })

  it('rejects a replayed envelope with REPLAY', async () => {
    const env = await envelope()
    const replayCache = new ReplayCache()
    await verifyEnvelope(env, body, { self: pay.did, replayCache })
    await expectErrorCode(verifyEnvelope(env, body, { self: pay.did, replayCache }), 'REPLAY')
    // a freshly signed envelope that reuses the nonce is refused as well
    const env2 = await envelope({ nonce: env.payload.nonce }, car)
    await expectErrorCode(verifyEnvelope(env2, body, { self: pay.did, replayCache }), 'REPLAY')
  })

  it('rejects expired, future and over-long envelopes', async () => {
    const now = Date.now()
    const replayCache = new ReplayCache()
    const old = await envelope({ issuedAt: now - 200_000, expiresAt: now - 100_000 })
    await expectErrorCode(verifyEnvelope(old, body, { self: pay.did, replayCache }), 'ENVELOPE_EXPIRED')
    // within the clock skew it is still accepted
    const late = await envelope({ issuedAt: now - 50_000, expiresAt: now - 10_000 })
    await verifyEnvelope(late, body, { self: pay.did, replayCache })
    const future = await envelope({ issuedAt: now + 120_000, expiresAt: now + 130_000 })
    await expectErrorCode(verifyEnvelope(future, body, { self: pay.did, replayCache }), 'INVALID_ENVELOPE')
    await expectErrorCode(envelope({ issuedAt: now, expiresAt: now + ENVELOPE_LIMITS.maxTtl + 1 }), 'INVALID_ENVELOPE')
    await expectErrorCode(envelope({ issuedAt: now, expiresAt: now }), 'INVALID_ENVELOPE')
    // a receiver with a shorter replay window refuses longer-lived envelopes
    const long = await envelope({ issuedAt: now, expiresAt: now + 120_000 })
    await expectErrorCode(verifyEnvelope(long, body, { self: pay.did, replayCache, maxTtl: 60_000 }), 'INVALID_ENVELOPE')
  })

  it('rejects tampering, wrong recipient and a body that does not match', async () => {
    const replayCache = new ReplayCache()
    const env = await envelope()
    const sig = new Uint8Array(env.sig)
    sig[0] ^= 1
    await expectErrorCode(verifyEnvelope({ ...env, sig }, body, { self: pay.did, replayCache }), 'INVALID_SIGNATURE')
    await expectErrorCode(verifyEnvelope({ ...env, payload: { ...env.payload, skill: 'payment.refund' } }, body, { self: pay.did, replayCache }), 'INVALID_SIGNATURE')
    await expectErrorCode(verifyEnvelope(env, body, { self: other.did, replayCache }), 'INVALID_ENVELOPE')
    await expectErrorCode(verifyEnvelope(await envelope(), { input: { amount: 999, currency: 'EUR' } }, { self: pay.did, replayCache }), 'INVALID_ENVELOPE')
  })

  it('checks the chain: audience, capability, escalation, expiry, revocation, roots', async () => {
    const replayCache = new ReplayCache()
    const opts = { self: pay.did, replayCache }
    // no proofs at all
    await expectErrorCode(verifyEnvelope(await envelope({ proofs: [] }), body, opts), 'UNAUTHORIZED')
    // the token was granted to someone else
    await expectErrorCode(verifyEnvelope(await envelope({}, other), body, opts), 'UNAUTHORIZED')
    // no capability for the skill
    await expectErrorCode(verifyEnvelope(await envelope({ skill: 'payment.refund' }), body, opts), 'UNAUTHORIZED')
    // a prefix pattern covers the skill below it
    const ok = await verifyEnvelope(await envelope({ skill: 'travel.hotel.booking' }), body, opts)
    expect(ok.capability.skill).toBe('travel.*')
    // escalation: the second link grants more than the first
    const wide = await delegate(car, { audience: other.did, capabilities: [{ skill: 'payment.pay', constraints: { maxAmount: 1000, currency: 'EUR' } }], expiresAt: Date.now() + 60_000, proofs: [carToken] })
    await expectErrorCode(verifyEnvelope(await envelope({ proofs: [wide, carToken] }, other), body, opts), 'ESCALATION')
    // a narrower second link is fine
    const narrow = await delegate(car, { audience: other.did, capabilities: [{ skill: 'payment.pay', constraints: { maxAmount: 100, currency: 'EUR' } }], expiresAt: Date.now() + 60_000, proofs: [carToken] })
    const two = await verifyEnvelope(await envelope({ proofs: [narrow, carToken] }, other), body, opts)
    expect(two.chain.root).toBe(driver.did)
    expect(two.capability.constraints).toEqual({ maxAmount: 100, currency: 'EUR' })
    // expired token
    const expired = await delegate(driver, { audience: car.did, capabilities: [{ skill: 'payment.pay' }], expiresAt: Date.now() - 120_000 })
    await expectErrorCode(verifyEnvelope(await envelope({ proofs: [expired] }), body, opts), 'TOKEN_EXPIRED')
    // revoked token
    const revoked = (await tokenCid(carToken)).toString()
    await expectErrorCode(verifyEnvelope(await envelope(), body, { ...opts, isRevoked: (cid) => cid === revoked }), 'REVOKED')
    // untrusted root
    await expectErrorCode(verifyEnvelope(await envelope(), body, { ...opts, roots: [other.did] }), 'PRINCIPAL_MISMATCH')
  })

  it('rejects malformed envelopes with INVALID_ENVELOPE or INVALID_TOKEN', async () => {
    const env = await envelope()
    const bad: unknown[] = [
      null, 42, 'x', [], new Uint8Array(3),
      { payload: env.payload },
      { payload: env.payload, sig: new Uint8Array(10) },
      { ...env, extra: 1 },
      { ...env, payload: { ...env.payload, v: 2 } },
      { ...env, payload: { ...env.payload, from: 'did:key:nope' } },
      { ...env, payload: { ...env.payload, skill: 'Not A Skill' } },
      { ...env, payload: { ...env.payload, task: 'a/b' } },
      { ...env, payload: { ...env.payload, task: 'x'.repeat(129) } },
      { ...env, payload: { ...env.payload, nonce: 'short' } },
      { ...env, payload: { ...env.payload, iat: -1 } },
      { ...env, payload: { ...env.payload, exp: 1.5 } },
      { ...env, payload: { ...env.payload, body: 'not-a-cid' } },
      { ...env, payload: { ...env.payload, proofs: 'x' } },
      { ...env, payload: { ...env.payload, proofs: new Array(ENVELOPE_LIMITS.maxProofs + 1).fill(carToken) } },
      { ...env, payload: { ...env.payload, unknown: true } }
    ]
    for (const b of bad) {
      await expectErrorCode(() => parseEnvelope(b), 'INVALID_ENVELOPE')
      await expectErrorCode(verifyEnvelope(b, body, { self: pay.did, replayCache: new ReplayCache() }), 'INVALID_ENVELOPE')
    }
    await expectErrorCode(() => parseEnvelope({ ...env, payload: { ...env.payload, proofs: [{ payload: {}, sig: new Uint8Array(64) }] } }), 'INVALID_TOKEN')
    await expectErrorCode(() => parseEnvelope({ ...env, payload: { ...env.payload, skill: 'x'.repeat(70_000) } }), 'INVALID_ENVELOPE')
  })
})

describe('replay cache', () => {
  it('forgets entries once their envelopes have expired', () => {
    const cache = new ReplayCache({ maxEntries: 10, clockSkew: 1_000 })
    expect(cache.check('did:a', 'n1', 0, 10_000, 5_000)).toBe(true)
    expect(cache.check('did:a', 'n1', 0, 10_000, 10_500)).toBe(false)
    cache.prune(11_001)
    expect(cache.size).toBe(0)
  })

  it('stays bounded and never accepts an evicted nonce again (floor)', () => {
    const cache = new ReplayCache({ maxEntries: 3, clockSkew: 0 })
    const now = 1_000
    for (let i = 0; i < 3; i++) expect(cache.check('did:a', `n${i}`, 100 + i, 100_000, now)).toBe(true)
    expect(cache.size).toBe(3)
    // full of live entries: the oldest (iat 100) is evicted and the floor rises to 100
    expect(cache.check('did:a', 'n3', 200, 100_000, now)).toBe(true)
    expect(cache.size).toBe(3)
    expect(cache.check('did:a', 'n0', 100, 100_000, now)).toBe(false)
    // a new nonce issued at or before the floor is refused too (fails closed)
    expect(cache.check('did:b', 'fresh', 50, 100_000, now)).toBe(false)
    // many more: still bounded
    for (let i = 0; i < 100; i++) cache.check('did:c', `m${i}`, 300 + i, 100_000, now)
    expect(cache.size).toBe(3)
    // expired entries are pruned before anything live is evicted
    const c2 = new ReplayCache({ maxEntries: 2, clockSkew: 0 })
    c2.check('did:a', 'x1', 10, 20, 15)
    c2.check('did:a', 'x2', 10, 100, 15)
    expect(c2.check('did:a', 'x3', 5, 100, 50)).toBe(true)
    expect(c2.check('did:a', 'x2', 10, 100, 50)).toBe(false)
  })

  it('validates its options', () => {
    expect(() => new ReplayCache({ maxEntries: 0 })).toThrow(RangeError)
    expect(() => new ReplayCache({ clockSkew: -1 })).toThrow(RangeError)
  })
})
