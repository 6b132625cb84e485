/**
 * One team as a node holds it (`spec/teams.md`): the log, the current roster,
 * epoch and sequencer, derived from the entries as they are applied, and the
 * team handle (`Team`) that applications use. Ordering is done by the
 * sequencer (sequencer.ts) or followed from it (follower.ts); takeover is in
 * failover.ts.
 */
import { equals as bytesEqual } from 'uint8arrays/equals'
import * as dagCbor from '@ipld/dag-cbor'
import { encodeEntry } from './encoded.js'
import { EventFanout } from './fanout.js'
import { AssignmentTracker } from './assignments/tracker.js'
import { Flow } from './flow/flow.js'
import { InvalidMessageError, InvalidRosterError, NotMemberError, RepeatedError, StaleEpochError, TeamConcludedError } from './errors.js'
import { RepetitionFilter, repetitionRule } from './repetition.js'
import { SEQUENCER_TYPES, cidOf, encodedSize, memberOf, newId, parseRoster, signRecord, verifyEncodedRecord, verifyRecord } from './records.js'
import type { EncodedEntry } from './encoded.js'
import type { FormOptions, PostOptions, Team, TeamEvent, TeamTree, TeamsLimits } from './api.js'
import type { TeamLog } from './log.js'
import type { RepetitionStats } from './repetition.js'
import type { Token } from '../auth/delegation.js'
import type { Checkpoint, Entry, Invitation, MessagePayload, MessageType, Roster, RosterPayload, TeamGoal, TeamMessage } from './records.js'
import type { FlowState } from './flow/state.js'
import type { Did, Identity } from '@ioa/interconnect'
import type { AbortOptions, Logger } from '@libp2p/interface'

/** What a team runtime needs from the service that holds it */
export interface TeamHost {
  readonly limits: TeamsLimits
  readonly log: Logger
  /** Persist the team's small state (promised epoch) */
  saveState(team: TeamRuntime): Promise<void>
  /** Post a signed message: locally when this node sequences, else to the sequencer */
  post(team: TeamRuntime, msg: TeamMessage, options: AbortOptions): Promise<{ seq: number, epoch: number }>
  /** Convener operations that need the service (invitations, sub-teams, tree) */
  admit(team: TeamRuntime, candidate: { agent: Did, peer: string }, role: string, capabilities: string[], options: AbortOptions): Promise<void>
  formSubteam(team: TeamRuntime, goal: TeamGoal, options: FormOptions): Promise<Team>
  tree(team: TeamRuntime, options: AbortOptions): Promise<TeamTree>
  /** The entry was applied (the service starts or stops sequencing on epoch changes) */
  applied(team: TeamRuntime, entry: Entry): void
}

export class TeamRuntime implements Team {
  readonly id: string
  readonly agent: Did
  readonly identity: Identity
  readonly store: TeamLog
  private readonly host: TeamHost
  private currentRoster?: Roster
  private rosterCid?: string
  private currentEpoch = 0
  private currentSequencer?: Did
  /** Highest epoch this member promised (spec 7.2) */
  promised = 0
  private isConcluded = false
  /** Highest seq acknowledged by a majority, as last heard */
  stablePoint = -1
  /** Derived events per seq, for replays */
  private readonly derived: TeamEvent[][] = []
  private readonly fanout: EventFanout<TeamEvent>
  private readonly waiters = new Map<number, Array<() => void>>()
  /** Sequencer side: set while this node sequences the team */
  sequencing = false
  /** The newest verified checkpoint */
  lastCheckpoint?: Checkpoint
  /** The invitation this member accepted (absent for the convener) */
  invitation?: Invitation
  /** The conversation's state machine over the log (spec 10) */
  readonly flowControl = new Flow()
  /** The repetition filter over this log (spec 10.7) */
  readonly repetition: RepetitionFilter
  /** The convener's own chain (`FormOptions.proofs`, leaf first) while this node runs it; assignments derive from it (spec 10.6) */
  convenerProofs?: Token[]
  /** Open and closed assignments, derived from the log (spec 10.6) */
  readonly assignments = new AssignmentTracker()

  constructor (id: string, identity: Identity, store: TeamLog, host: TeamHost) {
    this.id = id
    this.agent = identity.did
    this.identity = identity
    this.store = store
    this.host = host
    this.fanout = new EventFanout(host.limits.maxBufferedEvents)
    this.repetition = new RepetitionFilter(store)
  }

