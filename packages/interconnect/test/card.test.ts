/**
 * Signed agent cards: schema, canonical signing bytes, signature, validity
 * period, peer binding, and hostile input.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey, peerIdFromString } from '@libp2p/peer-id'
import { beforeAll, describe, expect, it } from 'vitest'
import {
  CARD_LIMITS, cardSigningBytes, createIdentity, encodeSignedCard, matchingSkills, parseCard, signCard, verifyCard
} from '../src/index.js'
import { errorOf, rejectionOf } from '../../../test/util.js'
import type { AgentCard, AgentCardInit, Identity, SignedCard } from '../src/index.js'

const T0 = 1_767_225_600_000
const HOUR = 3_600_000

async function newPeer (): Promise<string> {
  return peerIdFromPrivateKey(await generateKeyPair('Ed25519')).toString()
}

/** A deep copy that keeps byte arrays */
function clone<T> (value: T): T {
  return dagCbor.decode(dagCbor.encode(value))
}

/** Sign the given card bytes as they are, without normalising them first */
async function signRaw (card: Record<string, unknown>, identity: Identity): Promise<{ card: Record<string, unknown>, sig: Uint8Array }> {
  return { card, sig: await identity.sign(cardSigningBytes(card as AgentCard)) }
}

let agent: Identity
let other: Identity
let peer: string
let gateway: string
let stranger: string

function init (overrides: Partial<AgentCardInit> = {}): AgentCardInit {
  return {
    v: 1,
    id: agent.did,
    name: 'Hotel Booker',
    domain: 'hotels.example',
    skills: [
      { id: 'travel.hotel.booking', name: 'Book', tags: ['hotel'], inputSchema: { type: 'object', required: ['near'], properties: { near: { type: 'string' } } } },
      { id: 'travel.hotel.search' }
    ],
    peer,
    addrs: ['/ip4/192.0.2.1/tcp/4001'],
    issuedAt: T0,
    expiresAt: T0 + HOUR,
    ...overrides
  }
}

async function signed (overrides: Partial<AgentCardInit> = {}): Promise<SignedCard> {
  return signCard(init(overrides), agent)
}

beforeAll(async () => {
  agent = await createIdentity()
  other = await createIdentity()
  peer = await newPeer()
  gateway = await newPeer()
  stranger = await newPeer()
})

