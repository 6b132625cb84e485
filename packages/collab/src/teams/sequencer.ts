/**
 * The sequencer of a team's epoch (`spec/teams.md` 5.2–5.6, 7.1): it orders
 * posts into entries, streams them to the subscribed members, counts their
 * acknowledgements (stable point and lease), beats, signs checkpoints and
 * appends roster changes (leave, remove, admit, revocation, silence).
 */
import { PayloadTooLargeError, TooManyRequestsError } from '@ioa/transport'
import { TokenBuckets } from '@ioa/transport/internal'
import { Queue } from '@libp2p/utils'
import { DeadlineExceededError, InvalidSignatureError } from '../errors.js'
import {
  DivergedError, InvalidMessageError, NotMemberError, NotSequencerError, PeerMismatchError, RecordExpiredError,
  StaleEpochError, TeamConcludedError
} from './errors.js'
import { encodeEntry } from './encoded.js'
import { SEQUENCER_TYPES, encodedSize, memberOf, parseAcceptance, parseMessage, signRecord, verifyRecord } from './records.js'
import { FlowDriver } from './flow/driver.js'
import type { TeamsLimits } from './api.js'
import type { SpeakerPolicy } from './flow/policy.js'
import type { Checkpoint, Entry, MessageType, Roster, RosterMember, RosterPayload, TeamMessage } from './records.js'
import type { TeamRuntime } from './team.js'
import type { Did } from '@ioa/interconnect'
import type { Logger } from '@libp2p/interface'

export interface SequencerInit {
  limits: TeamsLimits
  log: Logger
  /** Revocation check of member chains (`issuers`: who may revoke, when known) */
  isRevoked?: (cid: string, issuers?: readonly Did[]) => boolean | Promise<boolean>
  /** Members that promised the epoch (or accepted the formation): counted as acknowledged at the start */
  promised: Did[]
  /** The epoch this sequencer orders: the team's current one, or the promised one it starts with `startEpoch` */
  epoch: number
  /** Speaker policies that are not rules (spec 10.4), by name */
  policy?: (name: string) => SpeakerPolicy | undefined
  /** Longest wait for such a policy, ms @default 10_000 */
  decisionTimeout?: number
}

/** A beat on a subscription (spec 5.2) */
export interface Beat {
  epoch: number
  seq: number
  stable: number
  checkpoint?: Checkpoint
}

interface Subscription {
  agent: Did
  /** Wake the stream: new entries or a beat */
  wake: () => void
  pendingBeat?: Beat
  lastSent: number
  checkpointSent: number
  ended: boolean
}

export class Sequencer {
  private readonly team: TeamRuntime
  private readonly init: SequencerInit
  private readonly queue = new Queue<unknown>({ concurrency: 1 })
  private readonly subs = new Map<Did, Subscription>()
  private readonly acks = new Map<Did, { seq: number, at: number }>()
  /** Seq of the roster entry that removed an agent: it may still follow up to there (bounded by the members ever admitted) */
  private readonly removedAt = new Map<Did, number>()
  private readonly buckets: TokenBuckets
  private checkpoint?: Checkpoint
  private sinceCheckpoint = 0
  private timer?: ReturnType<typeof setInterval>
  private revocationTimer?: ReturnType<typeof setInterval>
  private stopped = false
  private leaseLostAt?: number
  private concluding = false
  /** When this epoch's sequencing began: a member never heard from is silent since then */
  private readonly startedAt = Date.now()
  /** Flow control: max_turns, policy decisions, silent speakers (spec 10) */
  private readonly flow: FlowDriver

  constructor (team: TeamRuntime, init: SequencerInit) {
    this.team = team
    this.init = init
    const l = team.roster.limits
    this.buckets = new TokenBuckets(l.burst, Math.ceil(l.burst / l.rate * 1000), 1024)
    const now = Date.now()
    for (const a of init.promised) this.acks.set(a, { seq: -1, at: now })
    this.flow = new FlowDriver(team, {
      log: init.log,
      policy: init.policy ?? (() => undefined),
      decisionTimeout: init.decisionTimeout ?? 10_000,
      appendOwn: async (type, body) => await this.appendOwn(type, body),
      enqueue: (job, what) => { this.enqueue(job, what) },
      stopped: () => this.stopped
    })
  }

