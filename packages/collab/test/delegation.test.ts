/**
 * Delegation tokens: the test vectors of `spec/collab-delegation.md` (read at
 * run time), encoding and its bounds, attenuation rules, and every check of
 * chain verification with the error it gives.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { createIdentity, identityFromPrivateKey } from '@ioa/interconnect'
import { randomBytes } from '@libp2p/crypto'
import { MemoryDatastore } from 'datastore-core'
import { CID } from 'multiformats/cid'
import { sha256 } from 'multiformats/hashes/sha2'
import { beforeAll, describe, expect, it } from 'vitest'
import {
  DEFAULT_CLOCK_SKEW, TOKEN_LIMITS, capabilityCovers, capabilityFor, decodeToken, delegate, encodeToken, isSkillPattern,
  isTokenCid, newNonce, parseToken, skillCovers, tokenCid, tokenSigningBytes, verifyChain
} from '../src/auth/delegation.js'
import { EscalationError, InvalidTokenError, fromRemote } from '../src/errors.js'
import { RevocationStore, createRevocation, encodeRevocation, revocationCid, revocationSigningBytes } from '../src/auth/revocation.js'
import { ed25519KeyFromSeed, errorOf, fromHex, readSpecBlock, rejectionOf, toHex } from '../../../test/util.js'
import type { Capability, DelegateInit, Token, TokenPayload, VerifiedChain } from '../src/auth/delegation.js'
import type { Identity } from '@ioa/interconnect'

const T0 = 1_767_225_600_000
const MIN = 60_000
const HOUR = 3_600_000

async function codeOf (p: Promise<unknown>): Promise<string> {
  return (await rejectionOf(p)).code
}

const cidStr = async (t: Token): Promise<string> => (await tokenCid(t)).toString()

// ---------------------------------------------------------------------------
// spec vectors

interface VectorToken {
  name: string
  issuer: string
  payload: TokenPayload
  signingBytes: string
  signature: string
  token: string
  cid: string
}

interface Vectors {
  signaturePrefix: string
  verifyAt: number
  principals: Record<string, { seed: string, did: string }>
  chain: VectorToken[]
  result: { root: string, audience: string, capabilities: Capability[], expiresAt: number, cids: string[] }
  revocation: { issuer: string, payload: { v: 1, iss: string, revoke: string, at: number }, signingBytes: string, signature: string, record: string, cid: string, error: string }
  escalation: VectorToken & { pool: string[], error: string }
}

describe('spec/collab-delegation.md test vectors', () => {
  const v = readSpecBlock<Vectors>('collab-delegation.md', 'vectors')
  const ids: Record<string, Identity> = {}

  beforeAll(async () => {
    for (const [name, p] of Object.entries(v.principals)) {
      ids[name] = identityFromPrivateKey(await ed25519KeyFromSeed(p.seed))
    }
  })

  /** Re-issue a vector token with the code and the vector's own fields */
  async function reissue (t: VectorToken, proofs: Token[]): Promise<Token> {
    const init: DelegateInit = {
      audience: t.payload.aud,
      capabilities: t.payload.cap,
      expiresAt: t.payload.exp,
      nonce: t.payload.nonce,
      proofs
    }
    if (t.payload.nbf != null) init.notBefore = t.payload.nbf
    // the escalation vector is a token delegate() refuses to sign by default
    return delegate(ids[t.issuer], init, { verify: false })
  }

  it('principals: seed -> did:key', () => {
    for (const [name, p] of Object.entries(v.principals)) {
      expect(ids[name].did).toBe(p.did)
    }
    expect(toHex(new TextEncoder().encode('ioa:ucan:v1\n'))).toBe(v.signaturePrefix)
  })

  it('chain: every token re-issued from its fields has the vector bytes, signature and CID', async () => {
    const made: Token[] = []
    for (const t of v.chain) {
      const token = await reissue(t, made.slice(-1))
      expect(token.payload.iss).toBe(v.principals[t.issuer].did)
      expect(dagCbor.encode(token.payload)).toEqual(dagCbor.encode(t.payload))
      expect(toHex(tokenSigningBytes(token.payload))).toBe(t.signingBytes)
      expect(toHex(token.sig)).toBe(t.signature)
      expect(toHex(encodeToken(token))).toBe(t.token)
      expect(await cidStr(token)).toBe(t.cid)
      made.push(token)
    }
    // each token names its parent by CID
    expect(v.chain[1].payload.prf).toEqual([v.chain[0].cid])
    expect(v.chain[2].payload.prf).toEqual([v.chain[1].cid])
  })

  it('chain: decoding the vector bytes and verifying gives the vector result', async () => {
    const tokens = v.chain.map(t => decodeToken(fromHex(t.token)))
    for (const [i, t] of tokens.entries()) {
      expect(dagCbor.encode(t.payload)).toEqual(dagCbor.encode(v.chain[i].payload))
    }
    const chain = await verifyChain(tokens[2], [tokens[0], tokens[1]], { now: v.verifyAt })
    expect(chain.root).toBe(v.result.root)
    expect(chain.audience).toBe(v.result.audience)
    expect(chain.capabilities).toEqual(v.result.capabilities)
    expect(chain.expiresAt).toBe(v.result.expiresAt)
    expect(chain.cids).toEqual(v.result.cids)
    expect(chain.path.map(t => toHex(encodeToken(t)))).toEqual([v.chain[2].token, v.chain[1].token, v.chain[0].token])
    // the root is the user; the chain is accepted with the user as a trusted root
    expect(chain.root).toBe(v.principals.user.did)
    await verifyChain(tokens[2], [tokens[1], tokens[0]], { now: v.verifyAt, roots: [v.principals.user.did] })
  })

  it('revocation: the record of the user revoking car -> hotel, and the chain is then REVOKED', async () => {
    const carToHotel = decodeToken(fromHex(v.chain[1].token))
    // the record without `exp` (section 7.1: still valid, and read by peers that predate the field)
    const rev = await createRevocation(ids[v.revocation.issuer], carToHotel, { at: v.revocation.payload.at, exp: null })
    expect(rev.payload).toEqual(v.revocation.payload)
    expect(toHex(revocationSigningBytes(rev.payload))).toBe(v.revocation.signingBytes)
    expect(toHex(rev.sig)).toBe(v.revocation.signature)
    expect(toHex(encodeRevocation(rev))).toBe(v.revocation.record)
    expect((await revocationCid(rev)).toString()).toBe(v.revocation.cid)

    const store = await RevocationStore.open(new MemoryDatastore())
    await store.add(rev)
    const tokens = v.chain.map(t => decodeToken(fromHex(t.token)))
    const err = await rejectionOf(verifyChain(tokens[2], tokens.slice(0, 2), { now: v.verifyAt, isRevoked: store.isRevoked }))
    expect(err.code).toBe(v.revocation.error)
    expect(err.code).toBe('REVOKED')
  })

  it('escalation: maxAmount raised from 300 to 500 is refused with the vector error', async () => {
    const pool = v.escalation.pool.map(name => decodeToken(fromHex(v.chain.find(t => t.name === name)?.token ?? '')))
    const reissued = await reissue(v.escalation, [pool[1]])
    expect(toHex(encodeToken(reissued))).toBe(v.escalation.token)
    expect(await cidStr(reissued)).toBe(v.escalation.cid)
    const leaf = decodeToken(fromHex(v.escalation.token))
    const err = await rejectionOf(verifyChain(leaf, pool, { now: v.verifyAt }))
    expect(err.code).toBe(v.escalation.error)
    expect(err).toBeInstanceOf(EscalationError)
  })
})

