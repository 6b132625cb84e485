/**
 * Revocation: records and their checks, the datastore-backed store, its use
 * in chain verification, and flooding over TCP between separate nodes.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { createIdentity } from '@ioa/interconnect'
import { MemoryDatastore } from 'datastore-core'
import { Key } from 'interface-datastore'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { delegate, tokenCid, verifyChain } from '../src/auth/delegation.js'
import { InvalidSignatureError, InvalidTokenError, fromRemote } from '../src/errors.js'
import {
  ANNOUNCE_METHOD, REVOCATION_LIMITS, REVOCATION_PROTOCOL, RevocationStore, createRevocation,
  decodeRevocation, encodeRevocation, parseRevocation, revocationAuthorities, revocationCid, revocationSigningBytes, verifyRevocation
} from '../src/auth/revocation.js'
import { delay, errorOf, rejectionOf, until } from '../../../test/util.js'
import { startRevocationLine } from './revocation-line.js'
import type { RevocationLine } from './revocation-line.js'
import type { Capability, Token } from '../src/auth/delegation.js'
import type { Revocation, RevocationService } from '../src/auth/revocation.js'
import type { Identity } from '@ioa/interconnect'
import type { TransportNode } from '@ioa/transport'

// tokens valid around the real clock: a store forgets the records of expired tokens (their `exp`)
const T0 = Math.floor(Date.now() / 1000) * 1000 - 600_000
const HOUR = 3_600_000
const now = T0 + 600_000

const cidStr = async (t: Token): Promise<string> => (await tokenCid(t)).toString()

const PAY: Capability = { skill: 'payment.pay', constraints: { maxAmount: 300, currency: ['EUR'] } }

let user: Identity
let car: Identity
let hotel: Identity
let pay: Identity
let mallory: Identity
let chain: Token[]

beforeAll(async () => {
  [user, car, hotel, pay, mallory] = await Promise.all([createIdentity(), createIdentity(), createIdentity(), createIdentity(), createIdentity()])
  const t1 = await delegate(user, { audience: car.did, capabilities: [PAY], expiresAt: T0 + HOUR, notBefore: T0 })
  const t2 = await delegate(car, { audience: hotel.did, capabilities: [PAY], expiresAt: T0 + HOUR, proofs: [t1] })
  const t3 = await delegate(hotel, { audience: pay.did, capabilities: [PAY], expiresAt: T0 + HOUR, proofs: [t2] })
  chain = [t1, t2, t3]
})

describe('revocation records', () => {
  it('create, encode, decode, verify', async () => {
    const rev = await createRevocation(car, chain[1], { at: T0 })
    expect(rev.payload).toEqual({ v: 1, iss: car.did, revoke: await cidStr(chain[1]), at: T0, exp: T0 + HOUR })
    expect(rev.sig).toHaveLength(64)
    const bytes = encodeRevocation(rev)
    expect(bytes.byteLength).toBeLessThan(REVOCATION_LIMITS.maxRevocationBytes)
    expect(decodeRevocation(bytes)).toEqual(rev)
    expect(await verifyRevocation(rev)).toEqual(rev)
    expect(new TextDecoder().decode(revocationSigningBytes(rev.payload).subarray(0, 14))).toBe('ioa:revoke:v1\n')
    // its CID is its identity: two revocations of one token at different times differ
    const again = await createRevocation(car, chain[1], { at: T0 + 1 })
    expect((await revocationCid(again)).toString()).not.toBe((await revocationCid(rev)).toString())
  })

  it('bad signatures are INVALID_SIGNATURE', async () => {
    const rev = await createRevocation(car, chain[1], { at: T0 })
    const flipped = { payload: rev.payload, sig: rev.sig.slice() }
    flipped.sig[0] ^= 0x80
    expect((await rejectionOf(verifyRevocation(flipped))).code).toBe('INVALID_SIGNATURE')
    // signed by mallory in the car agent's name
    const forged = { payload: rev.payload, sig: await mallory.sign(revocationSigningBytes(rev.payload)) }
    expect(await rejectionOf(verifyRevocation(forged))).toBeInstanceOf(InvalidSignatureError)
    // a changed payload under the old signature
    const changed = { payload: { ...rev.payload, at: T0 + 5 }, sig: rev.sig }
    expect((await rejectionOf(verifyRevocation(changed))).code).toBe('INVALID_SIGNATURE')
    expect(errorOf(() => parseRevocation({ payload: rev.payload, sig: new Uint8Array(10) })).code).toBe('INVALID_SIGNATURE')
  })

  it('malformed records are INVALID_TOKEN', async () => {
    const rev = await createRevocation(car, chain[1], { at: T0 })
    const bad: unknown[] = [
      null, [], 'x',
      { payload: rev.payload, sig: rev.sig, extra: 1 },
      { payload: { ...rev.payload, why: 'lost phone' }, sig: rev.sig },
      { payload: { ...rev.payload, v: 2 }, sig: rev.sig },
      { payload: { ...rev.payload, revoke: 'bafy-not-a-cid' }, sig: rev.sig },
      { payload: { ...rev.payload, iss: 'did:web:x' }, sig: rev.sig },
      { payload: { ...rev.payload, at: -1 }, sig: rev.sig }
    ]
    for (const b of bad) {
      expect(errorOf(() => parseRevocation(b)).code, JSON.stringify(b)).toBe('INVALID_TOKEN')
    }
    for (const bytes of [new Uint8Array([0xff]), new Uint8Array(REVOCATION_LIMITS.maxRevocationBytes + 1), dagCbor.encode({ payload: rev.payload, sig: rev.sig, x: 1 })]) {
      expect(errorOf(() => decodeRevocation(bytes)).code).toBe('INVALID_TOKEN')
    }
  })

  it('authority: the issuer of the token or of a token it is proven by; nobody else', async () => {
    const middle = chain[1]
    expect([...(await revocationAuthorities(await cidStr(middle), chain) ?? [])].sort()).toEqual([user.did, car.did].sort())
    // the user (root) and the car agent (issuer) may revoke car -> hotel
    for (const who of [user, car]) {
      await verifyRevocation(await createRevocation(who, middle), chain)
    }
    // the hotel agent (its audience), the payment agent below and a stranger may not
    for (const who of [hotel, pay, mallory]) {
      const err = await rejectionOf(verifyRevocation(await createRevocation(who, middle), chain))
      expect(err.code).toBe('PRINCIPAL_MISMATCH')
    }
    // the path must hold the revoked token
    const err = await rejectionOf(verifyRevocation(await createRevocation(car, middle), [chain[0]]))
    expect(err).toBeInstanceOf(InvalidTokenError)
  })
})

describe('RevocationStore', () => {
  it('persists in the datastore and is loaded by a new store', async () => {
    const datastore = new MemoryDatastore()
    const store = await RevocationStore.open(datastore)
    const rev = await createRevocation(car, chain[1], { at: T0 })
    const cid = await cidStr(chain[1])
    expect(store.isRevoked(cid)).toBe(false)
    expect(await store.add(rev)).toBe(true)
    expect(await store.add(rev)).toBe(false)
    expect(store.isRevoked(cid)).toBe(true)
    expect(store.size).toBe(1)
    const revCid = (await revocationCid(rev)).toString()
    expect(store.has(revCid)).toBe(true)
    expect(await datastore.get(new Key(`/ioa/revocations/${revCid}`))).toEqual(encodeRevocation(rev))

    const reopened = await RevocationStore.open(datastore)
    expect(reopened.isRevoked(cid)).toBe(true)
    expect(reopened.isRevoked(await cidStr(chain[0]))).toBe(false)
    expect(reopened.revocationsOf(cid)).toEqual([rev])
    expect(await reopened.add(rev)).toBe(false)
  })

  it('skips damaged records when loading', async () => {
    const datastore = new MemoryDatastore()
    const rev = await createRevocation(car, chain[1], { at: T0 })
    const good = encodeRevocation(rev)
    const revCid = (await revocationCid(rev)).toString()
    await datastore.put(new Key(`/ioa/revocations/${revCid}`), good)
    await datastore.put(new Key('/ioa/revocations/garbage'), new Uint8Array([1, 2, 3]))
    // a valid record under another record's key
    const other = await createRevocation(user, chain[0], { at: T0 })
    // a key next to the real one (never equal to it, whatever its last character)
    await datastore.put(new Key(`/ioa/revocations/${revCid.slice(0, -1)}${revCid.endsWith("a") ? "b" : "a"}`), encodeRevocation(other))
    const bad = { payload: other.payload, sig: rev.sig }
    await datastore.put(new Key('/ioa/revocations/badsig'), dagCbor.encode(bad))
    const store = await RevocationStore.open(datastore)
    expect(store.size).toBe(1)
    expect(store.isRevoked(await cidStr(chain[1]))).toBe(true)
    expect(store.isRevoked(await cidStr(chain[0]))).toBe(false)
  })

  it('add verifies: bad signatures and (with a path) revokers without authority are rejected and not stored', async () => {
    const datastore = new MemoryDatastore()
    const store = await RevocationStore.open(datastore)
    const rev = await createRevocation(car, chain[1])
    const forged = { payload: rev.payload, sig: await mallory.sign(revocationSigningBytes(rev.payload)) }
    expect((await rejectionOf(store.add(forged))).code).toBe('INVALID_SIGNATURE')
    expect((await rejectionOf(store.add({ payload: rev.payload } as unknown as Revocation))).code).toBe('INVALID_SIGNATURE')
    const byHotel = await createRevocation(hotel, chain[1])
    expect((await rejectionOf(store.add(byHotel, { path: chain }))).code).toBe('PRINCIPAL_MISMATCH')
    expect(store.size).toBe(0)
    expect(store.isRevoked(await cidStr(chain[1]))).toBe(false)
    let n = 0
    for await (const _ of datastore.queryKeys({})) n++
    expect(n).toBe(0)
    expect(await store.add(rev, { path: chain })).toBe(true)
  })

  it('isRevoked answers only after loading', async () => {
    const store = new RevocationStore(new MemoryDatastore())
    expect(errorOf(() => store.isRevoked('x')).code).toBe('NOT_LOADED')
    await store.load()
    expect(store.isRevoked('x')).toBe(false)
  })

  it('in verifyChain: a revocation counts only when its issuer has authority over the token', async () => {
    const store = await RevocationStore.open(new MemoryDatastore())
    const [t1, t2, t3] = chain
    // a stranger "revokes" the middle token: signature valid, authority none
    await store.add(await createRevocation(mallory, t2))
    expect(store.isRevoked(await cidStr(t2))).toBe(true) // without issuers: fail-closed
    await verifyChain(t3, [t1, t2], { now, isRevoked: store.isRevoked })
    // the hotel agent, audience of t2, cannot revoke it either
    await store.add(await createRevocation(hotel, t2))
    await verifyChain(t3, [t1, t2], { now, isRevoked: store.isRevoked })
    // the user at the root can
    await store.add(await createRevocation(user, t2))
    const err = await rejectionOf(verifyChain(t3, [t1, t2], { now, isRevoked: store.isRevoked }))
    expect(err.code).toBe('REVOKED')
    // the revoked token itself fails; the token above it is still good
    expect((await rejectionOf(verifyChain(t2, [t1], { now, isRevoked: store.isRevoked }))).code).toBe('REVOKED')
    await verifyChain(t1, [], { now, isRevoked: store.isRevoked })
  })
})

// ---------------------------------------------------------------------------
// flooding over TCP

describe('revocation flooding over TCP: A - B - C', () => {
  let line: RevocationLine
  let nodes: TransportNode[]
  let services: RevocationService[]
  let stores: RevocationStore[]
  let A: TransportNode
  let B: TransportNode
  let C: TransportNode

  beforeAll(async () => {
    // B allows a few announces per peer per minute, to test the limit
    line = await startRevocationLine([{}, { service: { rateLimit: { requests: 6, per: 600_000 } } }, {}])
    ;({ nodes, services, stores } = line)
    ;[A, B, C] = nodes
  })

  afterAll(async () => {
    await line?.stop()
  })

  it('a revocation published at A reaches C through B, once', async () => {
    expect(A.getConnections(C.peerId)).toHaveLength(0)
    const rev = await createRevocation(user, chain[1])
    const revoked = await cidStr(chain[1])
    const result = await services[0].publish(rev)
    expect(result).toEqual({ new: true, peers: 1, delivered: 1, skipped: 0 })
    expect(stores[1].isRevoked(revoked)).toBe(true)
    await until(() => stores[2].isRevoked(revoked), { timeout: 10_000, what: 'C has the revocation' })
    expect(A.getConnections(C.peerId)).toHaveLength(0)
    // C now rejects the chain
    const err = await rejectionOf(verifyChain(chain[2], chain.slice(0, 2), { now, isRevoked: stores[2].isRevoked }))
    expect(err.code).toBe('REVOKED')

    // publishing it again: nobody takes it as new, nothing is re-flooded
    const again = await services[0].publish(rev)
    expect(again).toEqual({ new: false, peers: 1, delivered: 1, skipped: 0 })
    expect(stores.map(s => s.size)).toEqual([1, 1, 1])
  })

  it('C announcing directly to B answers { new }', async () => {
    const rev = await createRevocation(car, chain[1])
    const bytes = encodeRevocation(rev)
    expect(await C.services.messaging.request(B.peerId, REVOCATION_PROTOCOL, ANNOUNCE_METHOD, bytes)).toEqual({ new: true })
    // the record form (a map) is accepted as well
    expect(await C.services.messaging.request(B.peerId, REVOCATION_PROTOCOL, ANNOUNCE_METHOD, rev)).toEqual({ new: false })
    // B passed it on to A, but not back to C, the peer it came from (C never
    // stored it itself, so it would have taken it as new)
    const revCid = (await revocationCid(rev)).toString()
    await until(() => stores[0].has(revCid), { timeout: 10_000, what: 'A has the second revocation' })
    await delay(300)
    expect(stores[2].has(revCid)).toBe(false)
  })

  it('malformed announces get a typed error and B keeps serving', async () => {
    const messaging = C.services.messaging
    const send = async (payload: unknown): Promise<any> => rejectionOf(messaging.request(B.peerId, REVOCATION_PROTOCOL, ANNOUNCE_METHOD, payload))

    const garbage = await send(new Uint8Array([0xde, 0xad, 0xbe, 0xef]))
    expect(garbage.code).toBe('INVALID_TOKEN')
    expect(garbage.remote).toBe(true)
    expect(fromRemote(garbage)).toBeInstanceOf(InvalidTokenError)

    expect((await send({ hello: 'world' })).code).toBe('INVALID_TOKEN')

    const rev = await createRevocation(hotel, chain[2])
    const forged = { payload: rev.payload, sig: await mallory.sign(revocationSigningBytes(rev.payload)) }
    const badSig = await send(encodeRevocation(forged))
    expect(badSig.code).toBe('INVALID_SIGNATURE')
    expect(fromRemote(badSig)).toBeInstanceOf(InvalidSignatureError)

    // still serving, and nothing bad was stored or passed on
    expect(await messaging.request(B.peerId, REVOCATION_PROTOCOL, ANNOUNCE_METHOD, encodeRevocation(rev))).toEqual({ new: true })
    expect(stores[1].isRevoked(await cidStr(chain[2]))).toBe(true)
    const revoked = await cidStr(chain[2])
    await until(() => stores[0].isRevoked(revoked), { timeout: 10_000, what: 'A has the hotel revocation' })
  })

  it('a peer that sends too many announces is RATE_LIMITED', async () => {
    // C has used its 6 announces to B in the tests above
    const rev = await createRevocation(car, chain[2])
    const err = await rejectionOf(C.services.messaging.request(B.peerId, REVOCATION_PROTOCOL, ANNOUNCE_METHOD, encodeRevocation(rev)))
    expect(err.code).toBe('RATE_LIMITED')
    expect(stores[1].revocationsOf(await cidStr(chain[2])).map(r => r.payload.iss)).not.toContain(car.did)
    // other peers are not affected
    expect(await A.services.messaging.request(B.peerId, REVOCATION_PROTOCOL, ANNOUNCE_METHOD, encodeRevocation(rev))).toEqual({ new: true })
  })

  it('stop() unregisters the protocol', async () => {
    await services[1].stop()
    const err = await rejectionOf(C.services.messaging.request(B.peerId, REVOCATION_PROTOCOL, ANNOUNCE_METHOD, new Uint8Array(1)))
    expect(['UNKNOWN_METHOD', 'PROTOCOL_NOT_SUPPORTED']).toContain(err.code)
    await expect(services[1].publish(await createRevocation(user, chain[0]))).rejects.toThrow('stopped')
  })
})