  get epoch (): number {
    return this.init.epoch
  }

  start (): void {
    const { heartbeat, revocationCheckInterval } = this.init.limits
    this.timer = setInterval(() => { this.tick() }, heartbeat)
    this.timer.unref?.()
    if (this.init.isRevoked != null) {
      this.revocationTimer = setInterval(() => { this.checkRevocations() }, revocationCheckInterval)
      this.revocationTimer.unref?.()
    }
  }

  stop (): void {
    if (this.stopped) return
    this.stopped = true
    this.flow.stop()
    clearInterval(this.timer)
    clearInterval(this.revocationTimer)
    for (const s of this.subs.values()) { s.ended = true; s.wake() }
    this.subs.clear()
    this.queue.clear()
  }

  /** Majority of the current roster */
  private majority (): number {
    return Math.floor(this.team.roster.members.length / 2) + 1
  }

  /** Does a majority (counting this node) acknowledge within the lease? (spec 7.1) */
  hasLease (now = Date.now()): boolean {
    const { sequencerTimeout } = this.init.limits
    let count = 0
    for (const m of this.team.roster.members) {
      if (m.agent === this.team.agent) { count++; continue }
      const a = this.acks.get(m.agent)
      if (a != null && now - a.at <= sequencerTimeout) count++
    }
    return count >= this.majority()
  }

  /** When the lease was lost, if it is lost now */
  get leaseLost (): number | undefined {
    return this.leaseLostAt
  }

  /** Highest seq stored by a majority (spec 5.5) */
  stable (): number {
    const seqs = this.team.roster.members.map(m => m.agent === this.team.agent ? this.team.length - 1 : (this.acks.get(m.agent)?.seq ?? -1))
    seqs.sort((a, b) => b - a)
    return seqs[this.majority() - 1] ?? -1
  }

  private tick (): void {
    if (this.stopped) return
    const now = Date.now()
    const { heartbeat, memberTimeout } = this.init.limits
    if (this.hasLease(now)) {
      this.leaseLostAt = undefined
    } else if (this.leaseLostAt == null) {
      this.leaseLostAt = now
      this.init.log('team %s: lease lost in epoch %d (no majority acknowledges)', this.team.id, this.epoch)
    }
    this.team.stablePoint = this.stable()
    const beat: Beat = { epoch: this.epoch, seq: this.team.length - 1, stable: this.team.stablePoint }
    for (const s of this.subs.values()) {
      if (now - s.lastSent >= heartbeat * 0.9) {
        s.pendingBeat = beat
        s.wake()
      }
    }
    // at the deadline the sequencer ends the conversation (spec 8.2, conclude)
    if (now > this.team.roster.deadline && !this.team.concluded && !this.concluding) {
      this.concluding = true
      this.enqueue(async () => { if (!this.team.concluded) await this.appendOwn('conclude', { summary: 'the deadline passed', outcome: 'abandoned' }) }, 'conclude at the deadline')
      return
    }
    if (this.leaseLostAt == null) this.flow.tick(now)
    // members that stopped acknowledging are removed (spec 4.3)
    const silent = this.team.roster.members.filter(m => m.agent !== this.team.agent && now - (this.acks.get(m.agent)?.at ?? this.startedAt) > memberTimeout)
    if (silent.length > 0 && !this.team.concluded && this.leaseLostAt == null) {
      for (const m of silent) this.acks.set(m.agent, { seq: -1, at: now })
      this.enqueue(async () => { await this.changeRoster({ remove: silent.map(m => m.agent) }) }, 'remove silent members')
    }
  }