// ---------------------------------------------------------------------------
// fixtures

let user: Identity
let car: Identity
let hotel: Identity
let pay: Identity
let mallory: Identity

beforeAll(async () => {
  [user, car, hotel, pay, mallory] = await Promise.all([createIdentity(), createIdentity(), createIdentity(), createIdentity(), createIdentity()])
})

const PAY: Capability = { skill: 'payment.pay', constraints: { maxAmount: 300, currency: ['EUR'] } }

/** A token as anyone could sign it (without delegate()'s issue-time check: these tests are about the verifier) */
async function grant (from: Identity, to: Identity, over: Partial<DelegateInit> = {}): Promise<Token> {
  return delegate(from, { audience: to.did, capabilities: [PAY], expiresAt: T0 + HOUR, notBefore: T0, ...over }, { verify: false })
}

/** user -> car -> hotel -> pay, each narrower */
async function standardChain (): Promise<Token[]> {
  const t1 = await grant(user, car, { capabilities: [{ skill: 'travel.*', constraints: { maxAmount: 500, currency: ['EUR', 'USD'] } }, { skill: 'payment.*', constraints: { maxAmount: 500, currency: ['EUR', 'USD'] } }], expiresAt: T0 + 24 * HOUR })
  const t2 = await grant(car, hotel, { capabilities: [{ skill: 'travel.hotel.booking', constraints: { maxAmount: 300, currency: ['EUR'] } }, PAY], expiresAt: T0 + 12 * HOUR, proofs: [t1] })
  const t3 = await grant(hotel, pay, { capabilities: [{ skill: 'payment.pay', constraints: { maxAmount: 200, currency: ['EUR'], payee: hotel.did } }], proofs: [t2] })
  return [t1, t2, t3]
}

/** A chain of `n` tokens alternating between identities */
async function longChain (n: number, principals: Identity[]): Promise<Token[]> {
  const out: Token[] = []
  for (let i = 0; i < n; i++) {
    out.push(await grant(principals[i % principals.length], principals[(i + 1) % principals.length], { proofs: out.slice(-1) }))
  }
  return out
}

/** Sign an arbitrary payload as `issuer` (to build tokens `delegate` would refuse) */
async function signRaw (issuer: Identity, payload: Record<string, unknown>): Promise<Token> {
  return { payload: payload as unknown as TokenPayload, sig: await issuer.sign(tokenSigningBytes(payload as unknown as TokenPayload)) }
}

const now = T0 + 10 * MIN

// ---------------------------------------------------------------------------

