/**
 * Team records against the test vectors of `spec/teams.md` section 12 (the
 * `team-vectors` block, read at run time): the delegation tokens of the
 * members, the invitation, the acceptance, rosters v1 and v2, one message of
 * each type of 8.2, a chain of three entries, a checkpoint and a claim. Each
 * record re-signed from its payload has the vector's signing bytes,
 * signature, encoding and CID, parses strictly and verifies; the entries
 * chain by CID and pass the team's entry checks in order. Also the strict
 * parsers' refusals (unknown key, wrong type, bad roster order).
 */
import * as dagCbor from '@ipld/dag-cbor'
import { identityFromPrivateKey } from '@ioa/interconnect'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { MemoryDatastore } from 'datastore-core'
import { beforeAll, describe, expect, it } from 'vitest'
import { ed25519KeyFromSeed, fromHex, readSpec, readSpecBlock, toHex } from '../../../test/util.js'
import { fromJson, refusal } from './vectors-fixture.js'
import { decodeToken, encodeToken, tokenCid } from '../src/auth/delegation.js'
import { TEAM_DEFAULTS } from '../src/teams/api.js'
import { TeamLog } from '../src/teams/log.js'
import {
  MESSAGE_TYPES, TEAM_PREFIXES, cidOf, parseAcceptance, parseCheckpoint, parseClaim, parseEntry, parseInvitation, parseMessage,
  parseRoster, recordSigningBytes, signRecord, verifyRecord
} from '../src/teams/records.js'
import { TeamRuntime } from '../src/teams/team.js'
import type { TeamHost } from '../src/teams/team.js'
import type { Entry, RecordKind, Signed } from '../src/teams/records.js'
import type { VectorRecord } from './vectors-fixture.js'
import type { Did, Identity } from '@ioa/interconnect'


interface Vectors {
  principals: Record<string, { seed: string, did: string, peer: string }>
  prefixes: Record<string, string>
  team: string
  tokens: Record<string, { payload: Record<string, unknown>, token: string, cid: string }>
  invitation: VectorRecord
  acceptance: VectorRecord
  rosterV1: VectorRecord
  rosterV2: VectorRecord
  messages: Record<string, VectorRecord>
  entries: Array<{ seq: number, epoch: number, prev?: string, msg: string, entry: string, cid: string }>
  checkpoint: VectorRecord
  claim: VectorRecord
}

const PARSERS: Partial<Record<RecordKind, (v: unknown) => unknown>> = {
  invite: parseInvitation, accept: parseAcceptance, roster: parseRoster, message: parseMessage, checkpoint: parseCheckpoint, claim: parseClaim
}

const v = readSpecBlock<Vectors>('teams.md', 'team-vectors')
const ids: Record<string, Identity> = {}

beforeAll(async () => {
  for (const [name, p] of Object.entries(v.principals)) ids[name] = identityFromPrivateKey(await ed25519KeyFromSeed(p.seed))
})

async function checkRecord (r: VectorRecord): Promise<Signed<Record<string, unknown>>> {
  const payload = fromJson(r.payload)
  const signed = await signRecord(r.kind, payload, ids[r.signer])
  expect(toHex(recordSigningBytes(r.kind, payload))).toBe(r.signingBytes)
  expect(r.signingBytes.startsWith(v.prefixes[r.kind])).toBe(true)
  expect(toHex(signed.sig)).toBe(r.signature)
  expect(toHex(dagCbor.encode(signed))).toBe(r.record)
  expect(await cidOf(signed)).toBe(r.cid)
  const decoded = dagCbor.decode(fromHex(r.record)) as Signed<Record<string, unknown>>
  expect((PARSERS[r.kind] as (v: unknown) => unknown)(decoded)).toEqual(decoded)
  expect(await verifyRecord(r.kind, decoded, v.principals[r.signer].did as Did)).toBe(true)
  const other = Object.keys(v.principals).find(n => n !== r.signer) as string
  expect(await verifyRecord(r.kind, decoded, v.principals[other].did as Did)).toBe(false)
  // the same payload under another record kind's prefix does not verify
  expect(await verifyRecord(r.kind === 'claim' ? 'checkpoint' : 'claim', decoded, v.principals[r.signer].did as Did)).toBe(false)
  return decoded
}

