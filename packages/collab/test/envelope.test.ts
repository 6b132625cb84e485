/**
 * Signed request envelopes: signing, verification order, replay cache bounds
 * and typed errors for every way an envelope can be wrong.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { createIdentity } from '@ioa/interconnect'
import { beforeAll, describe, expect, it } from 'vitest'
import { delegate, tokenCid } from '../src/auth/delegation.js'
import {
  ENVELOPE_LIMITS, ENVELOPE_PREFIX, ReplayCache, bodyCid, createEnvelope, envelopeSigningBytes, parseEnvelope, verifyEnvelope
} from '../src/auth/envelope.js'
import { expectErrorCode } from '../../../test/util.js'
import type { Token } from '../src/auth/delegation.js'
import type { Envelope } from '../src/auth/envelope.js'
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

  it('concurrent copies of one envelope: exactly one is accepted, the others are REPLAY', async () => {
    const env = await envelope()
    const replayCache = new ReplayCache()
    const results = await Promise.allSettled(Array.from({ length: 6 }, async () => verifyEnvelope(wire(env), body, { self: pay.did, replayCache })))
    expect(results.filter(r => r.status === 'fulfilled')).toHaveLength(1)
    for (const r of results) if (r.status === 'rejected') expect(r.reason.code).toBe('REPLAY')
    expect(replayCache.stats.taken).toBe(1)
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
    const wide = await delegate(car, { audience: other.did, capabilities: [{ skill: 'payment.pay', constraints: { maxAmount: 1000, currency: 'EUR' } }], expiresAt: Date.now() + 60_000, proofs: [carToken] }, { verify: false })
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
  it('forgets entries once their envelopes have expired (within one second)', () => {
    const cache = new ReplayCache({ maxEntries: 10, clockSkew: 1_000 })
    expect(cache.check('did:a', 'n1', 0, 10_000, 5_000)).toBe(true)
    expect(cache.check('did:a', 'n1', 0, 10_000, 10_500)).toBe(false)
    // expired at 11_000; its one-second bucket is dropped once it lies in the past
    cache.prune(12_000)
    expect(cache.size).toBe(0)
    expect(cache.stats.expired).toBe(1)
  })

  it('expiry drops whole buckets without visiting live entries', () => {
    const cache = new ReplayCache({ maxEntries: 100_000, clockSkew: 0 })
    const now = 1_000_000
    // 20,000 live entries (expiring in 60 s) and 5,000 expiring in 5 s
    for (let i = 0; i < 20_000; i++) cache.take(`did:s${i % 500}`, `live${i}`, now, now + 60_000, now, `peer${i % 50}`)
    for (let i = 0; i < 5_000; i++) cache.take(`did:t${i}`, `short${i}`, now, now + 5_000, now, 'peer-x')
    expect(cache.size).toBe(25_000)
    const before = cache.stats.visited
    // 10 s later, the next take sweeps: it visits the 5,000 expired entries and ~10 buckets, none of the live ones
    expect(cache.take('did:legit', 'n', now + 10_000, now + 70_000, now + 10_000, 'peer-l')).toBe('taken')
    const work = cache.stats.visited - before
    expect(cache.size).toBe(20_001)
    expect(cache.stats.expired).toBe(5_000)
    expect(work).toBeGreaterThanOrEqual(5_000)
    expect(work).toBeLessThan(5_000 + 100)
    expect(cache.stats.peers).toBe(51)
    // and later takes do no sweeping work at all until the next second
    const again = cache.stats.visited
    for (let i = 0; i < 100; i++) cache.take('did:legit', `m${i}`, now + 10_000, now + 70_000, now + 10_000, 'peer-l')
    expect(cache.stats.visited - again).toBe(0)
  })

  it('stays bounded and never accepts an evicted nonce again (floor of its sender)', () => {
    const cache = new ReplayCache({ maxEntries: 3, clockSkew: 0 })
    const now = 1_000
    for (let i = 0; i < 3; i++) expect(cache.check('did:a', `n${i}`, 100 + i, 100_000, now)).toBe(true)
    expect(cache.size).toBe(3)
    // full of live entries: the oldest (iat 100) is evicted and did:a's floor rises to 100
    expect(cache.check('did:a', 'n3', 200, 100_000, now)).toBe(true)
    expect(cache.size).toBe(3)
    expect(cache.floorOf('did:a', now)).toBe(100)
    expect(cache.check('did:a', 'n0', 100, 100_000, now)).toBe(false)
    // a new nonce of did:a issued at or before its floor is refused too (fails closed)
    expect(cache.check('did:a', 'fresh', 50, 100_000, now)).toBe(false)
    // many more: still bounded
    for (let i = 0; i < 100; i++) cache.check('did:c', `m${i}`, 300 + i, 100_000, now)
    expect(cache.size).toBe(3)
    // expired entries go before anything live is evicted, and raise no floor
    const c2 = new ReplayCache({ maxEntries: 2, clockSkew: 0 })
    c2.check('did:a', 'x1', 10, 20, 15)
    c2.check('did:a', 'x2', 10, 100, 15)
    expect(c2.check('did:a', 'x3', 5, 100, 50)).toBe(true)
    expect(c2.check('did:a', 'x2', 10, 100, 50)).toBe(false)
    expect(c2.floorOf('did:a', 50)).toBe(-Infinity)
  })

  it("one sender's overflow does not raise another sender's floor", () => {
    const cache = new ReplayCache({ maxEntries: 1_000, maxEntriesPerSender: 10, clockSkew: 0 })
    const now = 1_000
    // did:b sends one envelope issued at 400 (e.g. still in flight)
    // did:a overflows its quota many times over, with envelopes issued at 500 and later
    for (let i = 0; i < 200; i++) expect(cache.check('did:a', `a${i}`, 500 + i, 100_000, now)).toBe(true)
    expect(cache.stats.senderEvictions).toBe(190)
    expect(cache.floorOf('did:a', now)).toBe(689)
    expect(cache.floorOf('did:b', now)).toBe(-Infinity)
    // did:b's envelope, issued before all of did:a's, is still accepted
    expect(cache.check('did:b', 'b0', 400, 100_000, now)).toBe(true)
    // the whole cache filling up evicts the oldest entries and raises only their senders' floors
    const full = new ReplayCache({ maxEntries: 5, clockSkew: 0 })
    full.check('did:b', 'b1', 100, 100_000, now)
    for (let i = 0; i < 20; i++) full.check(`did:x${i}`, 'n', 600 + i, 100_000, now)
    expect(full.floorOf('did:b', now)).toBe(100)
    expect(full.floorOf('did:y', now)).toBe(-Infinity)
    expect(full.check('did:y', 'n', 50, 100_000, now)).toBe(true)
    expect(full.stats.capacityEvictions).toBe(17)
    // floors expire once no envelope at or below them can be accepted
    expect(full.floorOf('did:b', now + 600_000 + 1)).toBe(-Infinity)
    full.prune(now + 600_000 + 1)
    expect(full.stats.floors).toBe(0)
  })

  it('bounds the entries one peer holds; other peers are not affected', () => {
    const cache = new ReplayCache({ maxEntries: 1_000, maxEntriesPerPeer: 50, clockSkew: 0 })
    const now = 1_000
    for (let i = 0; i < 50; i++) expect(cache.take(`did:fresh${i}`, 'nonce', now, now + 60_000, now, 'mallory')).toBe('taken')
    expect(cache.take('did:fresh50', 'nonce', now, now + 60_000, now, 'mallory')).toBe('peer-quota')
    expect(cache.stats.peerQuotaRefusals).toBe(1)
    expect(cache.take('did:legit', 'nonce', now, now + 60_000, now, 'alice')).toBe('taken')
    expect(cache.size).toBe(51)
    // mallory's entries expire and it may send again
    expect(cache.take('did:fresh51', 'nonce', now + 62_000, now + 120_000, now + 62_000, 'mallory')).toBe('taken')
  })

  it('folds the oldest floor into a node-wide one when too many senders have floors (fail closed)', () => {
    const cache = new ReplayCache({ maxEntries: 2, maxFloors: 3, clockSkew: 0 })
    const now = 1_000
    for (let i = 0; i < 8; i++) cache.check(`did:s${i}`, 'n', 100 + i, 100_000, now)
    expect(cache.stats.floors).toBe(3)
    expect(cache.stats.floorOverflows).toBe(3)
    expect(cache.stats.globalFloor).toBe(102)
    expect(cache.check('did:new', 'n', 102, 100_000, now)).toBe(false)
    expect(cache.check('did:new', 'n', 200, 100_000, now)).toBe(true)
  })

  it('validates its options', () => {
    expect(() => new ReplayCache({ maxEntries: 0 })).toThrow(RangeError)
    expect(() => new ReplayCache({ maxEntriesPerSender: 1.5 })).toThrow(RangeError)
    expect(() => new ReplayCache({ maxEntriesPerPeer: 0 })).toThrow(RangeError)
    expect(() => new ReplayCache({ maxFloors: -1 })).toThrow(RangeError)
    expect(() => new ReplayCache({ clockSkew: -1 })).toThrow(RangeError)
  })
})

describe('replay cache under a flood of envelopes from fresh keys', () => {
  /** An envelope from a fresh did:key, with no proofs, or with a token it issued itself (no roots: any root is accepted) */
  async function freshEnvelope (selfSigned: boolean): Promise<Envelope> {
    const fresh = await createIdentity()
    const proofs = selfSigned
      ? [await delegate(fresh, { audience: fresh.did, capabilities: [{ skill: 'payment.pay' }], expiresAt: Date.now() + 600_000 })]
      : []
    return createEnvelope(fresh, { to: pay.did, skill: 'payment.pay', task: 't-flood', body, proofs })
  }

  it('envelopes whose chain does not verify take no entries', async () => {
    const replayCache = new ReplayCache()
    for (let i = 0; i < 50; i++) {
      await expectErrorCode(verifyEnvelope(await freshEnvelope(false), body, { self: pay.did, replayCache, peer: 'mallory' }), 'UNAUTHORIZED')
    }
    // a chain refused for an untrusted root takes none either
    await expectErrorCode(verifyEnvelope(await freshEnvelope(true), body, { self: pay.did, replayCache, peer: 'mallory', roots: [driver.did] }), 'PRINCIPAL_MISMATCH')
    expect(replayCache.size).toBe(0)
    expect(replayCache.stats.taken).toBe(0)
    // the legitimate sender is accepted, and its replay still refused
    const env = await envelope()
    await verifyEnvelope(env, body, { self: pay.did, replayCache, peer: 'alice' })
    await expectErrorCode(verifyEnvelope(env, body, { self: pay.did, replayCache, peer: 'alice' }), 'REPLAY')
    await expectErrorCode(verifyEnvelope(env, body, { self: pay.did, replayCache, peer: 'mallory' }), 'REPLAY')
    expect(replayCache.size).toBe(1)
  })

  it('self-signed chains from one peer stop at its quota; the legitimate sender is unaffected and its work stays O(1)', async () => {
    const replayCache = new ReplayCache({ maxEntries: 100, maxEntriesPerPeer: 20 })
    const flood = await Promise.all(Array.from({ length: 30 }, async () => freshEnvelope(true)))
    const codes: string[] = []
    for (const env of flood) {
      codes.push(await verifyEnvelope(env, body, { self: pay.did, replayCache, peer: 'mallory' }).then(() => 'ok', (err: any) => err.code))
    }
    expect(codes.filter(c => c === 'ok')).toHaveLength(20)
    expect(codes.filter(c => c === 'TOO_MANY_REQUESTS')).toHaveLength(10)
    expect(replayCache.stats.entries).toBe(20)
    const visited = replayCache.stats.visited
    const started = Date.now()
    for (let i = 0; i < 20; i++) await verifyEnvelope(await envelope(), body, { self: pay.did, replayCache, peer: 'alice' })
    const seconds = Math.ceil((Date.now() - started) / 1000)
    expect(replayCache.stats.entries).toBe(40)
    expect(replayCache.floorOf(car.did)).toBe(-Infinity)
    // no entry was evicted or scanned for them: the only work is the sweep's
    // one step per elapsed one-second bucket (none when no second boundary passed)
    expect(replayCache.stats.visited - visited).toBeLessThanOrEqual(seconds + 1)
  })
})