describe('tokens: issuing and encoding', () => {
  it('delegate produces a valid, canonical token that round-trips', async () => {
    const t = await grant(user, car)
    expect(t.payload).toMatchObject({ v: 1, iss: user.did, aud: car.did, exp: T0 + HOUR, nbf: T0, prf: [] })
    expect(t.payload.nonce).toMatch(/^[A-Za-z0-9_-]{22}$/)
    expect(t.sig).toHaveLength(64)
    const bytes = encodeToken(t)
    expect(bytes).toEqual(dagCbor.encode({ payload: t.payload, sig: t.sig }))
    expect(decodeToken(bytes)).toEqual(t)
    expect(encodeToken(decodeToken(bytes))).toEqual(bytes)
    const cid = await tokenCid(t)
    expect(cid.code).toBe(0x71)
    expect(cid.multihash.code).toBe(0x12)
    expect(cid.toString()).toBe(CID.createV1(0x71, await sha256.digest(bytes)).toString())
    expect(isTokenCid(cid.toString())).toBe(true)
  })

  it('nonces are random: two equal grants have different CIDs', async () => {
    const [a, b] = [await grant(user, car), await grant(user, car)]
    expect(a.payload.nonce).not.toBe(b.payload.nonce)
    expect(await cidStr(a)).not.toBe(await cidStr(b))
    expect(newNonce()).toHaveLength(22)
  })

  it('prf holds the CIDs of the proofs; nbf defaults to the latest nbf of the proofs', async () => {
    const parent = await grant(user, car, { notBefore: T0 + MIN })
    const child = await delegate(car, { audience: hotel.did, capabilities: [PAY], expiresAt: T0 + HOUR, proofs: [parent] })
    expect(child.payload.prf).toEqual([await cidStr(parent)])
    expect(child.payload.nbf).toBe(T0 + MIN)
    const root = await delegate(user, { audience: car.did, capabilities: [PAY], expiresAt: T0 + HOUR })
    expect('nbf' in root.payload).toBe(false)
  })

  it('delegate refuses bad input with INVALID_TOKEN', async () => {
    const base: DelegateInit = { audience: car.did, capabilities: [PAY], expiresAt: T0 + HOUR }
    const bad: Array<Partial<DelegateInit> | Record<string, unknown>> = [
      { audience: 'did:web:example.com' },
      { capabilities: [] },
      { capabilities: [{ skill: 'Payment' }] },
      { capabilities: Array.from({ length: 17 }, () => PAY) },
      { expiresAt: 1.5 },
      { expiresAt: -1 },
      { notBefore: T0 + 2 * HOUR },
      { nonce: 'short' },
      { nonce: 'not base64url!!!!!!!!!!' },
      { capabilities: [{ skill: 'x', constraints: { maxAmount: '300' } }] },
      { capabilities: [{ skill: 'x', constraints: { blob: new Uint8Array(2) } }] },
      { capabilities: [{ skill: 'x', extra: true }] }
    ]
    for (const over of bad) {
      const err = await rejectionOf(delegate(user, { ...base, ...over } as DelegateInit))
      expect(err, JSON.stringify(over)).toBeInstanceOf(InvalidTokenError)
    }
  })

  it('skill patterns: *, names, name.*; nothing else', () => {
    for (const ok of ['*', 'payment', 'payment.pay', 'travel.*', 'travel.hotel.*', 'a-b.c1']) expect(isSkillPattern(ok), ok).toBe(true)
    for (const bad of ['', '**', '*.pay', 'travel*', 'travel.*.booking', 'travel.', '.travel', 'Travel', 'travel.*.*', 'a'.repeat(129), 3, null]) {
      expect(isSkillPattern(bad), String(bad)).toBe(false)
    }
  })
})