describe('spec/teams.md team vectors', () => {
  it('principals, peers and prefixes', async () => {
    for (const [name, p] of Object.entries(v.principals)) {
      expect(ids[name].did).toBe(p.did)
      expect(peerIdFromPrivateKey(await ed25519KeyFromSeed(p.seed)).toString()).toBe(p.peer)
    }
    for (const kind of ['invite', 'accept', 'roster', 'message', 'checkpoint', 'claim'] as const) {
      expect(toHex(new TextEncoder().encode(TEAM_PREFIXES[kind] + '\n'))).toBe(v.prefixes[kind])
    }
  })

  it('members\' tokens: encoding and CID (collab-delegation.md)', async () => {
    for (const t of Object.values(v.tokens)) {
      const token = decodeToken(fromHex(t.token))
      expect(token.payload).toEqual(fromJson(t.payload))
      expect(toHex(encodeToken(token))).toBe(t.token)
      expect((await tokenCid(token)).toString()).toBe(t.cid)
    }
  })

  it.each(['invitation', 'acceptance', 'rosterV1', 'rosterV2', 'checkpoint', 'claim'] as const)('%s: re-signed from its payload it has the vector bytes, signature, encoding and CID; it parses and verifies', async (name) => {
    await checkRecord(v[name])
  })

  it('the records chain by CID', async () => {
    const inv = fromJson(v.invitation.payload)
    expect(toHex(inv.token)).toBe(v.tokens.hotel.token)
    expect(v.acceptance.payload).toMatchObject({ invite: v.invitation.cid, from: v.principals.hotel.did, peer: v.principals.hotel.peer })
    const r1 = fromJson(v.rosterV1.payload)
    const r2 = fromJson(v.rosterV2.payload)
    expect(r1.prev).toBeUndefined()
    expect(r2).toMatchObject({ version: 2, epoch: 1, prev: v.rosterV1.cid, signer: v.principals.hotel.did })
    for (const m of r1.members) {
      if (m.agent === r1.convener) expect(m.token).toBeUndefined()
      else expect(m.chain[0]).toBe(m.token)
    }
    expect(v.checkpoint.payload).toMatchObject({ seq: 2, epoch: 1, head: v.entries[2].cid })
  })

  it('every message type of 8.2 has a vector', () => {
    expect(Object.keys(v.messages).sort()).toEqual([...MESSAGE_TYPES].sort())
  })

  it.each([...MESSAGE_TYPES])('message %s: re-signed from its payload it has the vector bytes, signature, encoding and CID; it parses and verifies', async (type) => {
    const r = v.messages[type]
    expect(r.payload.type).toBe(type)
    const decoded = await checkRecord(r)
    expect(decoded.payload.team).toBe(v.team)
  })

  it('entries: encoding, CIDs, prev links; they pass the team\'s entry checks in order, and the roster v2 entry after them', async () => {
    const entries: Entry[] = []
    for (const e of v.entries) {
      const msg = dagCbor.decode(fromHex(v.messages[e.msg].record))
      const entry: Entry = { seq: e.seq, epoch: e.epoch, msg: msg as Entry['msg'] }
      if (e.prev != null) entry.prev = e.prev
      expect(toHex(dagCbor.encode(entry))).toBe(e.entry)
      expect(await cidOf(entry)).toBe(e.cid)
      expect(parseEntry(dagCbor.decode(fromHex(e.entry)))).toEqual(entry)
      if (e.seq > 0) expect(e.prev).toBe(v.entries[e.seq - 1].cid)
      entries.push(entry)
    }
    // a member (payment) applies them: entry 0 is the first roster, entry 2 starts epoch 1 of hotel
    const host = { limits: TEAM_DEFAULTS, log: Object.assign(() => {}, { error: () => {}, trace: () => {} }), applied: () => {} } as unknown as TeamHost
    const team = new TeamRuntime(v.team, ids.payment, new TeamLog(v.team, new MemoryDatastore(), TEAM_DEFAULTS.historyBytes), host)
    for (const entry of entries) {
      await team.check(entry)
      expect(await team.apply(entry)).toBe(v.entries[entry.seq].cid)
    }
    expect(team.epoch).toBe(1)
    expect(team.sequencer).toBe(v.principals.hotel.did)
    // roster v2, signed by the sequencer of epoch 1 with prev = roster v1, is the next valid roster entry
    const msg = await signRecord('message', { v: 1 as const, team: v.team, from: ids.hotel.did, id: 'AAAAAAAAAAAAAAAAAAAAAA', type: 'roster' as const, body: { roster: dagCbor.decode(fromHex(v.rosterV2.record)) }, ts: 1767225600000 }, ids.hotel)
    const next: Entry = { seq: 3, epoch: 1, prev: v.entries[2].cid, msg }
    await team.check(next)
    await team.apply(next)
    expect(team.roster.version).toBe(2)
    // the same roster in epoch 0's terms (another epoch) is refused
    const bad: Entry = { seq: 4, epoch: 0, prev: await cidOf(next), msg }
    await expect(team.check(bad)).rejects.toMatchObject({ code: 'STALE_EPOCH' })
  })
})