describe('parseCard', () => {
  it('fills defaults', () => {
    const card = parseCard({ v: 1, id: agent.did, name: 'n', domain: 'd', skills: [{ id: 'x' }], peer, issuedAt: 0, expiresAt: 1 })
    expect(card.description).toBe('')
    expect(card.version).toBe('1.0.0')
    expect(card.addrs).toEqual([])
    expect(card.availability).toEqual({ mode: 'always' })
    expect(card.skills[0].tags).toEqual([])
    expect('gateways' in card).toBe(false)
    expect('name' in card.skills[0]).toBe(false)
  })

  it('names the bad fields', () => {
    const err = errorOf(() => parseCard({ ...init(), name: '' }))
    expect(err.name).toBe('InvalidCardError')
    expect(err.code).toBe('INVALID_CARD')
    expect(err.message).toMatch(/name/)
  })

  it.each<[string, Partial<AgentCardInit> | Record<string, unknown>]>([
    ['version 2', { v: 2 }],
    ['bad did', { id: 'did:key:zNope' }],
    ['bad peer id', { peer: 'not-a-peer' }],
    ['bad gateway peer id', { gateways: ['nope'] }],
    ['upper-case domain', { domain: 'Hotels.example' }],
    ['domain with underscore', { domain: 'hotels_example' }],
    ['no skills', { skills: [] }],
    ['bad skill id', { skills: [{ id: 'Travel' }] }],
    ['empty tag', { skills: [{ id: 'travel', tags: [''] }] }],
    ['tag of 33 characters', { skills: [{ id: 'travel', tags: ['t'.repeat(33)] }] }],
    ['name too long', { name: 'n'.repeat(CARD_LIMITS.maxName + 1) }],
    ['description too long', { description: 'd'.repeat(CARD_LIMITS.maxText + 1) }],
    ['version too long', { version: '1'.repeat(33) }],
    ['empty version', { version: '' }],
    ['expiry before issue', { expiresAt: T0 - 1 }],
    ['expiry equal to issue', { expiresAt: T0 }],
    ['negative issuedAt', { issuedAt: -1 }],
    ['fractional issuedAt', { issuedAt: T0 + 0.5 }],
    ['unknown availability mode', { availability: { mode: 'sometimes' } }],
    ['heartbeat too small', { availability: { mode: 'intermittent', heartbeat: 99 } }],
    ['too many addrs', { addrs: Array.from({ length: CARD_LIMITS.maxAddrs + 1 }, (_, i) => `/ip4/192.0.2.${i}/tcp/1`) }],
    ['addr too long', { addrs: ['/dns4/' + 'a'.repeat(260)] }],
    ['too many gateways', { gateways: Array.from({ length: CARD_LIMITS.maxGateways + 1 }, () => 'x') }],
    ['too many tags', { skills: [{ id: 'travel', tags: Array.from({ length: CARD_LIMITS.maxTags + 1 }, (_, i) => `t${i}`) }] }],
    ['too many examples', { skills: [{ id: 'travel', examples: Array.from({ length: CARD_LIMITS.maxExamples + 1 }, () => 'e') }] }],
    ['unknown card field', { url: 'https://example.com' }],
    ['unknown skill field', { skills: [{ id: 'travel', inputModes: ['text/plain'] }] }],
    ['unknown availability field', { availability: { mode: 'always', uptime: 1 } }]
  ])('rejects %s', (_why, overrides) => {
    expect(errorOf(() => parseCard({ ...init(), ...overrides })).name).toBe('InvalidCardError')
  })
})

