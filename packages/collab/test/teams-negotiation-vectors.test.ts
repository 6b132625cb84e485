/**
 * Negotiation records against the test vectors of `spec/teams.md` section 12
 * (the `negotiation-vectors` block, read at run time): each record re-signed
 * from its payload has the vector's signing bytes, signature, encoding and
 * CID, parses strictly and verifies; the records chain by CID; the default
 * chooser ranks the vector proposals in the vector order. Also the strict
 * parsers' refusals.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { identityFromPrivateKey } from '@ioa/interconnect'
import { beforeAll, describe, expect, it } from 'vitest'
import { ed25519KeyFromSeed, fromHex, readSpecBlock, toHex } from '../../../test/util.js'
import { refusal } from './vectors-fixture.js'
import { TEAM_PREFIXES, cidOf, recordSigningBytes, signRecord, verifyRecord } from '../src/teams/records.js'
import { parseAward, parseCfp, parseCommitment, parseProposal } from '../src/teams/negotiation/records.js'
import { rankProposals } from '../src/teams/negotiation/index.js'
import type { ReceivedProposal } from '../src/teams/negotiation/index.js'
import type { Signed } from '../src/teams/records.js'
import type { VectorRecord } from './vectors-fixture.js'
import type { Identity } from '@ioa/interconnect'


interface Vectors {
  principals: Record<string, { seed: string, did: string }>
  prefixes: Record<string, string>
  cfp: VectorRecord
  proposal: VectorRecord
  award: VectorRecord
  commitment: VectorRecord
  chooser: { proposals: Array<{ arrival: number, price?: { amount: number, currency: string }, eta?: number }>, order: number[] }
}

const PARSERS = { cfp: parseCfp, proposal: parseProposal, award: parseAward, commitment: parseCommitment } as const

describe('spec/teams.md negotiation vectors', () => {
  const v = readSpecBlock<Vectors>('teams.md', 'negotiation-vectors')
  const ids: Record<string, Identity> = {}

  beforeAll(async () => {
    for (const [name, p] of Object.entries(v.principals)) ids[name] = identityFromPrivateKey(await ed25519KeyFromSeed(p.seed))
  })

  it('principals and prefixes', () => {
    for (const [name, p] of Object.entries(v.principals)) expect(ids[name].did).toBe(p.did)
    for (const kind of ['cfp', 'proposal', 'award', 'commit'] as const) {
      expect(toHex(new TextEncoder().encode(TEAM_PREFIXES[kind] + '\n'))).toBe(v.prefixes[kind])
    }
  })

  for (const name of ['cfp', 'proposal', 'award', 'commitment'] as const) {
    it(`${name}: re-signed from its payload it has the vector bytes, signature, encoding and CID; it parses and verifies`, async () => {
      const r = v[name]
      const signed = await signRecord(r.kind, r.payload, ids[r.signer])
      expect(toHex(recordSigningBytes(r.kind, r.payload))).toBe(r.signingBytes)
      expect(toHex(signed.sig)).toBe(r.signature)
      expect(toHex(dagCbor.encode(signed))).toBe(r.record)
      expect(await cidOf(signed)).toBe(r.cid)
      const decoded = dagCbor.decode(fromHex(r.record)) as Signed<unknown>
      expect(PARSERS[name](decoded)).toEqual(decoded)
      expect(await verifyRecord(r.kind, decoded, v.principals[r.signer].did as Identity['did'])).toBe(true)
      // another signer's key does not verify it
      const other = r.signer === 'car' ? 'hotel' : 'car'
      expect(await verifyRecord(r.kind, decoded, v.principals[other].did as Identity['did'])).toBe(false)
    })
  }

  it('the records chain by CID', () => {
    expect(v.proposal.payload.cfp).toBe(v.cfp.cid)
    expect(v.award.payload).toMatchObject({ cfp: v.cfp.cid, proposal: v.proposal.cid, from: v.cfp.payload.from, to: v.cfp.payload.to })
    expect(v.commitment.payload).toMatchObject({ award: v.award.cid, from: v.proposal.payload.from })
  })

  it('chooser: the default chooser ranks the vector proposals in the vector order', () => {
    const received = v.chooser.proposals.map(p => ({
      arrival: p.arrival,
      proposal: { payload: { ...(p.price != null ? { price: p.price } : {}), ...(p.eta != null ? { eta: p.eta } : {}) } }
    }) as unknown as ReceivedProposal)
    // the order given to the chooser does not matter, only arrivals
    expect(rankProposals([...received].reverse()).map(p => p.arrival)).toEqual(v.chooser.order)
  })
})

describe('negotiation records parse strictly', () => {
  const v = readSpecBlock<Vectors>('teams.md', 'negotiation-vectors')
  const record = (r: VectorRecord): Signed<Record<string, unknown>> => dagCbor.decode(fromHex(r.record))
  const withPayload = (r: VectorRecord, change: Record<string, unknown>): unknown => {
    const rec = record(r)
    return { ...rec, payload: { ...rec.payload, ...change } }
  }

  it.each([
    ['cfp: an unknown key', () => parseCfp(withPayload(v.cfp, { extra: 1 }))],
    ['cfp: a bad id', () => parseCfp(withPayload(v.cfp, { id: 't' + 'a'.repeat(26) }))],
    ['cfp: an invalid skill', () => parseCfp(withPayload(v.cfp, { skill: 'Travel Hotel' }))],
    ['cfp: an empty what', () => parseCfp(withPayload(v.cfp, { what: '' }))],
    ['cfp: a what over 4,096 characters', () => parseCfp(withPayload(v.cfp, { what: 'x'.repeat(4097) }))],
    ['cfp: exp before due', () => parseCfp(withPayload(v.cfp, { exp: (v.cfp.payload.due as number) - 1 }))],
    ['cfp: bytes in constraints', () => parseCfp(withPayload(v.cfp, { constraints: { k: new Uint8Array(1) } }))],
    ['cfp: a 63-byte sig', () => parseCfp({ ...record(v.cfp), sig: new Uint8Array(63) })],
    ['proposal: a negative price', () => parseProposal(withPayload(v.proposal, { price: { amount: -1, currency: 'EUR' } }))],
    ['proposal: a lower-case currency', () => parseProposal(withPayload(v.proposal, { price: { amount: 1, currency: 'eur' } }))],
    ['proposal: a price with an extra key', () => parseProposal(withPayload(v.proposal, { price: { amount: 1, currency: 'EUR', vat: 1 } }))],
    ['proposal: a float eta', () => parseProposal(withPayload(v.proposal, { eta: 1.5 }))],
    ['proposal: 33 terms', () => parseProposal(withPayload(v.proposal, { terms: Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`k${i}`, i])) }))],
    ['proposal: a max… term with a text value', () => parseProposal(withPayload(v.proposal, { terms: { maxNights: 'two' } }))],
    ['award: a from that is not a did:key', () => parseAward(withPayload(v.award, { from: 'did:web:example.com' }))],
    ['award: a proposal that is not a CID', () => parseAward(withPayload(v.award, { proposal: 'bafy' }))],
    ['commitment: no ts', () => parseCommitment({ ...record(v.commitment), payload: { v: 1, award: v.award.cid, from: v.commitment.payload.from } })],
    ['commitment: version 2', () => parseCommitment(withPayload(v.commitment, { v: 2 }))]
  ])('%s is INVALID_TEAM_RECORD', (_what, fn) => {
    expect(refusal(fn)).toMatchObject({ name: 'InvalidTeamRecordError', code: 'INVALID_TEAM_RECORD' })
  })
})
