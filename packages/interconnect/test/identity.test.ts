/**
 * Agent identity: did:key encoding of Ed25519 keys and the persistent key store.
 */
import { generateKeyPair, generateKeyPairFromSeed, publicKeyFromRaw } from '@libp2p/crypto/keys'
import { MemoryDatastore } from 'datastore-core'
import { base58btc } from 'multiformats/bases/base58'
import { describe, expect, it } from 'vitest'
import {
  createIdentity, didToPublicKey, identityFromPrivateKey, isDid, KeyStore, publicKeyToDid, verifyByDid
} from '../src/index.js'
import { errorOf, rejectionOf } from '../../../test/util.js'

const encoder = new TextEncoder()

/** did:key from raw multicodec-prefixed bytes */
const didOf = (bytes: Uint8Array): string => 'did:key:' + base58btc.encode(bytes)

describe('did:key', () => {
  it('round-trips a random key', async () => {
    const key = await generateKeyPair('Ed25519')
    const did = publicKeyToDid(key.publicKey)
    expect(did).toMatch(/^did:key:z6Mk[1-9A-HJ-NP-Za-km-z]+$/)
    const back = didToPublicKey(did)
    expect(back.type).toBe('Ed25519')
    expect(back.equals(key.publicKey)).toBe(true)
    expect(publicKeyToDid(back)).toBe(did)
    expect(isDid(did)).toBe(true)
  })

  it('is the multibase of 0xed 0x01 followed by the raw key', async () => {
    const seed = new Uint8Array(32).map((_, i) => i)
    const key = await generateKeyPairFromSeed('Ed25519', seed)
    const did = publicKeyToDid(key.publicKey)
    const bytes = base58btc.decode(did.slice('did:key:'.length))
    expect(bytes.length).toBe(34)
    expect([...bytes.subarray(0, 2)]).toEqual([0xed, 0x01])
    expect(bytes.subarray(2)).toEqual(key.publicKey.raw)
  })

  it('refuses non-Ed25519 keys', async () => {
    const key = await generateKeyPair('secp256k1')
    expect(errorOf(() => publicKeyToDid(key.publicKey)).name).toBe('InvalidDidError')
    expect(errorOf(() => identityFromPrivateKey(key)).name).toBe('InvalidDidError')
  })

  const raw = new Uint8Array(32).fill(7)
  const good = new Uint8Array([0xed, 0x01, ...raw])
  const malformed: Array<[string, unknown]> = [
    ['empty string', ''],
    ['no method', 'z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK'],
    ['other did method', 'did:web:example.com'],
    ['did:key without multibase prefix', 'did:key:6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK'],
    ['base32 multibase', 'did:key:b' + 'a'.repeat(50)],
    ['upper-case DID prefix', 'DID:KEY:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK'],
    ['invalid base58 characters', 'did:key:z0OIl'],
    ['only the prefix', 'did:key:z'],
    ['secp256k1 multicodec', didOf(new Uint8Array([0xe7, 0x01, ...new Uint8Array(33).fill(2)]))],
    ['X25519 multicodec', didOf(new Uint8Array([0xec, 0x01, ...raw]))],
    ['key too short', didOf(good.subarray(0, 33))],
    ['key too long', didOf(new Uint8Array([...good, 0]))],
    ['too long overall', 'did:key:z' + '1'.repeat(200)],
    ['trailing space', didOf(good) + ' '],
    ['number', 42],
    ['null', null],
    ['undefined', undefined],
    ['object', { did: didOf(good) }]
  ]

  it.each(malformed)('rejects %s with InvalidDidError', (_name, value) => {
    const err = errorOf(() => didToPublicKey(value as string))
    expect(err.name).toBe('InvalidDidError')
    expect(err.code).toBe('INVALID_DID')
    expect(isDid(value)).toBe(false)
  })

  it('accepts a well-formed did:key built by hand', () => {
    const did = didOf(good)
    expect(isDid(did)).toBe(true)
    expect(didToPublicKey(did).raw).toEqual(raw)
    expect(publicKeyToDid(publicKeyFromRaw(raw))).toBe(did)
  })

  it('parses a valid did:key once (the key is kept) and a malformed one every time', async () => {
    const did = publicKeyToDid((await generateKeyPair('Ed25519')).publicKey)
    expect(didToPublicKey(did)).toBe(didToPublicKey(did))
    expect(isDid(did)).toBe(true)
    const bad = didOf(new Uint8Array([...good.subarray(0, 33)]))
    for (let i = 0; i < 2; i++) expect(errorOf(() => didToPublicKey(bad)).name).toBe('InvalidDidError')
  })
})

