/**
 * Takeover of a silent sequencer (`spec/teams.md` 7.2): suspicion, the
 * successors' staggered claims, the members' promises, catching up from the
 * member with the highest entry, and the start of the new epoch. Also the
 * member side of a claim (`claim`, 5.8).
 */
import { peerIdFromString } from '@libp2p/peer-id'
import { InvalidSignatureError } from '../errors.js'
import { TEAM_PROTOCOL } from './api.js'
import { NotMemberError, PeerMismatchError, RecordExpiredError, SequencerAliveError, StaleEpochError } from './errors.js'
import { memberOf, parseClaim, parseEntry, signRecord, verifyRecord } from './records.js'
import { isMap } from '../shape.js'
import type { TeamServiceComponents, TeamsLimits } from './api.js'
import type { Follower } from './follower.js'
import type { TeamRuntime } from './team.js'
import type { Did } from '@ioa/interconnect'
import type { Logger } from '@libp2p/interface'

export interface FailoverInit {
  components: Pick<TeamServiceComponents, 'messaging'>
  limits: TeamsLimits
  log: Logger
  follower: Follower
  /** Persist the promised epoch */
  save(team: TeamRuntime): Promise<void>
  /** This node won the claim: start sequencing the new epoch */
  becomeSequencer(team: TeamRuntime, promised: Did[]): Promise<void>
}

/** A member's answer to a claim */
export interface Promise_ {
  epoch: number
  seq: number
  head?: string
  version: number
}

/** Claim attempts before the team is reported stalled */
const MAX_ATTEMPTS = 8

export class Failover {
  private readonly team: TeamRuntime
  private readonly init: FailoverInit
  private timer?: ReturnType<typeof setInterval>
  private claiming = false
  private attempts = 0
  private suspectedAt?: number
  private backoffUntil = 0
  /** The agent this member promised its highest epoch to */
  promisedTo?: Did

  constructor (team: TeamRuntime, init: FailoverInit) {
    this.team = team
    this.init = init
  }

  start (): void {
    this.timer = setInterval(() => { this.tick() }, Math.max(50, Math.floor(this.init.limits.heartbeat / 2)))
    this.timer.unref?.()
  }

  stop (): void {
    clearInterval(this.timer)
  }

  /** Position of this member among the candidates to take over (-1: not one) */
  rank (): number {
    const { successors } = this.team.roster
    const seq = this.team.sequencer
    if (seq === this.team.agent) return 0
    const at = successors.indexOf(seq)
    const order = at < 0 ? successors : [...successors.slice(at + 1), ...successors.slice(0, at)]
    return order.filter(a => a !== seq).indexOf(this.team.agent)
  }

  private tick (): void {
    const team = this.team
    if (team.isSequencer || team.concluded || !team.hasRoster || this.claiming) {
      this.suspectedAt = undefined
      return
    }
    const now = Date.now()
    const { sequencerTimeout, claimStagger } = this.init.limits
    if (now - this.init.follower.lastHeard < sequencerTimeout) {
      this.suspectedAt = undefined
      this.attempts = 0
      return
    }
    this.suspectedAt ??= now
    const rank = this.rank()
    if (rank < 0 || now < this.suspectedAt + rank * claimStagger || now < this.backoffUntil) return
    if (this.attempts >= MAX_ATTEMPTS) return
    this.claim().catch((err: Error) => { this.init.log.error('team %s: claim failed - %e', team.id, err) })
  }

  private majority (): number {
    return Math.floor(this.team.roster.members.length / 2) + 1
  }