  get roster (): RosterPayload {
    if (this.currentRoster == null) throw new InvalidRosterError('The team has no roster yet')
    return this.currentRoster.payload
  }

  get hasRoster (): boolean {
    return this.currentRoster != null
  }

  get signedRoster (): Roster | undefined {
    return this.currentRoster
  }

  get rosterId (): string | undefined {
    return this.rosterCid
  }

  get epoch (): number {
    return this.currentEpoch
  }

  get sequencer (): Did {
    return this.currentSequencer ?? this.roster.successors[0]
  }

  get isSequencer (): boolean {
    return this.sequencing
  }

  get concluded (): boolean {
    return this.isConcluded
  }

  get length (): number {
    return this.store.length
  }

  get stable (): number {
    return this.stablePoint
  }

  get flow (): FlowState {
    const s = this.flowControl.state
    if (s == null) throw new InvalidRosterError('The team has no roster yet')
    return s
  }

  /** The peer id of a member, by agent */
  peerOf (agent: Did): string | undefined {
    return this.currentRoster == null ? undefined : memberOf(this.currentRoster.payload, agent)?.peer
  }

  /** Sign a message of this member */
  async sign (type: MessageType, body: Record<string, unknown>, re?: number): Promise<TeamMessage> {
    const payload: MessagePayload = { v: 1, team: this.id, from: this.agent, id: newId(), type, body, ts: Date.now() }
    if (re != null) payload.re = re
    return await signRecord('message', payload, this.identity)
  }

  /**
   * Check an entry against the state before it (spec 8.2, 3.5): epoch,
   * sender's membership and role, roster chain; and, unless the caller
   * verified it already, the sender's signature. `encoded` (the entry's one
   * encoding, encoded.ts) spares the size check and the signature check an
   * encoding of their own.
   */
  async check (entry: Entry, signatureChecked = false, encoded?: EncodedEntry): Promise<void> {
    const m = entry.msg.payload
    if (m.team !== this.id) throw new InvalidMessageError('Entry of another team')
    if (entry.seq === 0) {
      if (m.type !== 'roster' || entry.epoch !== 0) throw new InvalidRosterError('Entry 0 must be the first roster, in epoch 0')
      const roster = parseRoster(m.body.roster)
      const p = roster.payload
      if (p.version !== 1 || p.signer !== m.from || p.convener !== m.from || p.successors[0] !== m.from || p.team !== this.id) {
        throw new InvalidRosterError('The first roster must be signed by its convener, who sequences epoch 0')
      }
      if (!await verifyRecord('roster', roster, p.signer)) throw new InvalidRosterError('Roster signature does not verify')
    } else {
      const roster = this.roster
      if (!SEQUENCER_TYPES.has(m.type) && (encoded?.msg.byteLength ?? encodedSize(entry.msg)) > roster.limits.maxMessageBytes) {
        throw new InvalidMessageError(`Message larger than ${roster.limits.maxMessageBytes} bytes`)
      }
      if (m.type === 'epoch') {
        const e = m.body.epoch as number
        if (e !== entry.epoch || e <= this.currentEpoch) throw new InvalidMessageError('An epoch entry must start a higher epoch')
        if (e < this.promised) throw new StaleEpochError(`Epoch ${e} is lower than the promised ${this.promised}`)
        if (m.body.sequencer !== m.from) throw new InvalidMessageError('The epoch entry must be sent by its sequencer')
      } else if (entry.epoch !== this.currentEpoch) {
        throw new StaleEpochError(`Entry of epoch ${entry.epoch} in epoch ${this.currentEpoch}`)
      }
      if (memberOf(roster, m.from) == null) throw new NotMemberError(`${m.from} is not a member of team ${this.id}`)
      if (SEQUENCER_TYPES.has(m.type) && m.type !== 'epoch' && m.from !== this.sequencer) {
        throw new InvalidMessageError(`Only the sequencer appends ${m.type} messages`)
      }
      if (this.isConcluded) throw new TeamConcludedError()
      if (m.type === 'roster') await this.checkRosterChange(entry)
      try {
        this.flowControl.check(entry, m.type === 'roster' ? (m.body.roster as Roster).payload : roster)
      } catch (err: any) {
        this.host.log('team %s: entry %d (%s from %s) refused by the flow - %s', this.id, entry.seq, m.type, m.from, err?.code)
        throw err
      }
      // the repetition rule (spec 10.7): the sequencer refuses to order a repeat, a member refuses its entry
      this.repetition.check(entry.msg, repetitionRule(roster.limits), this.sequencing ? 'notOrdered' : 'refused')
    }
    if (!signatureChecked && !await (encoded != null ? verifyEncodedRecord('message', encoded.payload, entry.msg.sig, m.from) : verifyRecord('message', entry.msg, m.from))) {
      throw new InvalidMessageError('Message signature does not verify')
    }
  }

