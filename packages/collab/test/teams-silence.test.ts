/**
 * The sequencer removes a member that never acknowledged its epoch
 * (`spec/teams.md` 4.3): after a takeover, a member that did not promise
 * (it crashed with the old sequencer) has no acknowledgement at all, and
 * its silence counts from the start of the epoch. Uses the team of the
 * spec vectors (section 12): after entry 2 the hotel agent sequences epoch 1,
 * promised by itself and the payment agent; the car agent is silent.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { identityFromPrivateKey } from '@ioa/interconnect'
import { MemoryDatastore } from 'datastore-core'
import { describe, expect, it, vi } from 'vitest'
import { ed25519KeyFromSeed, fromHex, readSpecBlock, until } from '../../../test/util.js'
import { TEAM_DEFAULTS } from '../src/teams/api.js'
import { TeamLog } from '../src/teams/log.js'
import { Sequencer } from '../src/teams/sequencer.js'
import { TeamRuntime } from '../src/teams/team.js'
import type { Entry } from '../src/teams/records.js'
import type { TeamHost } from '../src/teams/team.js'
import type { Did } from '@ioa/interconnect'
import type { Logger } from '@libp2p/interface'

interface Vectors {
  principals: Record<string, { seed: string, did: Did, peer: string }>
  team: string
  messages: Record<string, { record: string }>
  entries: Array<{ seq: number, epoch: number, prev?: string, msg: string }>
}

describe('silence removal after a takeover', () => {
  it('a member that did not promise the epoch and never acknowledges is removed after memberTimeout', async () => {
    const v = readSpecBlock<Vectors>('teams.md', 'team-vectors')
    const { car, hotel, payment } = v.principals
    const log = Object.assign(() => {}, { error: () => {}, trace: () => {}, enabled: false }) as unknown as Logger
    const limits = { ...TEAM_DEFAULTS, heartbeat: 50, memberTimeout: 400, sequencerTimeout: 60_000 }
    const host = { limits, log, applied: () => {}, saveState: async () => {} } as unknown as TeamHost
    const identity = identityFromPrivateKey(await ed25519KeyFromSeed(hotel.seed))
    const team = new TeamRuntime(v.team, identity, new TeamLog(v.team, new MemoryDatastore(), limits.historyBytes), host)
    for (const e of v.entries) {
      const entry: Entry = { seq: e.seq, epoch: e.epoch, msg: dagCbor.decode(fromHex(v.messages[e.msg].record)) }
      if (e.prev != null) entry.prev = e.prev
      await team.check(entry)
      await team.apply(entry)
    }
    expect(team.sequencer).toBe(hotel.did)
    // the vectors' team is due at a fixed date in the past: run the sequencer's clock an hour before it,
    // or it would conclude the team at once (spec 8.2, conclude at the deadline)
    const offset = Date.now() - (team.roster.deadline - 3_600_000)
    const realNow = Date.now.bind(Date)
    const clock = vi.spyOn(Date, 'now').mockImplementation(() => realNow() - offset)
    team.sequencing = true
    const sequencer = new Sequencer(team, { limits, log, promised: [hotel.did, payment.did], epoch: 1 })
    sequencer.start()
    // the payment agent keeps acknowledging; the car agent is gone
    const acks = setInterval(() => { sequencer.ack({ agent: payment.did, epoch: 1, seq: team.length - 1 }, payment.peer) }, 50)
    try {
      await until(() => team.roster.version === 2, { timeout: 10_000 })
      expect(team.roster.members.map(m => m.agent)).toEqual([payment.did, hotel.did].sort())
      expect(team.roster.members.some(m => m.agent === car.did)).toBe(false)
      expect(team.roster).toMatchObject({ epoch: 1, signer: hotel.did })
    } finally {
      clearInterval(acks)
      sequencer.stop()
      clock.mockRestore()
    }
  })
})