  /** Claim the next epoch (spec 7.2) */
  async claim (): Promise<boolean> {
    const team = this.team
    const { claimTimeout, claimStagger, requestTimeout } = this.init.limits
    this.claiming = true
    try {
      const epoch = Math.max(team.epoch, team.promised) + 1
      team.promised = epoch
      this.promisedTo = team.agent
      await this.init.save(team)
      this.init.log('team %s: %s claims epoch %d', team.id, team.agent, epoch)
      const claim = await signRecord('claim', { v: 1 as const, team: team.id, epoch, agent: team.agent, ts: Date.now() }, team.identity)
      const promises: Array<Promise_ & { agent: Did, peer?: string }> = [{ agent: team.agent, epoch, seq: team.length - 1, head: team.store.head, version: team.roster.version }]
      const others = team.roster.members.filter(m => m.agent !== team.agent)
      await Promise.all(others.map(async (m) => {
        try {
          const answer = await this.init.components.messaging.request(peerIdFromString(m.peer), TEAM_PROTOCOL, 'claim', { claim }, { timeout: claimTimeout })
          const p = parsePromise(answer)
          if (p.epoch === epoch) promises.push({ ...p, agent: m.agent, peer: m.peer })
        } catch (err: any) {
          this.init.log.trace('team %s: no promise from %s - %s', team.id, m.agent, err?.message)
        }
      }))
      if (team.epoch >= epoch || team.promised > epoch) return false
      if (promises.length < this.majority()) {
        this.attempts++
        this.backoffUntil = Date.now() + claimStagger * 2 ** this.attempts
        this.init.log('team %s: claim of epoch %d got %d of %d promises', team.id, epoch, promises.length, this.majority())
        if (this.attempts >= MAX_ATTEMPTS) team.emit({ type: 'stalled', epoch: team.epoch })
        return false
      }
      const best = promises.reduce((a, b) => b.seq > a.seq ? b : a)
      if (best.seq > team.length - 1 && best.peer != null) {
        await this.fetch(best.peer, best.seq, requestTimeout)
      }
      if (team.length - 1 < best.seq) {
        this.backoffUntil = Date.now() + claimStagger
        this.init.log.error('team %s: could not fetch entries up to %d from %s', team.id, best.seq, best.agent)
        return false
      }
      if (team.epoch >= epoch || team.promised > epoch) return false
      await this.init.becomeSequencer(team, promises.map(p => p.agent))
      this.attempts = 0
      return true
    } finally {
      this.claiming = false
    }
  }

  /** Fetch and apply the entries up to `to` from a member (spec 5.4) */
  private async fetch (peer: string, to: number, timeout: number): Promise<void> {
    const team = this.team
    while (team.length - 1 < to) {
      const from = team.length
      const answer = await this.init.components.messaging.request(peerIdFromString(peer), TEAM_PROTOCOL, 'history', { team: team.id, from, to: Math.min(to, from + 255) }, { timeout })
      if (!isMap(answer) || !Array.isArray(answer.entries) || answer.entries.length === 0) return
      for (const raw of answer.entries) {
        const entry = parseEntry(raw)
        if (entry.seq !== team.length) return
        await team.take(entry)
      }
    }
  }

  /** The member side of a claim (spec 5.8) */
  async handleClaim (raw: unknown, peer: string, sequencerHasLease: boolean): Promise<Promise_> {
    const team = this.team
    const claim = parseClaim(raw)
    const p = claim.payload
    const member = memberOf(team.roster, p.agent)
    if (member == null) throw new NotMemberError(`${p.agent} is not a member`)
    if (member.peer !== peer) throw new PeerMismatchError()
    if (!await verifyRecord('claim', claim, p.agent)) throw new InvalidSignatureError('Claim signature does not verify')
    if (Math.abs(Date.now() - p.ts) > this.init.limits.clockSkew) throw new RecordExpiredError('Claim time outside the clock skew')
    if (p.epoch <= team.epoch || p.epoch < team.promised || (p.epoch === team.promised && this.promisedTo !== p.agent)) {
      throw new StaleEpochError(`Epoch ${p.epoch} is not above the promised ${team.promised}`)
    }
    if (team.isSequencer && sequencerHasLease) throw new SequencerAliveError('This member sequences the team and holds its lease')
    if (!team.isSequencer && Date.now() - this.init.follower.lastHeard < this.init.limits.sequencerTimeout / 2) {
      throw new SequencerAliveError('This member still hears from the sequencer')
    }
    team.promised = p.epoch
    this.promisedTo = p.agent
    await this.init.save(team)
    // give the claimant a full timeout to start its epoch before suspecting again
    this.suspectedAt = undefined
    this.init.follower.retarget(p.agent)
    const answer: Promise_ = { epoch: p.epoch, seq: team.length - 1, version: team.roster.version }
    if (team.store.head != null) answer.head = team.store.head
    return answer
  }
}

function parsePromise (value: unknown): Promise_ {
  if (!isMap(value) || typeof value.epoch !== 'number' || typeof value.seq !== 'number' || typeof value.version !== 'number') {
    throw new StaleEpochError('Malformed promise')
  }
  return value as unknown as Promise_
}