describe('tokens: decoding hostile bytes', () => {
  let good: Token
  let goodBytes: Uint8Array

  beforeAll(async () => {
    good = await grant(user, car)
    goodBytes = encodeToken(good)
  })

  const reencode = (mutate: (t: any) => void): Uint8Array => {
    const t: any = dagCbor.decode(goodBytes)
    mutate(t)
    return dagCbor.encode(t)
  }

  it('garbage, empty, truncated, too large and non-bytes input are INVALID_TOKEN', () => {
    const inputs: unknown[] = [
      new Uint8Array(0),
      new Uint8Array([0xff, 0x00, 0x13]),
      randomBytes(200),
      goodBytes.subarray(0, goodBytes.length - 5),
      new Uint8Array(TOKEN_LIMITS.maxTokenBytes + 1),
      dagCbor.encode('a string'),
      dagCbor.encode([1, 2, 3]),
      dagCbor.encode(null),
      'not bytes',
      { payload: good.payload, sig: good.sig }
    ]
    for (const input of inputs) {
      expect(errorOf(() => decodeToken(input as Uint8Array)).code).toBe('INVALID_TOKEN')
    }
  })

  it('unknown fields at any level are INVALID_TOKEN', () => {
    expect(errorOf(() => decodeToken(reencode(t => { t.extra = 1 }))).code).toBe('INVALID_TOKEN')
    expect(errorOf(() => decodeToken(reencode(t => { t.payload.sub = user.did }))).code).toBe('INVALID_TOKEN')
    expect(errorOf(() => decodeToken(reencode(t => { t.payload.cap[0].caveats = {} }))).code).toBe('INVALID_TOKEN')
  })

  it('missing or mistyped fields are INVALID_TOKEN; a bad sig length is INVALID_SIGNATURE', () => {
    const cases: Array<[(t: any) => void, string]> = [
      [t => { delete t.payload.exp }, 'INVALID_TOKEN'],
      [t => { delete t.payload.prf }, 'INVALID_TOKEN'],
      [t => { delete t.payload.nonce }, 'INVALID_TOKEN'],
      [t => { t.payload.v = 2 }, 'INVALID_TOKEN'],
      [t => { t.payload.exp = 'tomorrow' }, 'INVALID_TOKEN'],
      [t => { t.payload.exp = 1.5 }, 'INVALID_TOKEN'],
      [t => { t.payload.nbf = t.payload.exp + 1 }, 'INVALID_TOKEN'],
      [t => { t.payload.iss = 'did:key:zfoo' }, 'INVALID_TOKEN'],
      [t => { t.payload.cap = {} }, 'INVALID_TOKEN'],
      [t => { t.payload.cap = [{ skill: 'x', constraints: { max: [1] } }] }, 'INVALID_TOKEN'],
      [t => { t.payload.cap = [{ skill: 'x', constraints: { deep: [[[[[[[[[1]]]]]]]]] } }] }, 'INVALID_TOKEN'],
      [t => { t.payload.cap = [{ skill: 'x', constraints: Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`k${i}`, i])) }] }, 'INVALID_TOKEN'],
      [t => { t.payload.prf = ['not a cid'] }, 'INVALID_TOKEN'],
      [t => { t.payload.prf = [CID.parse('QmdfTbBqBPQ7VNxZEYEj14VmRuZBkqFbiwReogJgS1zR1n').toString()] }, 'INVALID_TOKEN'],
      [t => { t.payload.prf = Array.from({ length: 9 }, (_, i) => `bafyrei${'a'.repeat(51)}${i}`) }, 'INVALID_TOKEN'],
      [t => { t.sig = t.sig.subarray(0, 63) }, 'INVALID_SIGNATURE'],
      [t => { t.sig = 'sig' }, 'INVALID_SIGNATURE'],
      [t => { delete t.sig }, 'INVALID_SIGNATURE']
    ]
    for (const [mutate, code] of cases) {
      expect(errorOf(() => decodeToken(reencode(mutate))).code, mutate.toString()).toBe(code)
    }
  })

  it('a proof listed twice is INVALID_TOKEN', async () => {
    const parent = await cidStr(good)
    expect(errorOf(() => decodeToken(reencode(t => { t.payload.prf = [parent, parent] }))).code).toBe('INVALID_TOKEN')
  })

  it('non-canonical encodings are INVALID_TOKEN (a float where an integer belongs, keys out of order)', () => {
    // exp encoded as a 64-bit float with an integral value
    const t: any = dagCbor.decode(goodBytes)
    const asInt = dagCbor.encode(t.payload.exp)
    const asFloat = new Uint8Array(9)
    asFloat[0] = 0xfb
    new DataView(asFloat.buffer).setFloat64(1, t.payload.exp)
    const hex = toHex(goodBytes)
    const swapped = fromHex(hex.replace(toHex(asInt), toHex(asFloat)))
    expect(swapped.length).toBe(goodBytes.length + asFloat.length - asInt.length)
    expect(errorOf(() => decodeToken(swapped)).code).toBe('INVALID_TOKEN')
    // the two top-level entries written payload first
    const sigEntry = toHex(dagCbor.encode('sig')) + toHex(dagCbor.encode(good.sig))
    const payloadEntry = toHex(dagCbor.encode('payload')) + toHex(dagCbor.encode(good.payload))
    expect(hex).toBe('a2' + sigEntry + payloadEntry)
    expect(errorOf(() => decodeToken(fromHex('a2' + payloadEntry + sigEntry))).code).toBe('INVALID_TOKEN')
  })

  it('a token larger than 16 KiB is refused when encoding and decoding', async () => {
    const big = { skill: 'x', constraints: { note: 'n'.repeat(TOKEN_LIMITS.maxTokenBytes) } }
    expect(await codeOf(delegate(user, { audience: car.did, capabilities: [big], expiresAt: T0 + HOUR }))).toBe('INVALID_TOKEN')
    const raw = await signRaw(user, { ...good.payload, cap: [big] })
    expect(errorOf(() => encodeToken(raw)).code).toBe('INVALID_TOKEN')
    expect(errorOf(() => decodeToken(dagCbor.encode(raw))).code).toBe('INVALID_TOKEN')
  })

  it('parseToken validates structures received inside other messages and returns a clean copy', () => {
    const copy = parseToken(dagCbor.decode(goodBytes))
    expect(copy).toEqual(good)
    expect(errorOf(() => parseToken({ ...good, extra: 1 })).code).toBe('INVALID_TOKEN')
    expect(errorOf(() => parseToken(null)).code).toBe('INVALID_TOKEN')
    expect(errorOf(() => parseToken([good])).code).toBe('INVALID_TOKEN')
  })
})

