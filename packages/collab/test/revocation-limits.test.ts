/**
 * The bounds of the revocation store (issue 9, item 3b): the record's
 * optional `exp` (spec vector), expiry, quotas per issuer and in total with
 * priority for trusted issuers, and, over TCP, that a record over quota is
 * refused with a typed error and never forwarded while a revocation pushed
 * before its token is used is still honoured.
 */
import { createIdentity, identityFromPrivateKey } from '@ioa/interconnect'
import { MemoryDatastore } from 'datastore-core'
import { Key } from 'interface-datastore'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { decodeToken, delegate, tokenCid, verifyChain } from '../src/auth/delegation.js'
import { RevocationQuotaError, fromRemote } from '../src/errors.js'
import {
  ANNOUNCE_METHOD, REVOCATION_PROTOCOL, RevocationStore, createRevocation,
  decodeRevocation, encodeRevocation, revocationCid, revocationSigningBytes, verifyRevocation
} from '../src/auth/revocation.js'
import { delay, ed25519KeyFromSeed, expectErrorCode, fromHex, readSpecBlock, rejectionOf, toHex, until } from '../../../test/util.js'
import { startRevocationLine } from './revocation-line.js'
import type { RevocationLine } from './revocation-line.js'
import type { Capability, Token } from '../src/auth/delegation.js'
import type { Revocation, RevocationPayload, RevocationService } from '../src/auth/revocation.js'
import type { Identity } from '@ioa/interconnect'
import type { TransportNode } from '@ioa/transport'

const HOUR = 3_600_000
const PAY: Capability = { skill: 'payment.pay', constraints: { maxAmount: 300, currency: ['EUR'] } }
const cidStr = async (t: Token): Promise<string> => (await tokenCid(t)).toString()

/** A token issued by `issuer` to a fresh audience: something to revoke */
async function tokenOf (issuer: Identity, expiresAt = Date.now() + HOUR): Promise<Token> {
  return delegate(issuer, { audience: (await createIdentity()).did, capabilities: [PAY], expiresAt })
}

let user: Identity
let car: Identity
let hotel: Identity

beforeAll(async () => {
  [user, car, hotel] = await Promise.all([createIdentity(), createIdentity(), createIdentity()])
})

describe('the record carries the revoked token\'s exp', () => {
  interface Vector { issuer: string, payload: RevocationPayload, signingBytes: string, signature: string, record: string, cid: string, keptUntil: number }
  const v = readSpecBlock<Vector>('collab-delegation.md', 'revocation-exp')
  const main = readSpecBlock<{ principals: Record<string, { seed: string }>, chain: Array<{ token: string }> }>('collab-delegation.md', 'vectors')

  it('spec vector: record with exp, signing bytes, signature, CID; kept until exp + skew', async () => {
    const issuer = identityFromPrivateKey(await ed25519KeyFromSeed(main.principals[v.issuer].seed))
    const carToHotel = decodeToken(fromHex(main.chain[1].token))
    const rev = await createRevocation(issuer, carToHotel, { at: v.payload.at })
    expect(rev.payload).toEqual(v.payload)
    expect(rev.payload.exp).toBe(carToHotel.payload.exp)
    expect(toHex(revocationSigningBytes(rev.payload))).toBe(v.signingBytes)
    expect(toHex(rev.sig)).toBe(v.signature)
    expect(toHex(encodeRevocation(rev))).toBe(v.record)
    expect((await revocationCid(rev)).toString()).toBe(v.cid)
    // decoding the vector bytes gives the same record, which verifies
    const decoded = await verifyRevocation(decodeRevocation(fromHex(v.record)))
    expect(decoded.payload).toEqual(v.payload)

    const store = await RevocationStore.open(new MemoryDatastore())
    expect(await store.add(decoded, { now: v.payload.at })).toBe(true)
    await store.prune(v.keptUntil)
    expect(store.has(v.cid)).toBe(true)
    await store.prune(v.keptUntil + 1)
    expect(store.has(v.cid)).toBe(false)
    expect(store.isRevoked(v.payload.revoke)).toBe(false)
  })

  it('records without exp stay readable; a malformed exp is INVALID_TOKEN', async () => {
    const t = await tokenOf(car)
    const old = await createRevocation(car, t, { exp: null })
    expect(old.payload.exp).toBeUndefined()
    expect(decodeRevocation(encodeRevocation(old)).payload).toEqual(old.payload)
    await verifyRevocation(decodeRevocation(encodeRevocation(old)))
    const rev = await createRevocation(car, t)
    for (const exp of [-1, 1.5, '1', 2 ** 53]) {
      await expectErrorCode(() => decodeRevocation(encodeRevocation({ payload: { ...rev.payload, exp: exp as number }, sig: rev.sig })), 'INVALID_TOKEN')
    }
    // exp is signed: changing it breaks the signature
    await expectErrorCode(verifyRevocation({ payload: { ...rev.payload, exp: rev.payload.exp as number + 1 }, sig: rev.sig }), 'INVALID_SIGNATURE')
  })
})