  private checkRevocations (): void {
    const isRevoked = this.init.isRevoked
    if (isRevoked == null || this.stopped || this.team.concluded) return
    this.enqueue(async () => {
      const revoked: Did[] = []
      const { convener } = this.team.roster
      for (const m of this.team.roster.members) {
        // the member's own token was issued by the convener; the tokens it derives from, by principals the roster does not name
        for (const [i, c] of m.chain.entries()) {
          if (await isRevoked(c, i === 0 && m.agent !== convener ? [convener] : undefined)) { revoked.push(m.agent); break }
        }
      }
      if (revoked.length > 0) {
        this.init.log('team %s: removing %d member(s) whose chain is revoked', this.team.id, revoked.length)
        await this.changeRoster({ remove: revoked })
      }
    }, 'revocation check')
  }

  private enqueue (job: () => Promise<void>, what: string): void {
    this.queue.add(job).catch((err: Error) => { this.init.log.error('team %s: %s failed - %e', this.team.id, what, err) })
  }

  /**
   * Order a message (spec 5.3); `peer` is the poster's peer id (absent for a
   * post of this node's own member). A message id already in the log gets
   * its position again (idempotent retry).
   */
  async post (raw: unknown, peer?: string): Promise<{ seq: number, epoch: number }> {
    if (this.stopped) throw new NotSequencerError()
    if (this.leaseLostAt != null && !this.hasLease()) throw new NotSequencerError('The sequencer lost its lease')
    const roster = this.team.roster
    if (encodedSize(raw) > roster.limits.maxMessageBytes) {
      throw new PayloadTooLargeError(`Message larger than ${roster.limits.maxMessageBytes} bytes`)
    }
    const msg = parseMessage(raw)
    const m = msg.payload
    if (m.team !== this.team.id) throw new InvalidMessageError('Message of another team')
    const member = memberOf(roster, m.from)
    if (member == null) throw new NotMemberError(`${m.from} is not a member`)
    if (peer != null && member.peer !== peer) throw new PeerMismatchError()
    const known = this.team.store.seqOf(m.id)
    if (known != null) return { seq: known, epoch: (this.team.store.entry(known) as Entry).epoch }
    if (SEQUENCER_TYPES.has(m.type)) throw new InvalidMessageError(`Only the sequencer appends ${m.type} messages`)
    this.checkRole(m.type, m.from, roster)
    if (peer != null && !await verifyRecord('message', msg, m.from)) throw new InvalidSignatureError('Message signature does not verify')
    const now = Date.now()
    if (Math.abs(now - m.ts) > this.init.limits.clockSkew) throw new RecordExpiredError('Message time outside the clock skew')
    if (this.team.concluded) throw new TeamConcludedError()
    if (now > roster.deadline && m.type !== 'conclude') throw new DeadlineExceededError('The team is past its deadline')
    if (!this.buckets.take(m.from, now)) throw new TooManyRequestsError(`${m.from} posts faster than ${roster.limits.rate} messages per second`)
    return await this.queue.add(async () => {
      const again = this.team.store.seqOf(m.id)
      if (again != null) return { seq: again, epoch: this.epoch }
      const seq = await this.append(msg)
      await this.after(msg)
      await this.flow.step()
      return { seq, epoch: this.epoch }
    }) as { seq: number, epoch: number }
  }

  private checkRole (type: MessageType, from: Did, roster: RosterPayload): void {
    if ((type === 'remove') && from !== roster.convener) throw new InvalidMessageError('Only the convener removes members')
    if (type === 'admit' && from !== roster.convener && from !== this.team.agent) throw new InvalidMessageError('Only the convener or the sequencer admits members')
    if (type === 'conclude' && from !== roster.convener && from !== this.team.agent) throw new InvalidMessageError('Only the convener concludes the team')
  }