describe('attenuation rules', () => {
  it('skill containment', () => {
    const table: Array<[string, string, boolean]> = [
      ['*', '*', true],
      ['*', 'payment.pay', true],
      ['*', 'travel.*', true],
      ['travel.*', 'travel', true],
      ['travel.*', 'travel.hotel', true],
      ['travel.*', 'travel.hotel.booking', true],
      ['travel.*', 'travel.hotel.*', true],
      ['travel.*', 'travel.*', true],
      ['travel.*', '*', false],
      ['travel.*', 'travelling', false],
      ['travel.*', 'payment.pay', false],
      ['travel.hotel.*', 'travel.*', false],
      ['travel.hotel.*', 'travel', false],
      ['payment.pay', 'payment.pay', true],
      ['payment.pay', 'payment.pay.refund', false],
      ['payment.pay', 'payment.pay.*', false],
      ['payment.pay', 'payment', false],
      ['payment.pay', '*', false]
    ]
    for (const [parent, child, expected] of table) {
      expect(skillCovers(parent, child), `${parent} covers ${child}`).toBe(expected)
    }
  })

  it('constraint tightening: max, min, lists, equality; added keys allowed; dropped keys not', () => {
    const P = (constraints?: Record<string, unknown>): Capability => constraints == null ? { skill: 'x' } : { skill: 'x', constraints }
    const table: Array<[Record<string, unknown> | undefined, Record<string, unknown> | undefined, boolean]> = [
      [{ maxAmount: 300 }, { maxAmount: 300 }, true],
      [{ maxAmount: 300 }, { maxAmount: 299.5 }, true],
      [{ maxAmount: 300 }, { maxAmount: 500 }, false],
      [{ maxAmount: 300 }, {}, false],
      [{ maxAmount: 300 }, undefined, false],
      [{ minStars: 3 }, { minStars: 4 }, true],
      [{ minStars: 3 }, { minStars: 2 }, false],
      [{ currency: ['EUR', 'USD'] }, { currency: ['EUR'] }, true],
      [{ currency: ['EUR', 'USD'] }, { currency: [] }, true],
      [{ currency: ['EUR', 'USD'] }, { currency: ['EUR', 'GBP'] }, false],
      [{ currency: ['EUR'] }, { currency: 'EUR' }, false],
      [{ rooms: [{ beds: 2 }] }, { rooms: [{ beds: 2 }] }, true],
      [{ city: 'Lyon' }, { city: 'Lyon' }, true],
      [{ city: 'Lyon' }, { city: 'Paris' }, false],
      [{ where: { city: 'Lyon', zip: '69001' } }, { where: { zip: '69001', city: 'Lyon' } }, true],
      [{ where: { city: 'Lyon' } }, { where: { city: 'Lyon', zip: '69001' } }, false],
      [{ refundable: false }, { refundable: false }, true],
      [{ refundable: false }, { refundable: true }, false],
      [undefined, { maxAmount: 10, payee: 'x' }, true],
      [{ maxAmount: 300 }, { maxAmount: 200, payee: 'x' }, true]
    ]
    for (const [parent, child, expected] of table) {
      expect(capabilityCovers(P(parent), P(child)), `${JSON.stringify(parent)} -> ${JSON.stringify(child)}`).toBe(expected)
    }
    expect(capabilityCovers({ skill: 'travel.*', constraints: { maxAmount: 5 } }, { skill: 'payment.pay', constraints: { maxAmount: 5 } })).toBe(false)
  })

  it('capabilityFor returns the first leaf capability that covers a skill', () => {
    const chain = {
      capabilities: [
        { skill: 'travel.hotel.*', constraints: { maxAmount: 100 } },
        { skill: 'travel.*', constraints: { maxAmount: 50 } },
        { skill: 'payment.pay' }
      ]
    } as unknown as VerifiedChain
    expect(capabilityFor(chain, 'travel.hotel.booking')).toBe(chain.capabilities[0])
    expect(capabilityFor(chain, 'travel.route')).toBe(chain.capabilities[1])
    expect(capabilityFor(chain, 'payment.pay')).toBe(chain.capabilities[2])
    expect(capabilityFor(chain, 'payment.refund')).toBeUndefined()
    expect(capabilityFor(chain, 42 as unknown as string)).toBeUndefined()
  })
})