describe('RevocationStore bounds', () => {
  it('forgets a record once its token has expired, in memory and in the datastore; a late one is not stored', async () => {
    const ds = new MemoryDatastore()
    const now = Date.now()
    const store = await RevocationStore.open(ds, { clockSkew: 1_000 })
    const short = await tokenOf(car, now + 10_000)
    const long = await tokenOf(car, now + HOUR)
    const noExp = await createRevocation(car, await tokenOf(car), { exp: null })
    const revShort = await createRevocation(car, short)
    expect(await store.add(revShort, { now })).toBe(true)
    expect(await store.add(await createRevocation(car, long), { now })).toBe(true)
    expect(await store.add(noExp, { now })).toBe(true)
    expect(store.limits.countOf(car.did)).toBe(3)
    expect(store.isRevoked(await cidStr(short))).toBe(true)

    expect(await store.prune(now + 10_000 + 1_000)).toBe(0)
    expect(await store.prune(now + 10_000 + 1_001)).toBe(1)
    expect(store.isRevoked(await cidStr(short))).toBe(false)
    expect(store.size).toBe(2)
    expect(store.limits.countOf(car.did)).toBe(2)
    const shortCid = (await revocationCid(revShort)).toString()
    expect(await ds.has(new Key(`/ioa/revocations/${shortCid}`))).toBe(false)
    // arriving after its token expired: not stored, not new
    expect(await store.add(await createRevocation(hotel, await tokenOf(hotel, now - 5_000)), { now })).toBe(false)
    expect(store.size).toBe(2)

    // a restart long after: the long one is deleted on load, the one without exp stays
    const later = await RevocationStore.open(ds, { clockSkew: 1_000 }, { now: now + 2 * HOUR })
    expect(later.size).toBe(1)
    expect(later.revocationsOf(noExp.payload.revoke)).toHaveLength(1)
    expect([...(await collect(ds.queryKeys({ prefix: '/ioa/revocations' })))]).toHaveLength(1)
  })

  it('refuses records over the per-issuer and total quotas with REVOCATION_QUOTA; trusted roots keep their room', async () => {
    const store = await RevocationStore.open(new MemoryDatastore(), {
      roots: [user.did], maxRecordsPerIssuer: 2, maxRecords: 4, maxRecordsPerTrustedIssuer: 3
    })
    const mallory = await createIdentity()
    expect(await store.add(await createRevocation(mallory, await tokenOf(mallory)))).toBe(true)
    expect(await store.add(await createRevocation(mallory, await tokenOf(mallory)))).toBe(true)
    const over = await rejectionOf(store.add(await createRevocation(mallory, await tokenOf(mallory))))
    expect(over).toBeInstanceOf(RevocationQuotaError)
    expect(over.name).toBe('RevocationQuotaError')
    expect(over.code).toBe('REVOCATION_QUOTA')
    expect(store.limits.countOf(mallory.did)).toBe(2)
    // fresh identities fill the room of untrusted issuers, then are refused
    for (let i = 0; i < 2; i++) {
      const fresh = await createIdentity()
      expect(await store.add(await createRevocation(fresh, await tokenOf(fresh)))).toBe(true)
    }
    const fresh = await createIdentity()
    await expectErrorCode(store.add(await createRevocation(fresh, await tokenOf(fresh))), 'REVOCATION_QUOTA')
    expect(store.size).toBe(4)
    // the trusted root is not affected by the flood, up to its own quota
    for (let i = 0; i < 3; i++) expect(await store.add(await createRevocation(user, await tokenOf(user)))).toBe(true)
    await expectErrorCode(store.add(await createRevocation(user, await tokenOf(user))), 'REVOCATION_QUOTA')
    expect(store.limits.counts).toEqual({ trusted: 3, untrusted: 4 })
    // refused records are not held; a record already held is still just "not new"
    expect(store.size).toBe(7)
    const first = await createRevocation(user, await tokenOf(user))
    await expectErrorCode(store.add(first), 'REVOCATION_QUOTA')
    expect(store.revocationsOf(first.payload.revoke)).toHaveLength(0)
  })

  it('isTrusted gives priority to principals the node trusts beyond its roots', async () => {
    const store = await RevocationStore.open(new MemoryDatastore(), { maxRecords: 1, isTrusted: iss => iss === car.did })
    const fresh = await createIdentity()
    expect(await store.add(await createRevocation(fresh, await tokenOf(fresh)))).toBe(true)
    await expectErrorCode(store.add(await createRevocation(hotel, await tokenOf(hotel))), 'REVOCATION_QUOTA')
    expect(await store.add(await createRevocation(car, await tokenOf(car)))).toBe(true)
  })

  it('validates its options', () => {
    expect(() => new RevocationStore(new MemoryDatastore(), { maxRecords: 0 })).toThrow(RangeError)
    expect(() => new RevocationStore(new MemoryDatastore(), { maxRecordsPerIssuer: 1.5 })).toThrow(RangeError)
    expect(() => new RevocationStore(new MemoryDatastore(), { clockSkew: -1 })).toThrow(RangeError)
  })
})

