/**
 * The interconnect code against the normative spec: the test vectors of
 * `spec/interconnect.md` are read at run time, so the spec and the code cannot
 * drift apart unnoticed.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { describe, expect, it } from 'vitest'
import {
  CARD_LIMITS, agentCid, capabilityCid, capabilityPrefixes, cardSigningBytes, didToPublicKey, encodeSignedCard, identityFromPrivateKey,
  parseCard, publicKeyToDid, signCard, verifyCard
} from '../src/index.js'
import { ed25519KeyFromSeed, fromHex, readSpecBlock, rejectionOf, toHex } from '../../../test/util.js'
import type { AgentCard } from '../src/index.js'

interface Vectors {
  identity: { seed: string, publicKey: string, did: string }
  peer: { seed: string, peerId: string }
  gateway: { seed: string, peerId: string }
  card: AgentCard
  verifyAt: number
  signingBytes: string
  signature: string
  signedCard: string
  capabilities: Array<{ name: string, cid: string }>
  agent: { did: string, cid: string }
}

const v = readSpecBlock<Vectors>('interconnect.md', 'vectors')

interface SchemaVectors {
  maxSchemaDepth: number
  maxSchemaItems: number
  accepted: { depth: number, signedCard: string }
  refused: { depth: number, error: string, signedCard: string }
}

const sv = readSpecBlock<SchemaVectors>('interconnect.md', 'schema-vectors')

/** `{"type": "string"}` wrapped in `depth - 1` maps of the key `a` (spec 11) */
function nested (depth: number): Record<string, unknown> {
  let schema: Record<string, unknown> = { type: 'string' }
  for (let level = 1; level < depth; level++) schema = { a: schema }
  return schema
}

describe('spec/interconnect.md test vectors', () => {
  it('identity: seed -> public key -> did:key and back', async () => {
    const key = await ed25519KeyFromSeed(v.identity.seed)
    expect(toHex(key.publicKey.raw)).toBe(v.identity.publicKey)
    expect(publicKeyToDid(key.publicKey)).toBe(v.identity.did)
    expect(identityFromPrivateKey(key).did).toBe(v.identity.did)
    expect(toHex(didToPublicKey(v.identity.did).raw)).toBe(v.identity.publicKey)
  })

  it('peer ids: seed -> peer id', async () => {
    for (const p of [v.peer, v.gateway]) {
      const key = await ed25519KeyFromSeed(p.seed)
      expect(peerIdFromPrivateKey(key).toString()).toBe(p.peerId)
    }
  })

  it('the card is canonical and names the vector identities', () => {
    expect(v.card.id).toBe(v.identity.did)
    expect(v.card.peer).toBe(v.peer.peerId)
    expect(v.card.gateways).toEqual([v.gateway.peerId])
    // parsing adds nothing: every defaulted field is present
    expect(dagCbor.encode(parseCard(v.card))).toEqual(dagCbor.encode(v.card))
  })

  it('signing bytes', () => {
    const bytes = cardSigningBytes(v.card)
    expect(toHex(bytes)).toBe(v.signingBytes)
    expect(v.signingBytes.startsWith(toHex(new TextEncoder().encode('ioa:card:v1\n')))).toBe(true)
  })

  it('signature (Ed25519 is deterministic)', async () => {
    const identity = identityFromPrivateKey(await ed25519KeyFromSeed(v.identity.seed))
    expect(toHex(await identity.sign(fromHex(v.signingBytes)))).toBe(v.signature)
    const signed = await signCard(v.card, identity)
    expect(toHex(signed.sig)).toBe(v.signature)
    expect(await didToPublicKey(v.identity.did).verify(fromHex(v.signingBytes), fromHex(v.signature))).toBe(true)
  })

  it('signed card encoding', () => {
    expect(toHex(encodeSignedCard({ card: v.card, sig: fromHex(v.signature) }))).toBe(v.signedCard)
  })

  it('verifyCard accepts the decoded signed card at verifyAt, served by the peer or the gateway', async () => {
    const wire = dagCbor.decode(fromHex(v.signedCard))
    const byPeer = await verifyCard(wire, { now: v.verifyAt, servedBy: v.peer.peerId })
    expect(byPeer.card).toEqual(v.card)
    expect(toHex(byPeer.sig)).toBe(v.signature)
    await verifyCard(wire, { now: v.verifyAt, servedBy: v.gateway.peerId })
  })

  it('verifyCard rejects the vector card elsewhere and elsewhen', async () => {
    const wire = dagCbor.decode(fromHex(v.signedCard))
    // another peer: the one of the agent's own key
    const other = peerIdFromPrivateKey(await ed25519KeyFromSeed(v.identity.seed)).toString()
    expect((await rejectionOf(verifyCard(wire, { now: v.verifyAt, servedBy: other }))).name).toBe('CardBindingError')
    expect((await rejectionOf(verifyCard(wire, { now: v.card.expiresAt + 60_001 }))).name).toBe('ExpiredCardError')
    expect((await rejectionOf(verifyCard(wire, { now: v.card.issuedAt - 60_001 }))).name).toBe('ExpiredCardError')
  })

  it('schema bounds: the limits, and the signed cards at and beyond the depth limit', async () => {
    expect(sv.maxSchemaDepth).toBe(CARD_LIMITS.maxSchemaDepth)
    expect(sv.maxSchemaItems).toBe(CARD_LIMITS.maxSchemaItems)
    const identity = identityFromPrivateKey(await ed25519KeyFromSeed(v.identity.seed))
    for (const vector of [sv.accepted, sv.refused]) {
      // the vector is what the description says: the card vector with a nested input schema
      const card = dagCbor.decode<any>(dagCbor.encode(v.card))
      card.skills[0].inputSchema = nested(vector.depth)
      const sig = await identity.sign(cardSigningBytes(card))
      expect(toHex(encodeSignedCard({ card, sig }))).toBe(vector.signedCard)
    }
    const ok = await verifyCard(dagCbor.decode(fromHex(sv.accepted.signedCard)), { now: v.verifyAt, servedBy: v.peer.peerId })
    expect(ok.card.skills[0].inputSchema).toEqual(nested(sv.accepted.depth))
    const err = await rejectionOf(verifyCard(dagCbor.decode(fromHex(sv.refused.signedCard)), { now: v.verifyAt, servedBy: v.peer.peerId }))
    expect(err.code).toBe(sv.refused.error)
    expect(err.name).toBe('InvalidCardError')
  })

  it('capability CIDs', async () => {
    const deepest = v.capabilities[v.capabilities.length - 1].name
    expect(capabilityPrefixes(deepest)).toEqual(v.capabilities.map(c => c.name))
    for (const c of v.capabilities) {
      expect((await capabilityCid(c.name)).toString()).toBe(c.cid)
    }
  })

  it('agent CID', async () => {
    expect(v.agent.did).toBe(v.identity.did)
    expect((await agentCid(v.agent.did)).toString()).toBe(v.agent.cid)
  })
})