describe('signCard and verifyCard', () => {
  it('signs the canonical bytes and verifies', async () => {
    const s = await signed()
    expect(s.sig.length).toBe(64)
    expect(await agent.publicKey.verify(cardSigningBytes(s.card), s.sig)).toBe(true)
    const v = await verifyCard(s, { now: T0 + 1000, servedBy: peer })
    expect(v.card).toEqual(s.card)
    expect(v.sig).toEqual(s.sig)
  })

  it('signing bytes are the prefix then the DAG-CBOR card', async () => {
    const s = await signed()
    const bytes = cardSigningBytes(s.card)
    const prefix = new TextEncoder().encode('ioa:card:v1\n')
    expect(bytes.subarray(0, prefix.length)).toEqual(prefix)
    expect(bytes.subarray(prefix.length)).toEqual(dagCbor.encode(s.card))
  })

  it('verifies after a round trip through the wire encoding', async () => {
    const s = await signed({ gateways: [gateway] })
    const wire = dagCbor.decode(encodeSignedCard(s))
    const v = await verifyCard(wire, { now: T0, servedBy: gateway })
    expect(v.card.id).toBe(agent.did)
  })

  it('refuses to sign a card whose id is not the signer', async () => {
    const err = await rejectionOf(signCard(init({ id: other.did }), agent))
    expect(err.name).toBe('InvalidCardError')
  })

  it.each<[string, (c: any) => void]>([
    ['name', c => { c.name = 'Evil Booker' }],
    ['domain', c => { c.domain = 'evil.example' }],
    ['peer', c => { c.peer = stranger }],
    ['addrs', c => { c.addrs = ['/ip4/203.0.113.6/tcp/4001'] }],
    ['expiresAt', c => { c.expiresAt += 1 }],
    ['skill id', c => { c.skills[0].id = 'travel.hotel.cancel' }],
    ['skill tags', c => { c.skills[0].tags.push('cheap') }],
    ['input schema', c => { c.skills[0].inputSchema.required = [] }],
    ['added gateway', c => { c.gateways = [stranger] }]
  ])('detects a tampered %s with InvalidSignatureError', async (_field, tamper) => {
    const s = await signed()
    const card = clone(s.card)
    tamper(card)
    const err = await rejectionOf(verifyCard({ card, sig: s.sig }, { now: T0 }))
    expect(err.name).toBe('InvalidSignatureError')
    expect(err.code).toBe('INVALID_SIGNATURE')
  })

  it('detects a flipped signature bit', async () => {
    const s = await signed()
    const sig = s.sig.slice()
    sig[10] ^= 1
    expect((await rejectionOf(verifyCard({ card: s.card, sig }, { now: T0 }))).name).toBe('InvalidSignatureError')
  })

  it('refuses a card signed by another key than the one of card.id', async () => {
    // the card names agent, but other signs it
    const s = await signed()
    const forged = { card: s.card, sig: await other.sign(cardSigningBytes(s.card)) }
    const err = await rejectionOf(verifyCard(forged, { now: T0 }))
    expect(['InvalidSignatureError', 'InvalidCardError']).toContain(err.name)
    // a card naming other with agent's signature
    const swapped = { ...s.card, id: other.did }
    const err2 = await rejectionOf(verifyCard({ card: swapped, sig: s.sig }, { now: T0 }))
    expect(['InvalidSignatureError', 'InvalidCardError']).toContain(err2.name)
  })

  describe('validity period', () => {
    it('accepts a card inside its period and within the clock skew', async () => {
      const s = await signed()
      await verifyCard(s, { now: T0 })
      await verifyCard(s, { now: T0 + HOUR })
      await verifyCard(s, { now: T0 - 60_000 })
      await verifyCard(s, { now: T0 + HOUR + 60_000 })
    })

    it('rejects an expired card with ExpiredCardError', async () => {
      const s = await signed()
      const err = await rejectionOf(verifyCard(s, { now: T0 + HOUR + 60_001 }))
      expect(err.name).toBe('ExpiredCardError')
      expect(err.code).toBe('CARD_EXPIRED')
    })

    it('rejects a card issued in the future', async () => {
      const s = await signed()
      expect((await rejectionOf(verifyCard(s, { now: T0 - 60_001 }))).name).toBe('ExpiredCardError')
    })

    it('honours a custom clock skew', async () => {
      const s = await signed()
      expect((await rejectionOf(verifyCard(s, { now: T0 + HOUR + 1, clockSkew: 0 }))).name).toBe('ExpiredCardError')
      await verifyCard(s, { now: T0 + HOUR + 5 * 60_000, clockSkew: 5 * 60_000 })
    })

    it('checks the clock when no time is given', async () => {
      const now = Date.now()
      const fresh = await signed({ issuedAt: now, expiresAt: now + HOUR })
      await verifyCard(fresh)
      expect((await rejectionOf(verifyCard(await signed()))).name).toBe('ExpiredCardError')
    })
  })

  describe('peer binding', () => {
    it('accepts a card served by its peer', async () => {
      await verifyCard(await signed(), { now: T0, servedBy: peer })
    })

    it('rejects a card served by another peer with CardBindingError', async () => {
      const err = await rejectionOf(verifyCard(await signed(), { now: T0, servedBy: stranger }))
      expect(err.name).toBe('CardBindingError')
      expect(err.code).toBe('CARD_BINDING')
    })

    it('accepts a card served by one of its gateways', async () => {
      const s = await signed({ gateways: [gateway] })
      await verifyCard(s, { now: T0, servedBy: gateway })
      await verifyCard(s, { now: T0, servedBy: peer })
      expect((await rejectionOf(verifyCard(s, { now: T0, servedBy: stranger }))).name).toBe('CardBindingError')
    })

    it('skips the binding check when the serving peer is not given', async () => {
      await verifyCard(await signed(), { now: T0 })
    })
  })

  describe('strict schema and canonical form', () => {
    it('rejects an unknown card field even when signed', async () => {
      const s = await signed()
      const raw = await signRaw({ ...s.card, url: 'https://hotels.example' }, agent)
      expect((await rejectionOf(verifyCard(raw, { now: T0 }))).name).toBe('InvalidCardError')
    })

    it('rejects an unknown skill field even when signed', async () => {
      const s = await signed()
      const card = clone(s.card) as any
      card.skills[0].price = 10
      expect((await rejectionOf(verifyCard(await signRaw(card, agent), { now: T0 }))).name).toBe('InvalidCardError')
    })

    it('rejects unknown fields next to card and sig', async () => {
      const s = await signed()
      expect((await rejectionOf(verifyCard({ ...s, extra: 1 }, { now: T0 }))).name).toBe('InvalidCardError')
    })

    it.each(['description', 'version', 'addrs', 'availability'])('rejects a signed card without the default field %s', async (field) => {
      const s = await signed()
      const card: Record<string, unknown> = { ...s.card }
      delete card[field]
      // parseCard would accept it (and fill the default) ...
      expect(() => parseCard(card)).not.toThrow()
      // ... but the signature covers the bytes as sent, so the card is not canonical
      const err = await rejectionOf(verifyCard(await signRaw(card, agent), { now: T0 }))
      expect(err.name).toBe('InvalidCardError')
      expect(err.message).toMatch(/canonical/)
    })

    it('rejects a signed skill without its default tags', async () => {
      const s = await signed()
      const card = clone(s.card) as any
      delete card.skills[1].tags
      const err = await rejectionOf(verifyCard(await signRaw(card, agent), { now: T0 }))
      expect(err.name).toBe('InvalidCardError')
    })

    it('rejects a schema larger than the limit', async () => {
      const big = { type: 'object', description: 'x'.repeat(CARD_LIMITS.maxSchemaBytes) }
      expect(errorOf(() => parseCard(init({ skills: [{ id: 'travel', inputSchema: big }] }))).name).toBe('InvalidCardError')
      const s = await signed()
      const card = clone(s.card) as any
      card.skills[0].outputSchema = big
      expect((await rejectionOf(verifyCard(await signRaw(card, agent), { now: T0 }))).name).toBe('InvalidCardError')
    })

    it('accepts a schema just under the limit', async () => {
      // {"d": "<text>"}: 1 byte map header, 2 bytes key, 3 bytes string header
      const schema = { d: 'x'.repeat(CARD_LIMITS.maxSchemaBytes - 6) }
      expect(dagCbor.encode(schema).byteLength).toBe(CARD_LIMITS.maxSchemaBytes)
      const s = await signed({ skills: [{ id: 'travel', inputSchema: schema }] })
      await verifyCard(s, { now: T0 })
    })

    /** `{ type: 'object', properties: { a: { … } } }` with maps nested `depth` levels (the schema itself is level 1) */
    function nested (depth: number): Record<string, unknown> {
      let schema: Record<string, unknown> = { type: 'string' }
      for (let level = 1; level < depth; level++) schema = { a: schema }
      return schema
    }

    it('rejects a schema nested 1,500 maps deep, on parse and on receipt, with InvalidCardError', async () => {
      const deep = nested(1_500)
      // small enough for the byte limit: only the depth bound refuses it
      expect(dagCbor.encode(deep).byteLength).toBeLessThan(CARD_LIMITS.maxSchemaBytes)
      const parsed = errorOf(() => parseCard(init({ skills: [{ id: 'travel', inputSchema: deep }] })))
      expect(parsed.name).toBe('InvalidCardError')
      expect(parsed.code).toBe('INVALID_CARD')
      expect(parsed.message).toMatch(/deeper than 32 levels/)
      // validly signed by its agent, still refused on receipt
      const s = await signed()
      const card = clone(s.card) as any
      card.skills[0].inputSchema = deep
      const received = await rejectionOf(verifyCard(await signRaw(card, agent), { now: T0 }))
      expect(received.name).toBe('InvalidCardError')
      expect(received.code).toBe('INVALID_CARD')
      expect(received.message).toMatch(/deeper than 32 levels/)
    })

    it('accepts a schema exactly maxSchemaDepth deep and refuses one level more', async () => {
      await verifyCard(await signed({ skills: [{ id: 'travel', inputSchema: nested(CARD_LIMITS.maxSchemaDepth), outputSchema: nested(CARD_LIMITS.maxSchemaDepth) }] }), { now: T0 })
      const s = await signed()
      const card = clone(s.card) as any
      card.skills[1].outputSchema = nested(CARD_LIMITS.maxSchemaDepth + 1)
      expect((await rejectionOf(verifyCard(await signRaw(card, agent), { now: T0 }))).name).toBe('InvalidCardError')
      // lists count as levels too
      let list: unknown = 1
      for (let level = 1; level < CARD_LIMITS.maxSchemaDepth + 1; level++) list = [list]
      expect(errorOf(() => parseCard(init({ skills: [{ id: 'travel', inputSchema: { enum: list } }] }))).name).toBe('InvalidCardError')
    })

    it('bounds the number of items in a schema', async () => {
      // {enum: [0, 0, …]}: one map entry plus the list elements
      const atLimit = { enum: Array.from({ length: CARD_LIMITS.maxSchemaItems - 1 }, () => 0) }
      await verifyCard(await signed({ skills: [{ id: 'travel', inputSchema: atLimit }] }), { now: T0 })
      const over = { enum: Array.from({ length: CARD_LIMITS.maxSchemaItems }, () => 0) }
      expect(dagCbor.encode(over).byteLength).toBeLessThan(CARD_LIMITS.maxSchemaBytes)
      const err = errorOf(() => parseCard(init({ skills: [{ id: 'travel', inputSchema: over }] })))
      expect(err.name).toBe('InvalidCardError')
      expect(err.message).toMatch(/more than 2048 items/)
    })

    it('refuses a schema nested far beyond the stack without a stack overflow', () => {
      // built by hand: the walk must not recurse (nor encode) before refusing it
      const deep = nested(200_000)
      const err = errorOf(() => parseCard(init({ skills: [{ id: 'travel', inputSchema: deep }] })))
      expect(err.name).toBe('InvalidCardError')
      expect(err.message).toMatch(/deeper than/)
    })

    it('rejects too many skills', async () => {
      const skills = Array.from({ length: CARD_LIMITS.maxSkills + 1 }, (_, i) => ({ id: `skill${i}`, tags: [] }))
      expect(errorOf(() => parseCard(init({ skills }))).name).toBe('InvalidCardError')
      const s = await signed()
      expect((await rejectionOf(verifyCard(await signRaw({ ...s.card, skills }, agent), { now: T0 }))).name).toBe('InvalidCardError')
      // exactly the limit is fine
      await verifyCard(await signed({ skills: skills.slice(0, CARD_LIMITS.maxSkills) }), { now: T0 })
    })

    it('rejects a card larger than maxCardBytes', async () => {
      // 32 skills with 8 examples of 2000 characters: each skill is within limits, the card is not
      const skills = Array.from({ length: CARD_LIMITS.maxSkills }, (_, i) => ({
        id: `skill${i}`,
        tags: [],
        examples: Array.from({ length: CARD_LIMITS.maxExamples }, () => 'e'.repeat(CARD_LIMITS.maxText))
      }))
      const s = await signed()
      const raw = await signRaw({ ...s.card, skills }, agent)
      expect(cardSigningBytes(raw.card as AgentCard).byteLength).toBeGreaterThan(CARD_LIMITS.maxCardBytes)
      const err = await rejectionOf(verifyCard(raw, { now: T0 }))
      expect(err.name).toBe('InvalidCardError')
      expect(err.message).toMatch(/larger/)
    })
  })

  describe('garbage input', () => {
    const typed = ['InvalidCardError', 'InvalidSignatureError']

    it.each<[string, () => unknown]>([
      ['null', () => null],
      ['undefined', () => undefined],
      ['a string', () => 'card'],
      ['a number', () => 42],
      ['an array', () => []],
      ['bytes', () => new Uint8Array(64)],
      ['an empty map', () => ({})],
      ['a map without sig', () => ({ card: init() })],
      ['a sig of 63 bytes', () => ({ card: init(), sig: new Uint8Array(63) })],
      ['a sig of 65 bytes', () => ({ card: init(), sig: new Uint8Array(65) })],
      ['an empty sig', () => ({ card: init(), sig: new Uint8Array(0) })],
      ['a sig as a string', () => ({ card: init(), sig: 'a'.repeat(64) })],
      ['a sig as an array of numbers', () => ({ card: init(), sig: Array.from({ length: 64 }, () => 0) })],
      ['card null', () => ({ card: null, sig: new Uint8Array(64) })],
      ['card an array', () => ({ card: [], sig: new Uint8Array(64) })],
      ['card a string', () => ({ card: 'x', sig: new Uint8Array(64) })],
      ['card bytes', () => ({ card: new Uint8Array(10), sig: new Uint8Array(64) })],
      ['card with undefined values', () => ({ card: { ...init(), gateways: undefined, description: undefined }, sig: new Uint8Array(64) })],
      ['card with null fields', () => ({ card: { ...init(), description: null }, sig: new Uint8Array(64) })],
      ['card with a nested array schema', () => ({ card: { ...init(), skills: [{ id: 'x', tags: [], inputSchema: [] }] }, sig: new Uint8Array(64) })],
      ['card with NaN times', () => ({ card: { ...init(), issuedAt: NaN }, sig: new Uint8Array(64) })],
      ['card with Infinity expiry', () => ({ card: { ...init(), expiresAt: Infinity }, sig: new Uint8Array(64) })],
      ['card with huge integers', () => ({ card: { ...init(), expiresAt: Number.MAX_SAFE_INTEGER + 2 }, sig: new Uint8Array(64) })],
      ['a valid card with a zero sig', () => ({ card: parseCard(init()), sig: new Uint8Array(64) })]
    ])('rejects %s with a typed error', async (_name, make) => {
      const err = await rejectionOf(verifyCard(make(), { now: T0, servedBy: peer }))
      expect(typed).toContain(err.name)
      expect(typeof err.code).toBe('string')
    })

    it('parseCard throws InvalidCardError on non-objects', () => {
      for (const v of [null, undefined, 1, 'x', [], true]) {
        expect(errorOf(() => parseCard(v)).name).toBe('InvalidCardError')
      }
    })
  })
})

describe('matchingSkills', () => {
  it('returns skills at or below a prefix', () => {
    const card = parseCard(init({ skills: [{ id: 'travel.hotel.booking' }, { id: 'travel.hotel' }, { id: 'travel.flight' }, { id: 'travelling' }] }))
    expect(matchingSkills(card, 'travel').map(s => s.id)).toEqual(['travel.hotel.booking', 'travel.hotel', 'travel.flight'])
    expect(matchingSkills(card, 'travel.hotel').map(s => s.id)).toEqual(['travel.hotel.booking', 'travel.hotel'])
    expect(matchingSkills(card, 'travel.hotel.booking').map(s => s.id)).toEqual(['travel.hotel.booking'])
    expect(matchingSkills(card, 'payment')).toEqual([])
  })
})

describe('peer id forms', () => {
  it('binds by the canonical string form of the peer id', async () => {
    // peer ids have a CID form too; cards carry the base58btc form that libp2p prints
    const cidForm = peerIdFromString(peer).toCID().toString()
    expect(peerIdFromString(cidForm).toString()).toBe(peer)
    const s = await signed()
    await verifyCard(s, { now: T0, servedBy: peerIdFromString(peer).toString() })
  })
})