async function collect<T> (it: AsyncIterable<T> | Iterable<T>): Promise<T[]> {
  const out: T[] = []
  for await (const x of it) out.push(x)
  return out
}

// ---------------------------------------------------------------------------
// over TCP

describe('revocation store bounds over TCP: A - B - C', () => {
  let line: RevocationLine
  let services: RevocationService[]
  let stores: RevocationStore[]
  let B: TransportNode
  let C: TransportNode
  let chain: Token[]
  const announce = async (rev: Revocation): Promise<unknown> => C.services.messaging.request(B.peerId, REVOCATION_PROTOCOL, ANNOUNCE_METHOD, encodeRevocation(rev))

  beforeAll(async () => {
    const now = Date.now()
    const t1 = await delegate(user, { audience: car.did, capabilities: [PAY], expiresAt: now + HOUR })
    const t2 = await delegate(car, { audience: hotel.did, capabilities: [PAY], expiresAt: now + HOUR, proofs: [t1] })
    chain = [t1, t2]
    // B trusts the user as its root and keeps little room for everyone else
    line = await startRevocationLine([{}, { store: { roots: [user.did], maxRecordsPerIssuer: 2, maxRecords: 3 } }, {}])
    ;({ services, stores } = line)
    ;[, B, C] = line.nodes
  }, 60_000)

  afterAll(async () => {
    await line?.stop()
  })

  it('records over quota get REVOCATION_QUOTA and are not forwarded; a trusted root still gets through', async () => {
    const mallory = await createIdentity()
    const mine = [await createRevocation(mallory, await tokenOf(mallory)), await createRevocation(mallory, await tokenOf(mallory))]
    for (const rev of mine) expect(await announce(rev)).toEqual({ new: true })
    const overIssuer = await createRevocation(mallory, await tokenOf(mallory))
    const err = await rejectionOf(announce(overIssuer))
    expect(err.code).toBe('REVOCATION_QUOTA')
    expect(err.remote).toBe(true)
    expect(fromRemote(err)).toBeInstanceOf(RevocationQuotaError)

    // fresh identities: one more fits in B's room for untrusted issuers, the next does not
    const fresh = [await createIdentity(), await createIdentity()]
    const fits = await createRevocation(fresh[0], await tokenOf(fresh[0]))
    expect(await announce(fits)).toEqual({ new: true })
    const overTotal = await createRevocation(fresh[1], await tokenOf(fresh[1]))
    expect((await rejectionOf(announce(overTotal))).code).toBe('REVOCATION_QUOTA')
    expect(stores[1].limits.counts).toEqual({ trusted: 0, untrusted: 3 })

    // what B took reached A; what it refused did not
    const cidOf = async (r: Revocation): Promise<string> => (await revocationCid(r)).toString()
    for (const rev of [...mine, fits]) {
      const c = await cidOf(rev)
      await until(() => stores[0].has(c), { timeout: 10_000, what: 'A has an accepted record' })
    }

    // the root's revocation is accepted although the untrusted room is full, and flooded on
    const rootRev = await createRevocation(user, chain[1])
    expect(await announce(rootRev)).toEqual({ new: true })
    const revoked = await cidStr(chain[1])
    await until(() => stores[0].isRevoked(revoked, [user.did]), { timeout: 10_000, what: 'A has the root revocation' })
    await delay(300)
    expect(stores[0].has(await cidOf(overIssuer))).toBe(false)
    expect(stores[0].has(await cidOf(overTotal))).toBe(false)
    expect(stores[1].has(await cidOf(overIssuer))).toBe(false)
  })

  it('push model: a revocation that arrives before its token is used is honoured when it is', async () => {
    // the user (B's trusted root) revokes a token nobody has used yet; C learns it through B
    const t3 = await delegate(hotel, { audience: (await createIdentity()).did, capabilities: [PAY], expiresAt: chain[1].payload.exp, proofs: [chain[1]] })
    const rev = await createRevocation(user, t3)
    expect(rev.payload.exp).toBe(t3.payload.exp)
    const published = await services[0].publish(rev)
    expect(published).toEqual({ new: true, peers: 1, delivered: 1, skipped: 0 })
    const revoked = await cidStr(t3)
    await until(() => stores[2].isRevoked(revoked, [user.did]), { timeout: 10_000, what: 'C has the revocation' })
    // later, the token is used at B and at C: refused
    for (const store of [stores[1], stores[2]]) {
      const err = await rejectionOf(verifyChain(t3, chain, { isRevoked: store.isRevoked }))
      expect(err.code).toBe('REVOKED')
    }
    // the chain without the revoked link still verifies
    await verifyChain(chain[0], [], { isRevoked: stores[2].isRevoked })
  })
})