  private async checkRosterChange (entry: Entry): Promise<void> {
    const roster = parseRoster(entry.msg.payload.body.roster)
    const p = roster.payload
    const cur = this.roster
    if (p.version !== cur.version + 1 || p.prev !== this.rosterCid) throw new InvalidRosterError('Roster version out of order')
    if (p.signer !== entry.msg.payload.from || p.epoch !== entry.epoch) throw new InvalidRosterError('Roster not signed by the sequencer of its epoch')
    if (p.team !== cur.team || p.convener !== cur.convener || p.depth !== cur.depth ||
      !bytesEqual(dagCbor.encode(p.goal), dagCbor.encode(cur.goal))) {
      throw new InvalidRosterError('A roster change may not change the team, goal, convener or depth')
    }
    if (!await verifyRecord('roster', roster, p.signer)) throw new InvalidRosterError('Roster signature does not verify')
  }

  /** Take an entry from the sequencer or a peer's history: encode it once, check it (signature included), append and apply it */
  async take (entry: Entry): Promise<void> {
    const encoded = encodeEntry(entry)
    await this.check(entry, false, encoded)
    await this.apply(entry, encoded)
  }

  /** Append a checked entry to the log and apply its effects; returns its CID */
  async apply (entry: Entry, encoded?: EncodedEntry): Promise<string> {
    const cid = await this.store.append(entry, encoded?.bytes)
    await this.effects(entry)
    return cid
  }

  /** Re-apply the effects of stored entries after a restart */
  async replayStored (): Promise<void> {
    for (let s = 0; s < this.store.length; s++) {
      await this.effects(this.store.entry(s) as Entry, false)
    }
  }

  private async effects (entry: Entry, live = true): Promise<void> {
    const m = entry.msg.payload
    const events: TeamEvent[] = [{ type: 'message', seq: entry.seq, epoch: entry.epoch, message: entry.msg }]
    if (m.type === 'roster') {
      const roster = m.body.roster as Roster
      const before = new Set(this.currentRoster?.payload.members.map(x => x.agent) ?? [])
      const after = new Set(roster.payload.members.map(x => x.agent))
      this.currentRoster = roster
      this.rosterCid = await cidOf(roster)
      events.push({ type: 'roster', seq: entry.seq, roster: roster.payload })
      for (const a of after) if (!before.has(a)) events.push({ type: 'joined', seq: entry.seq, agent: a })
      for (const a of before) if (!after.has(a)) events.push({ type: 'left', seq: entry.seq, agent: a })
    } else if (m.type === 'epoch') {
      this.currentEpoch = m.body.epoch as number
      this.currentSequencer = m.body.sequencer as Did
      if (this.promised < this.currentEpoch) this.promised = this.currentEpoch
      events.push({ type: 'epoch', seq: entry.seq, epoch: this.currentEpoch, sequencer: this.currentSequencer })
    } else if (m.type === 'conclude') {
      this.isConcluded = true
      events.push({ type: 'concluded', seq: entry.seq, summary: m.body.summary as string, outcome: m.body.outcome as string })
    }
    events.push(...this.flowControl.apply(entry, (this.currentRoster as Roster).payload))
    if (this.currentRoster != null) events.push(...this.assignments.apply(entry, this.currentRoster.payload.convener))
    this.derived[entry.seq] = events
    if (live) {
      for (const e of events) this.emit(e)
      this.host.applied(this, entry)
    }
    const waiting = this.waiters.get(entry.seq)
    if (waiting != null) {
      this.waiters.delete(entry.seq)
      for (const w of waiting) w()
    }
  }