describe('team records parse strictly', () => {
  const record = (r: VectorRecord): Signed<Record<string, any>> => dagCbor.decode(fromHex(r.record))
  const withPayload = (r: VectorRecord, change: Record<string, unknown>): unknown => {
    const rec = record(r)
    return { ...rec, payload: { ...rec.payload, ...change } }
  }
  const withBody = (r: VectorRecord, body: Record<string, unknown>): unknown => {
    const rec = record(r)
    return { ...rec, payload: { ...rec.payload, body: { ...rec.payload.body, ...body } } }
  }
  const r1 = (): Signed<Record<string, any>> => record(v.rosterV1)
  const rosterWith = (change: (p: Record<string, any>) => void): unknown => {
    const rec = r1()
    const p = structuredClone(rec.payload)
    change(p)
    return { ...rec, payload: p }
  }

  it.each([
    ['invitation: an unknown key', 'INVALID_TEAM_RECORD', () => parseInvitation(withPayload(v.invitation, { extra: 1 }))],
    ['invitation: token as text', 'INVALID_TEAM_RECORD', () => parseInvitation(withPayload(v.invitation, { token: 'abc' }))],
    ['invitation: a bad team id', 'INVALID_TEAM_RECORD', () => parseInvitation(withPayload(v.invitation, { team: 'c' + 'a'.repeat(26) }))],
    ['invitation: a 63-byte sig', 'INVALID_TEAM_RECORD', () => parseInvitation({ ...record(v.invitation), sig: new Uint8Array(63) })],
    ['acceptance: an unknown key', 'INVALID_TEAM_RECORD', () => parseAcceptance(withPayload(v.acceptance, { extra: 1 }))],
    ['acceptance: ts as text', 'INVALID_TEAM_RECORD', () => parseAcceptance(withPayload(v.acceptance, { ts: '1767225600200' }))],
    ['roster: an unknown key', 'INVALID_ROSTER', () => parseRoster(withPayload(v.rosterV1, { extra: 1 }))],
    ['roster: version as text', 'INVALID_ROSTER', () => parseRoster(withPayload(v.rosterV1, { version: '1' }))],
    ['roster: members not sorted by agent', 'INVALID_ROSTER', () => parseRoster(rosterWith(p => { p.members.reverse() }))],
    ['roster: a member twice', 'INVALID_ROSTER', () => parseRoster(rosterWith(p => { p.members.splice(1, 0, p.members[0]) }))],
    ['roster: successors without a member', 'INVALID_ROSTER', () => parseRoster(rosterWith(p => { p.successors.pop() }))],
    ['roster: a member with an unknown key', 'INVALID_ROSTER', () => parseRoster(rosterWith(p => { p.members[0].extra = 1 }))],
    ['roster: version 1 with prev', 'INVALID_ROSTER', () => parseRoster(withPayload(v.rosterV1, { prev: v.rosterV1.cid }))],
    ['roster: version 2 without prev', 'INVALID_ROSTER', () => parseRoster(rosterWith(p => { p.version = 2 }))],
    ['roster: a limit below its bound', 'INVALID_ROSTER', () => parseRoster(rosterWith(p => { p.limits.maxMessageBytes = 255 }))],
    ['message: an unknown key', 'INVALID_MESSAGE', () => parseMessage(withPayload(v.messages.discuss, { extra: 1 }))],
    ['message: an unknown type', 'INVALID_MESSAGE', () => parseMessage(withPayload(v.messages.discuss, { type: 'shout' }))],
    ['message: a body key of another type', 'INVALID_MESSAGE', () => parseMessage(withBody(v.messages.discuss, { choice: 'yes' }))],
    ['message: a vote choice outside its set', 'INVALID_MESSAGE', () => parseMessage(withBody(v.messages.vote, { choice: 'maybe' }))],
    ['message: re as text', 'INVALID_MESSAGE', () => parseMessage(withPayload(v.messages.discuss, { re: '1' }))],
    ['message: an empty pause', 'INVALID_MESSAGE', () => parseMessage(withBody(v.messages.pause, { tasks: [] }))],
    ['message: a roster body with an unsorted roster', 'INVALID_ROSTER', () => parseMessage(withBody(v.messages.roster, { roster: rosterWith(p => { p.members.reverse() }) }))],
    ['entry: an unknown key', 'INVALID_MESSAGE', () => parseEntry({ ...dagCbor.decode(fromHex(v.entries[1].entry)) as object, extra: 1 })],
    ['entry: entry 0 with prev', 'INVALID_MESSAGE', () => parseEntry({ ...dagCbor.decode(fromHex(v.entries[0].entry)) as object, prev: v.entries[1].cid })],
    ['entry: entry 1 without prev', 'INVALID_MESSAGE', () => parseEntry({ ...dagCbor.decode(fromHex(v.entries[1].entry)) as object, prev: undefined })],
    ['checkpoint: an unknown key', 'INVALID_TEAM_RECORD', () => parseCheckpoint(withPayload(v.checkpoint, { extra: 1 }))],
    ['checkpoint: seq as text', 'INVALID_TEAM_RECORD', () => parseCheckpoint(withPayload(v.checkpoint, { seq: '2' }))],
    ['claim: epoch 0', 'INVALID_TEAM_RECORD', () => parseClaim(withPayload(v.claim, { epoch: 0 }))],
    ['claim: an unknown key', 'INVALID_TEAM_RECORD', () => parseClaim(withPayload(v.claim, { extra: 1 }))]
  ])('%s is %s', (_what, code, fn) => {
    expect(refusal(fn)).toMatchObject({ code })
  })
})

describe('spec/teams.md section 9 lists every team option', () => {
  const section = readSpec('teams.md').split('\n## 9. ')[1].split('\n## 10. ')[0]
  const rows = section.split('\n').filter(l => l.startsWith('| '))

  it.each(Object.entries(TEAM_DEFAULTS))('%s with its default %d', (key, value) => {
    const row = rows.find(r => r.split('|')[1].includes('`' + key + '`'))
    expect(row, `no row for ${key}`).toBeDefined()
    expect((row as string).split('|')[2]).toContain(value.toLocaleString('en-US'))
  })
})
