/**
 * Flow control against the `flow-vectors` block of `spec/teams.md` section
 * 12: a roster whose `limits` name the round-robin policy and 4 turns, and a
 * conversation of 13 entries through every state (discussion, sync, paused,
 * concluded) with the sequencer's `turn` decisions. Each entry re-signed
 * from its fields has the vector's signature, encoding and CID; a member
 * takes the entries in order and its flow state after each is the vector's;
 * and each refused message, offered as the next entry at its position, is
 * refused with the vector's code.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { identityFromPrivateKey } from '@ioa/interconnect'
import { MemoryDatastore } from 'datastore-core'
import { beforeAll, describe, expect, it } from 'vitest'
import { ed25519KeyFromSeed, fromHex, readSpecBlock, toHex } from '../../../test/util.js'
import { fromJson } from './vectors-fixture.js'
import { TEAM_DEFAULTS } from '../src/teams/api.js'
import { TeamLog } from '../src/teams/log.js'
import { cidOf, parseRoster, signRecord } from '../src/teams/records.js'
import { TeamRuntime } from '../src/teams/team.js'
import type { TeamHost } from '../src/teams/team.js'
import type { Entry, MessagePayload, MessageType, Signed } from '../src/teams/records.js'
import type { VectorRecord } from './vectors-fixture.js'
import type { Did, Identity } from '@ioa/interconnect'

interface FlowVectors {
  rosterV1: VectorRecord
  entries: Array<{
    seq: number, signer: string, id: string, ts: number, type: MessageType, body: unknown, sig: string, entry: string, cid: string
    state: { phase: string, turn: number, speaker?: string }
  }>
  refusals: Array<{ seq: number, signer: string, message: MessagePayload, code: string }>
}

const team = readSpecBlock<{ principals: Record<string, { seed: string, did: string }>, team: string }>('teams.md', 'team-vectors')
const v = readSpecBlock<FlowVectors>('teams.md', 'flow-vectors')
const ids: Record<string, Identity> = {}

beforeAll(async () => {
  for (const [name, p] of Object.entries(team.principals)) ids[name] = identityFromPrivateKey(await ed25519KeyFromSeed(p.seed))
})

function member (): TeamRuntime {
  const host = { limits: TEAM_DEFAULTS, log: Object.assign(() => {}, { error: () => {}, trace: () => {} }), applied: () => {} } as unknown as TeamHost
  return new TeamRuntime(team.team, ids.payment, new TeamLog(team.team, new MemoryDatastore(), TEAM_DEFAULTS.historyBytes), host)
}

describe('spec/teams.md flow vectors', () => {
  it('the roster with flow limits: re-signed it has the vector encoding and CID, and parses', async () => {
    const payload = fromJson(v.rosterV1.payload)
    const signed = await signRecord('roster', payload, ids[v.rosterV1.signer])
    expect(toHex(signed.sig)).toBe(v.rosterV1.signature)
    expect(toHex(dagCbor.encode(signed))).toBe(v.rosterV1.record)
    expect(await cidOf(signed)).toBe(v.rosterV1.cid)
    expect(parseRoster(signed).payload.limits).toMatchObject({ policy: 'round-robin', maxTurns: 4 })
  })

  it('entries: signatures, encodings and CIDs; a member takes them in order with the vector state after each, and refuses each refusal with its code', async () => {
    const roster = dagCbor.decode(fromHex(v.rosterV1.record)) as Signed<unknown>
    const t = member()
    const did = (name: string): Did => team.principals[name].did as Did
    let prev: string | undefined
    for (const e of v.entries) {
      for (const r of v.refusals.filter(x => x.seq === e.seq)) {
        const msg = await signRecord('message', r.message, ids[r.signer])
        const bad: Entry = { seq: r.seq, epoch: 0, prev, msg }
        await expect(t.check(bad), `refusal at ${r.seq}: ${r.message.type} of ${r.signer}`).rejects.toMatchObject({ code: r.code })
      }
      const payload: MessagePayload = { v: 1, team: team.team, from: did(e.signer), id: e.id, type: e.type, body: e.body === 'rosterV1' ? { roster } : fromJson(e.body), ts: e.ts }
      const msg = await signRecord('message', payload, ids[e.signer])
      expect(toHex(msg.sig)).toBe(e.sig)
      const entry: Entry = { seq: e.seq, epoch: 0, msg }
      if (prev != null) entry.prev = prev
      expect(toHex(dagCbor.encode(entry))).toBe(e.entry)
      expect(await cidOf(entry)).toBe(e.cid)
      await t.check(entry)
      expect(await t.apply(entry)).toBe(e.cid)
      prev = e.cid
      expect({ phase: t.flow.phase, turn: t.flow.turn, speaker: t.flow.speaker }, `state after entry ${e.seq}`)
        .toEqual({ phase: e.state.phase, turn: e.state.turn, speaker: e.state.speaker == null ? undefined : did(e.state.speaker) })
    }
    expect(t.concluded).toBe(true)
    // every refusal was tried
    expect(Math.max(...v.refusals.map(r => r.seq))).toBeLessThan(v.entries.length)
  })
})