describe('identities and signatures', () => {
  it('signs with the key its did names', async () => {
    const id = await createIdentity()
    const data = encoder.encode('hello agents')
    const sig = await id.sign(data)
    expect(sig.length).toBe(64)
    expect(await verifyByDid(id.did, data, sig)).toBe(true)
    expect(await verifyByDid(id.did, encoder.encode('hello agent'), sig)).toBe(false)
    const other = await createIdentity()
    expect(other.did).not.toBe(id.did)
    expect(await verifyByDid(other.did, data, sig)).toBe(false)
  })

  it('verifyByDid returns false instead of throwing on garbage', async () => {
    const id = await createIdentity()
    const data = encoder.encode('x')
    const sig = await id.sign(data)
    expect(await verifyByDid('not a did', data, sig)).toBe(false)
    expect(await verifyByDid(id.did, data, sig.subarray(0, 10))).toBe(false)
    expect(await verifyByDid(id.did, data, new Uint8Array(0))).toBe(false)
    expect(await verifyByDid(null as unknown as string, data, sig)).toBe(false)
  })

  it('identityFromPrivateKey keeps the did of the key', async () => {
    const key = await generateKeyPairFromSeed('Ed25519', new Uint8Array(32).fill(1))
    const a = identityFromPrivateKey(key)
    const b = identityFromPrivateKey(await generateKeyPairFromSeed('Ed25519', new Uint8Array(32).fill(1)))
    expect(a.did).toBe(b.did)
    expect(a.did).toBe(publicKeyToDid(key.publicKey))
  })
})

describe('KeyStore', () => {
  it('returns the same identity for the same name', async () => {
    const store = new KeyStore(new MemoryDatastore())
    const a = await store.loadOrCreate('hotel')
    const b = await store.loadOrCreate('hotel')
    expect(b.did).toBe(a.did)
    expect(await store.has('hotel')).toBe(true)
    // and the key still signs for that did
    const data = encoder.encode('same key')
    expect(await verifyByDid(a.did, data, await b.sign(data))).toBe(true)
  })

  it('returns different identities for different names', async () => {
    const store = new KeyStore(new MemoryDatastore())
    const a = await store.loadOrCreate('hotel')
    const b = await store.loadOrCreate('payment')
    expect(b.did).not.toBe(a.did)
    expect(await store.has('map')).toBe(false)
  })

  it('keeps keys across a new KeyStore over the same datastore', async () => {
    const datastore = new MemoryDatastore()
    const first = new KeyStore(datastore)
    const a = await first.loadOrCreate('robot-1')
    const b = await first.loadOrCreate('drone_2.x')
    const second = new KeyStore(datastore)
    expect(await second.has('robot-1')).toBe(true)
    expect((await second.loadOrCreate('robot-1')).did).toBe(a.did)
    expect((await second.loadOrCreate('drone_2.x')).did).toBe(b.did)
  })

  it('keeps stores with different prefixes apart', async () => {
    const datastore = new MemoryDatastore()
    const a = await new KeyStore(datastore, '/one').loadOrCreate('agent')
    const b = await new KeyStore(datastore, '/two').loadOrCreate('agent')
    expect(b.did).not.toBe(a.did)
  })

  it('deletes keys: the next load creates a new identity', async () => {
    const store = new KeyStore(new MemoryDatastore())
    const a = await store.loadOrCreate('temp')
    await store.delete('temp')
    expect(await store.has('temp')).toBe(false)
    expect((await store.loadOrCreate('temp')).did).not.toBe(a.did)
  })

  it.each(['', 'a/b', '../x', 'with space', 'ü', 'x'.repeat(65)])('rejects the key name %j', async (name) => {
    const store = new KeyStore(new MemoryDatastore())
    expect((await rejectionOf(store.loadOrCreate(name))).name).toBe('InvalidDidError')
  })
})