  /** Drop entries from `seq` on (partition repair, spec 7.3); resets the derived state */
  async truncate (seq: number): Promise<number> {
    const count = await this.store.truncate(seq)
    if (count === 0) return 0
    this.derived.length = seq
    this.currentRoster = undefined
    this.rosterCid = undefined
    this.currentEpoch = 0
    this.currentSequencer = undefined
    this.isConcluded = false
    this.flowControl.reset()
    this.assignments.reset()
    await this.replayStored()
    this.emit({ type: 'truncated', from: seq, count })
    return count
  }

  /** Tell every `events()` reader */
  emit (event: TeamEvent): void {
    this.fanout.emit(event)
  }

  /** End every reader (the team is closed on this node) */
  close (): void {
    this.fanout.close()
    for (const [, ws] of this.waiters) for (const w of ws) w()
    this.waiters.clear()
  }

  async * events (options: AbortOptions & { from?: number } = {}): AsyncGenerator<TeamEvent, void, undefined> {
    const from = options.from ?? this.store.length
    const replay: TeamEvent[] = []
    for (let s = Math.max(0, from); s < this.store.length; s++) replay.push(...(this.derived[s] ?? []))
    yield * this.fanout.listen(options, replay)
  }

  async waitFor (seq: number, options: AbortOptions = {}): Promise<void> {
    if (seq < this.store.length) return
    options.signal?.throwIfAborted()
    await new Promise<void>((resolve, reject) => {
      const list = this.waiters.get(seq) ?? []
      const done = (): void => { options.signal?.removeEventListener('abort', onAbort); resolve() }
      const onAbort = (): void => {
        // forget the waiter, so aborted waits do not pile up
        const left = (this.waiters.get(seq) ?? []).filter(w => w !== done)
        if (left.length === 0) this.waiters.delete(seq)
        else this.waiters.set(seq, left)
        reject(options.signal?.reason)
      }
      list.push(done)
      this.waiters.set(seq, list)
      options.signal?.addEventListener('abort', onAbort, { once: true })
    })
  }

  history (from = 0, to = this.store.length - 1): Entry[] {
    return this.store.slice(from, to)
  }

  async post (type: MessageType, body: Record<string, unknown>, options: PostOptions = {}): Promise<{ seq: number, epoch: number }> {
    if (this.isConcluded) throw new TeamConcludedError()
    const msg = await this.sign(type, body, options.re)
    let sent = false
    try {
      // the sender's side of the repetition filter (spec 10.7): a repeat is not sent
      if (this.hasRoster) this.repetition.check(msg, repetitionRule(this.roster.limits), 'notSent')
      sent = true
      return await this.host.post(this, msg, options)
    } catch (err) {
      if (err instanceof RepeatedError) {
        this.host.log('team %s: %s not %s - %s', this.id, type, sent ? 'ordered' : 'sent', err.message)
        this.emit({ type: 'repeated', of: err.seq, similarity: err.similarity, messageType: type, bytes: encodedSize(msg), by: sent ? 'sequencer' : 'sender' })
      }
      throw err
    }
  }

  repetitionStats (): RepetitionStats {
    return structuredClone(this.repetition.stats)
  }

  async say (text: string, options: PostOptions = {}): Promise<{ seq: number, epoch: number }> {
    return await this.post('discuss', { text }, options)
  }

  async leave (reason?: string, options: AbortOptions = {}): Promise<void> {
    await this.post('leave', reason == null ? {} : { reason }, options)
  }

  async remove (agent: Did, reason?: string, options: AbortOptions = {}): Promise<void> {
    await this.post('remove', reason == null ? { agent } : { agent, reason }, options)
  }

  async admit (candidate: { agent: Did, peer: string }, role: string, capabilities: string[], options: AbortOptions = {}): Promise<void> {
    await this.host.admit(this, candidate, role, capabilities, options)
  }

  async conclude (summary: string, outcome: 'done' | 'failed' | 'abandoned' = 'done', options: AbortOptions = {}): Promise<void> {
    await this.post('conclude', { summary, outcome }, options)
  }

  async formSubteam (goal: TeamGoal, options: FormOptions = {}): Promise<Team> {
    return await this.host.formSubteam(this, goal, options)
  }

  async tree (options: AbortOptions = {}): Promise<TeamTree> {
    return await this.host.tree(this, options)
  }
}