  /** Append a checked message as the next entry and wake the subscribers */
  private async append (msg: TeamMessage): Promise<number> {
    if (this.stopped) throw new NotSequencerError()
    const entry: Entry = { seq: this.team.length, epoch: this.epoch, msg }
    const head = this.team.store.head
    if (head != null) entry.prev = head
    // one encoding serves the size check, the history budget (HISTORY_FULL) and the CID
    const encoded = encodeEntry(entry)
    await this.team.check(entry, true, encoded)
    await this.team.apply(entry, encoded)
    this.sinceCheckpoint++
    const t = msg.payload.type
    if (this.sinceCheckpoint >= this.init.limits.checkpointEvery || t === 'roster' || t === 'conclude' || t === 'epoch') {
      await this.signCheckpoint()
    }
    for (const s of this.subs.values()) s.wake()
    return entry.seq
  }

  /** Append a message this sequencer authors (roster, epoch, vote-result) */
  async appendOwn (type: MessageType, body: Record<string, unknown>): Promise<number> {
    const msg = await this.team.sign(type, body)
    return await this.append(msg)
  }

  /** Start the epoch: its first entry (spec 7.2) */
  async startEpoch (promised: Did[]): Promise<void> {
    await this.queue.add(async () => {
      await this.appendOwn('epoch', { epoch: this.epoch, sequencer: this.team.agent, promised })
      // the machine's state came with the log: a decision the old sequencer owed is made now (spec 10.5)
      await this.flow.step()
    })
  }

  private async signCheckpoint (): Promise<void> {
    this.sinceCheckpoint = 0
    const seq = this.team.length - 1
    this.checkpoint = await signRecord('checkpoint', { v: 1, team: this.team.id, epoch: this.epoch, seq, head: this.team.store.head as string }, this.team.identity)
  }

  /** The newest checkpoint this sequencer signed */
  get lastCheckpoint (): Checkpoint | undefined {
    return this.checkpoint
  }

  /** Roster changes that follow a message (spec 4) */
  private async after (msg: TeamMessage): Promise<void> {
    const m = msg.payload
    if (m.type === 'leave') await this.changeRoster({ remove: [m.from] })
    else if (m.type === 'remove') await this.changeRoster({ remove: [m.body.agent as Did] })
    else if (m.type === 'admit') {
      const accept = parseAcceptance(m.body.accept)
      if (!await verifyRecord('accept', accept, accept.payload.from) || accept.payload.team !== this.team.id) {
        this.init.log.error('team %s: admit of %s carries an invalid acceptance; ignored', this.team.id, accept.payload.from)
        return
      }
      await this.changeRoster({
        add: [{ agent: accept.payload.from, peer: accept.payload.peer, role: m.body.role as string, token: m.body.token as string, chain: m.body.chain as string[] }]
      })
    }
  }

  /** Append the next roster version (spec 3.5, 4) */
  async changeRoster (change: { remove?: Did[], add?: RosterMember[] }): Promise<void> {
    const cur = this.team.roster
    const remove = new Set(change.remove ?? [])
    let members = cur.members.filter(m => !remove.has(m.agent))
    const successors = cur.successors.filter(a => !remove.has(a))
    for (const add of change.add ?? []) {
      if (members.some(m => m.agent === add.agent)) continue
      if (members.length >= this.init.limits.maxMembers) {
        this.init.log('team %s: cannot admit %s, the team is full', this.team.id, add.agent)
        continue
      }
      members = [...members, add]
      successors.push(add.agent)
    }
    if (members.length === cur.members.length && members.every((m, i) => m.agent === cur.members[i].agent)) return
    if (members.length === 0) {
      await this.appendOwn('conclude', { summary: 'every member left', outcome: 'abandoned' })
      return
    }
    members.sort((a, b) => a.agent < b.agent ? -1 : 1)
    const payload: RosterPayload = {
      ...cur, version: cur.version + 1, epoch: this.epoch, members, successors, prev: this.team.rosterId as string, signer: this.team.agent, ts: Date.now()
    }
    const roster: Roster = await signRecord('roster', payload, this.team.identity)
    const at = await this.appendOwn('roster', { roster })
    for (const a of remove) {
      // a removed member's subscription ends after the entry that removes it (subscribe below)
      if (this.removedAt.size >= 1024) this.removedAt.delete(this.removedAt.keys().next().value as Did)
      this.removedAt.set(a, at)
      this.acks.delete(a)
    }
    for (const add of change.add ?? []) this.acks.set(add.agent, { seq: -1, at: Date.now() })
    if (remove.has(this.team.agent)) {
      // the sequencer left: it stops; the next successor takes over when the members suspect it
      this.stop()
    }
    // a speaker that left is replaced by a decision
    await this.flow.step()
  }