describe('verifyChain', () => {
  it('verifies user -> car -> hotel -> pay: root, audience, capabilities, path', async () => {
    const [t1, t2, t3] = await standardChain()
    const chain = await verifyChain(t3, [t1, t2], { now })
    expect(chain.root).toBe(user.did)
    expect(chain.audience).toBe(pay.did)
    expect(chain.capabilities).toEqual(t3.payload.cap)
    expect(chain.expiresAt).toBe(t3.payload.exp)
    expect(chain.cids).toEqual([await cidStr(t3), await cidStr(t2), await cidStr(t1)])
    expect(chain.path).toEqual([t3, t2, t1])
    expect(capabilityFor(chain, 'payment.pay')?.constraints).toMatchObject({ maxAmount: 200 })
    expect(capabilityFor(chain, 'travel.hotel.booking')).toBeUndefined()
    // pool order and extra tokens do not matter
    const unrelated = await grant(mallory, car)
    await verifyChain(t3, [unrelated, t2, t1, t3], { now })
  })

  it('a root token alone is a chain of one', async () => {
    const t = await grant(user, car)
    const chain = await verifyChain(t, [], { now })
    expect(chain).toMatchObject({ root: user.did, audience: car.did, path: [t], cids: [await cidStr(t)] })
    expect((await verifyChain(t, undefined, { now })).root).toBe(user.did)
  })

  it('roots: a chain must start at a trusted root', async () => {
    const [t1, t2, t3] = await standardChain()
    await verifyChain(t3, [t1, t2], { now, roots: [car.did, user.did] })
    expect(await codeOf(verifyChain(t3, [t1, t2], { now, roots: [car.did] }))).toBe('PRINCIPAL_MISMATCH')
    // an agent that roots its own chain is not the user
    const selfRooted = await grant(car, hotel)
    expect(await codeOf(verifyChain(selfRooted, [], { now, roots: [user.did] }))).toBe('PRINCIPAL_MISMATCH')
  })

  it('wrong signatures: a flipped bit, a changed payload, another key', async () => {
    const [t1, t2, t3] = await standardChain()
    const flipped = { payload: t3.payload, sig: t3.sig.slice() }
    flipped.sig[10] ^= 1
    expect(await codeOf(verifyChain(flipped, [t1, t2], { now }))).toBe('INVALID_SIGNATURE')
    const changed = { payload: { ...t3.payload, aud: mallory.did }, sig: t3.sig }
    expect(await codeOf(verifyChain(changed, [t1, t2], { now }))).toBe('INVALID_SIGNATURE')
    const otherKey = { payload: t3.payload, sig: await mallory.sign(tokenSigningBytes(t3.payload)) }
    expect(await codeOf(verifyChain(otherKey, [t1, t2], { now }))).toBe('INVALID_SIGNATURE')
    // a broken signature in the middle of the chain
    const badMiddle = { payload: t2.payload, sig: t1.sig }
    const leaf = await grant(hotel, pay, { proofs: [badMiddle] })
    expect(await codeOf(verifyChain(leaf, [t1, badMiddle], { now }))).toBe('INVALID_SIGNATURE')
  })

  it('forged proofs: a root claimed in the user\'s name, a proof addressed to someone else', async () => {
    // mallory writes a root token with the user's DID as issuer, signed by her own key
    const forgedRoot = await signRaw(mallory, { v: 1, iss: user.did, aud: mallory.did, cap: [{ skill: '*' }], exp: T0 + HOUR, nonce: newNonce(), prf: [] })
    const leaf = await grant(mallory, pay, { proofs: [forgedRoot] })
    expect(await codeOf(verifyChain(leaf, [forgedRoot], { now, roots: [user.did] }))).toBe('INVALID_SIGNATURE')

    // mallory re-delegates a genuine token that was given to the car agent
    const [t1] = await standardChain()
    const stolen = await grant(mallory, pay, { proofs: [t1] })
    expect(await codeOf(verifyChain(stolen, [t1], { now }))).toBe('PRINCIPAL_MISMATCH')
  })

  it('a missing proof is INVALID_TOKEN; malformed pool tokens and oversized pools are refused', async () => {
    const [t1, t2, t3] = await standardChain()
    expect(await codeOf(verifyChain(t3, [t1], { now }))).toBe('INVALID_TOKEN')
    expect(await codeOf(verifyChain(t3, [], { now }))).toBe('INVALID_TOKEN')
    expect(await codeOf(verifyChain(t3, [t1, t2, { payload: { ...t1.payload, extra: 1 } } as unknown as Token], { now }))).toBe('INVALID_TOKEN')
    expect(await codeOf(verifyChain(t3, Array.from({ length: TOKEN_LIMITS.maxPool + 1 }, () => t1), { now }))).toBe('INVALID_TOKEN')
    expect(await codeOf(verifyChain(t3, 'pool' as unknown as Token[], { now }))).toBe('INVALID_TOKEN')
    expect(await codeOf(verifyChain({ nonsense: true } as unknown as Token, [], { now }))).toBe('INVALID_TOKEN')
  })

  it('escalation: skill widened, bound raised, constraint dropped, list widened, longer or earlier validity', async () => {
    const parent = await grant(user, car, { capabilities: [{ skill: 'payment.pay', constraints: { maxAmount: 300, currency: ['EUR'] } }], notBefore: T0, expiresAt: T0 + HOUR })
    const children: Array<Partial<DelegateInit>> = [
      { capabilities: [{ skill: 'payment.*', constraints: { maxAmount: 300, currency: ['EUR'] } }] },
      { capabilities: [{ skill: '*', constraints: { maxAmount: 300, currency: ['EUR'] } }] },
      { capabilities: [{ skill: 'payment.refund', constraints: { maxAmount: 300, currency: ['EUR'] } }] },
      { capabilities: [{ skill: 'payment.pay', constraints: { maxAmount: 500, currency: ['EUR'] } }] },
      { capabilities: [{ skill: 'payment.pay', constraints: { currency: ['EUR'] } }] },
      { capabilities: [{ skill: 'payment.pay', constraints: { maxAmount: 300, currency: ['EUR', 'USD'] } }] },
      { capabilities: [{ skill: 'payment.pay' }] },
      // the second capability is not covered even though the first is
      { capabilities: [{ skill: 'payment.pay', constraints: { maxAmount: 300, currency: ['EUR'] } }, { skill: 'travel.hotel.booking' }] },
      { expiresAt: T0 + HOUR + 1 },
      { notBefore: T0 - 1 }
    ]
    for (const over of children) {
      const child = await grant(car, hotel, { capabilities: parent.payload.cap, notBefore: T0, expiresAt: T0 + HOUR, ...over, proofs: [parent] })
      expect(await codeOf(verifyChain(child, [parent], { now })), JSON.stringify(over)).toBe('ESCALATION')
    }
    // a child without nbf under a parent with nbf starts earlier
    const noNbf = await signRaw(car, { v: 1, iss: car.did, aud: hotel.did, cap: parent.payload.cap, exp: T0 + HOUR, nonce: newNonce(), prf: [await cidStr(parent)] })
    expect(await codeOf(verifyChain(noNbf, [parent], { now }))).toBe('ESCALATION')
    // equal and narrower children are fine, and may add constraints
    const ok = await grant(car, hotel, { capabilities: [{ skill: 'payment.pay', constraints: { maxAmount: 100, currency: ['EUR'], payee: hotel.did } }], notBefore: T0 + MIN, expiresAt: T0 + HOUR - 1, proofs: [parent] })
    await verifyChain(ok, [parent], { now })
  })

  it('escalation errors name the skill or constraint exceeded, and both values (issue 11 item 14)', async () => {
    const parent = await grant(user, car, { capabilities: [{ skill: 'payment.pay', constraints: { maxAmount: 300, currency: ['EUR'] } }] })
    const messageOf = async (cap: Capability): Promise<string> => {
      const child = await grant(car, hotel, { capabilities: [cap], proofs: [parent] })
      const err = await rejectionOf(verifyChain(child, [parent], { now }))
      expect(err.name).toBe('EscalationError')
      return err.message
    }
    expect(await messageOf({ skill: 'payment.pay', constraints: { maxAmount: 500, currency: ['EUR'] } })).toMatch(/payment\.pay .*constraint maxAmount is 500, the proof allows at most 300/)
    expect(await messageOf({ skill: 'payment.pay', constraints: { maxAmount: 100 } })).toMatch(/constraint currency \(\["EUR"\] in the proof\) is dropped/)
    expect(await messageOf({ skill: 'payment.pay', constraints: { maxAmount: 100, currency: ['EUR', 'USD'] } })).toMatch(/constraint currency is \["EUR","USD"\], not within the proof's \["EUR"\]/)
    expect(await messageOf({ skill: 'payment.*', constraints: { maxAmount: 100, currency: ['EUR'] } })).toMatch(/skill payment\.\* is not within payment\.pay/)
  })

  it('delegate() refuses to sign a token that escalates its proof, unless told not to check (issue 11 item 8)', async () => {
    const parent = await delegate(user, { audience: car.did, capabilities: [{ skill: 'shop.*', constraints: { maxAmount: 500 } }], expiresAt: T0 + HOUR })
    const wider: DelegateInit = { audience: hotel.did, capabilities: [{ skill: 'shop.order', constraints: { maxAmount: 800 } }], expiresAt: T0 + HOUR, proofs: [parent] }
    const err = await rejectionOf(delegate(car, wider))
    expect(err.name).toBe('EscalationError')
    expect(err.code).toBe('ESCALATION')
    expect(err.message).toMatch(/shop\.order .*maxAmount is 800, the proof allows at most 500/)
    expect((await rejectionOf(delegate(car, { ...wider, capabilities: [{ skill: 'shop.order', constraints: { maxAmount: 100 } }], expiresAt: T0 + HOUR + 1 }))).message).toMatch(/expires after its proof 0/)
    // a proof addressed to someone else
    expect((await rejectionOf(delegate(hotel, { ...wider, capabilities: [{ skill: 'shop.order', constraints: { maxAmount: 100 } }] }))).name).toBe('PrincipalMismatchError')
    // a narrower one is signed; verify: false signs anything well-formed (for tests of verifiers)
    const ok = await delegate(car, { ...wider, capabilities: [{ skill: 'shop.order', constraints: { maxAmount: 100 } }] })
    await verifyChain(ok, [parent], { now })
    const forged = await delegate(car, wider, { verify: false })
    expect(await codeOf(verifyChain(forged, [parent], { now }))).toBe('ESCALATION')
  })

  it('escalation deep in the chain is found from the leaf', async () => {
    const [t1] = await standardChain()
    const wide = await grant(car, hotel, { capabilities: [{ skill: 'payment.pay', constraints: { maxAmount: 5000, currency: ['EUR'] } }], proofs: [t1] })
    const leaf = await grant(hotel, pay, { capabilities: [{ skill: 'payment.pay', constraints: { maxAmount: 10, currency: ['EUR'] } }], proofs: [wide] })
    expect(await codeOf(verifyChain(leaf, [t1, wide], { now }))).toBe('ESCALATION')
  })

  it('expiry, not-before and clock skew', async () => {
    const t = await grant(user, car, { notBefore: T0, expiresAt: T0 + HOUR })
    // inside the validity period
    await verifyChain(t, [], { now: T0 })
    await verifyChain(t, [], { now: T0 + HOUR })
    // within the default skew of 30 s on either side
    await verifyChain(t, [], { now: T0 + HOUR + DEFAULT_CLOCK_SKEW })
    await verifyChain(t, [], { now: T0 - DEFAULT_CLOCK_SKEW })
    // beyond it
    expect(await codeOf(verifyChain(t, [], { now: T0 + HOUR + DEFAULT_CLOCK_SKEW + 1 }))).toBe('TOKEN_EXPIRED')
    expect(await codeOf(verifyChain(t, [], { now: T0 - DEFAULT_CLOCK_SKEW - 1 }))).toBe('TOKEN_NOT_YET_VALID')
    // a skew of its own
    expect(await codeOf(verifyChain(t, [], { now: T0 + HOUR + 1, clockSkew: 0 }))).toBe('TOKEN_EXPIRED')
    await verifyChain(t, [], { now: T0 + HOUR + 5 * MIN, clockSkew: 5 * MIN })
    expect(await codeOf(verifyChain(t, [], { now: T0 - 1, clockSkew: 0 }))).toBe('TOKEN_NOT_YET_VALID')
    // a real clock: long expired
    expect(await codeOf(verifyChain(t, []))).toBe('TOKEN_EXPIRED')
  })

  it('an expired token in the middle of a chain fails the chain', async () => {
    const t1 = await grant(user, car, { expiresAt: T0 + 10 * MIN })
    const t2 = await grant(car, hotel, { expiresAt: T0 + 5 * MIN, proofs: [t1] })
    const t3 = await grant(hotel, pay, { expiresAt: T0 + 5 * MIN, proofs: [t2] })
    await verifyChain(t3, [t1, t2], { now: T0 + 4 * MIN })
    expect(await codeOf(verifyChain(t3, [t1, t2], { now: T0 + 6 * MIN }))).toBe('TOKEN_EXPIRED')
  })

  it('depth: 8 tokens pass by default, 9 are CHAIN_TOO_DEEP; maxDepth lowers the limit', async () => {
    const eight = await longChain(8, [user, car, hotel, pay])
    const chain = await verifyChain(eight[7], eight.slice(0, 7), { now })
    expect(chain.path).toHaveLength(8)
    expect(chain.root).toBe(user.did)
    const nine = await longChain(9, [user, car, hotel, pay])
    expect(await codeOf(verifyChain(nine[8], nine.slice(0, 8), { now }))).toBe('CHAIN_TOO_DEEP')
    await verifyChain(nine[8], nine.slice(0, 8), { now, maxDepth: 9 })
    const [t1, t2, t3] = await standardChain()
    expect(await codeOf(verifyChain(t3, [t1, t2], { now, maxDepth: 2 }))).toBe('CHAIN_TOO_DEEP')
    await verifyChain(t3, [t1, t2], { now, maxDepth: 3 })
    await expect(verifyChain(t3, [t1, t2], { now, maxDepth: 0 })).rejects.toThrow(TypeError)
    await expect(verifyChain(t3, [t1, t2], { now, maxDepth: 1000 })).rejects.toThrow(TypeError)
  })

  it('cycles: principals that delegate back and forth are a plain chain, bounded by the depth', async () => {
    // A -> B -> A -> B ...: tokens are content-addressed, so the "cycle" is
    // only among principals; the tokens form a line that maxDepth bounds
    const pingPong = await longChain(10, [user, car])
    expect(await codeOf(verifyChain(pingPong[9], pingPong.slice(0, 9), { now }))).toBe('CHAIN_TOO_DEEP')
    const chain = await verifyChain(pingPong[5], pingPong.slice(0, 5), { now })
    expect(chain.root).toBe(user.did)
    expect(new Set(chain.cids).size).toBe(6)
  })

  it('cycles: a token cannot name itself or a descendant as its proof', async () => {
    // the CID covers prf, so a token naming its own (future) CID is impossible
    // to build; the nearest attempt names a CID that no pool token has
    const t1 = await grant(user, car)
    const t2 = await grant(car, user, { proofs: [t1] })
    const loop = await signRaw(user, { ...t1.payload, nonce: newNonce(), prf: [await cidStr(t2)] })
    // t2's proof is t1, not `loop`: `loop` -> t2 -> t1 is a valid line, not a cycle
    expect((await verifyChain(loop, [t1, t2], { now, roots: [user.did] })).cids).toHaveLength(3)
    // and it fails without t1, as a missing proof
    expect(await codeOf(verifyChain(loop, [t2], { now }))).toBe('INVALID_TOKEN')
  })

  it('a shared proof (diamond) is verified once', async () => {
    const root = await grant(user, car, { capabilities: [{ skill: 'travel.*' }, PAY] })
    const a = await grant(car, hotel, { capabilities: [{ skill: 'travel.hotel.*' }], proofs: [root] })
    const b = await grant(car, hotel, { capabilities: [PAY], proofs: [root] })
    const leaf = await grant(hotel, pay, { capabilities: [PAY, { skill: 'travel.hotel.booking' }], proofs: [a, b] })
    const asked: string[] = []
    const chain = await verifyChain(leaf, [root, a, b], { now, isRevoked: cid => { asked.push(cid); return false } })
    expect(asked).toHaveLength(4)
    expect(new Set(asked).size).toBe(4)
    // the path follows the proof that covers the leaf's first capability (PAY): b, not a
    expect(chain.cids).toEqual([await cidStr(leaf), await cidStr(b), await cidStr(root)])
  })

  it('several proofs: a capability may be covered by any of them; all must be valid; roots must agree', async () => {
    const travel = await grant(user, car, { capabilities: [{ skill: 'travel.*' }] })
    const money = await grant(user, car, { capabilities: [PAY] })
    const both = await grant(car, hotel, { capabilities: [{ skill: 'travel.hotel.booking' }, PAY], proofs: [travel, money] })
    const chain = await verifyChain(both, [travel, money], { now })
    expect(chain.root).toBe(user.did)
    expect(chain.cids).toEqual([await cidStr(both), await cidStr(travel)])
    // one of the proofs is broken: the token fails even though that proof covers none of its capabilities
    const forged = { payload: money.payload, sig: travel.sig }
    const withForged = await grant(car, hotel, { capabilities: [{ skill: 'travel.hotel.booking' }], proofs: [travel, forged] })
    expect(await codeOf(verifyChain(withForged, [travel, forged], { now }))).toBe('INVALID_SIGNATURE')
    const revokedMoney = await cidStr(money)
    expect(await codeOf(verifyChain(both, [travel, money], { now, isRevoked: cid => cid === revokedMoney }))).toBe('REVOKED')
    // proofs from two different roots
    const otherRoot = await grant(mallory, car, { capabilities: [PAY] })
    const mixed = await grant(car, hotel, { capabilities: [{ skill: 'travel.hotel.booking' }, PAY], proofs: [travel, otherRoot] })
    expect(await codeOf(verifyChain(mixed, [travel, otherRoot], { now }))).toBe('PRINCIPAL_MISMATCH')
  })

  it('revocation: a revoked token in the middle of the chain; the issuers who may revoke it are passed', async () => {
    const [t1, t2, t3] = await standardChain()
    const middle = await cidStr(t2)
    const seen = new Map<string, readonly string[]>()
    const err = await rejectionOf(verifyChain(t3, [t1, t2], {
      now,
      isRevoked: (cid, issuers) => { seen.set(cid, issuers); return cid === middle }
    }))
    expect(err.code).toBe('REVOKED')
    expect([...(seen.get(middle) ?? [])].sort()).toEqual([car.did, user.did].sort())
    expect(seen.get(await cidStr(t1))).toEqual([user.did])
    // the leaf is not asked: the chain failed below it
    expect(seen.has(await cidStr(t3))).toBe(false)
    // an asynchronous answer works the same; so do leaf and root
    for (const revoked of [await cidStr(t1), middle, await cidStr(t3)]) {
      expect(await codeOf(verifyChain(t3, [t1, t2], { now, isRevoked: async cid => cid === revoked }))).toBe('REVOKED')
    }
    await verifyChain(t3, [t1, t2], { now, isRevoked: async () => false })
  })

  it('abort signal', async () => {
    const [t1, t2, t3] = await standardChain()
    const controller = new AbortController()
    controller.abort(new Error('stop'))
    await expect(verifyChain(t3, [t1, t2], { now, signal: controller.signal })).rejects.toThrow('stop')
    await expect(delegate(user, { audience: car.did, capabilities: [PAY], expiresAt: T0 }, { signal: controller.signal })).rejects.toThrow('stop')
  })

  it('chain errors cross the wire as codes and come back as classes', async () => {
    const remote = Object.assign(new Error('Capability payment.pay is not covered'), { code: 'ESCALATION', remote: true })
    expect(fromRemote(remote)).toBeInstanceOf(EscalationError)
  })
})