  /** Record a member's acknowledgement (spec 5.5) */
  ack (payload: { agent: Did, epoch: number, seq: number }, peer: string): void {
    const member = memberOf(this.team.roster, payload.agent)
    if (member == null) throw new NotMemberError()
    if (member.peer !== peer) throw new PeerMismatchError()
    if (payload.epoch !== this.epoch) throw new StaleEpochError(`Acknowledgement for epoch ${payload.epoch} in epoch ${this.epoch}`)
    this.acks.set(payload.agent, { seq: Math.min(payload.seq, this.team.length - 1), at: Date.now() })
  }

  /**
   * A member's subscription (spec 5.2): the entries from `from` in order,
   * then live entries and beats, until the epoch ends on this node
   */
  async * subscribe (payload: { agent: Did, from: number, head?: string }, peer: string, signal: AbortSignal): AsyncGenerator<unknown, void, undefined> {
    if (this.stopped) throw new NotSequencerError()
    const removed = this.removedAt.get(payload.agent)
    const member = memberOf(this.team.roster, payload.agent) ?? (removed != null && payload.from <= removed ? this.formerMember(payload.agent, removed) : undefined)
    if (member == null) throw new NotMemberError(`${payload.agent} is not a member`)
    if (member.peer !== peer) throw new PeerMismatchError()
    const from = payload.from
    if (from > this.team.length || (from > 0 && payload.head != null && this.team.store.cid(from - 1) !== payload.head)) {
      throw new DivergedError(`The log of ${payload.agent} diverges before ${from}`)
    }
    const old = this.subs.get(payload.agent)
    if (old != null) { old.ended = true; old.wake() }
    let wakeUp: (() => void) | undefined
    const sub: Subscription = {
      agent: payload.agent,
      wake: () => { const w = wakeUp; wakeUp = undefined; w?.() },
      lastSent: Date.now(),
      checkpointSent: -1,
      ended: false
    }
    this.subs.set(payload.agent, sub)
    const onAbort = (): void => { sub.ended = true; sub.wake() }
    signal.addEventListener('abort', onAbort, { once: true })
    let next = from
    try {
      while (!sub.ended && !this.stopped) {
        if (next < this.team.length) {
          sub.lastSent = Date.now()
          yield { entry: this.team.store.entry(next++) }
          const gone = this.removedAt.get(payload.agent)
          if (gone != null && next > gone && memberOf(this.team.roster, payload.agent) == null) return
          continue
        }
        if (sub.pendingBeat != null) {
          const beat = sub.pendingBeat
          sub.pendingBeat = undefined
          if (this.checkpoint != null && this.checkpoint.payload.seq > sub.checkpointSent) {
            beat.checkpoint = this.checkpoint
            sub.checkpointSent = this.checkpoint.payload.seq
          }
          sub.lastSent = Date.now()
          yield { beat }
          continue
        }
        await new Promise<void>(resolve => { wakeUp = resolve })
      }
    } finally {
      signal.removeEventListener('abort', onAbort)
      if (this.subs.get(payload.agent) === sub) this.subs.delete(payload.agent)
    }
  }

  /** The member record of an agent in the roster that the entry `removedBy` replaced */
  private formerMember (agent: Did, removedBy: number): RosterMember | undefined {
    for (let s = removedBy - 1; s >= 0; s--) {
      const m = (this.team.store.entry(s) as Entry).msg.payload
      if (m.type === 'roster') return memberOf((m.body.roster as Roster).payload, agent)
    }
    return undefined
  }
}
