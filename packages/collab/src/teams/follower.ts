/**
 * A member following its team's sequencer (`spec/teams.md` 5.2, 5.5): one
 * long-lived subscription, each entry checked and stored in order, beats and
 * checkpoints taken, acknowledgements sent (throttled). A subscription that
 * ends or fails is opened again; silence is for failover.ts to judge.
 */
import { peerIdFromString } from '@libp2p/peer-id'
import { anySignal } from 'any-signal'
import delay from 'delay'
import { InvalidTeamRecordError } from './errors.js'
import { TEAM_PROTOCOL } from './api.js'
import { isMap } from '../shape.js'
import { parseCheckpoint, parseEntry, verifyRecord } from './records.js'
import type { TeamServiceComponents, TeamsLimits } from './api.js'
import type { TeamRuntime } from './team.js'
import type { Logger } from '@libp2p/interface'

export interface FollowerInit {
  components: Pick<TeamServiceComponents, 'messaging'>
  limits: TeamsLimits
  log: Logger
  /** Where to subscribe before the roster names the sequencer (an invitee) */
  hint?: string
  /** Called after a failed subscription with its error code (the service may look for a newer epoch) */
  onFailure?: (code: string | undefined) => void
}

/** Errors that say the log must be repaired before it can follow again */
const DIVERGED = 'DIVERGED'

export class Follower {
  private readonly team: TeamRuntime
  private readonly init: FollowerInit
  private controller = new AbortController()
  /** Aborts the current subscription only (to follow another node at once) */
  private current?: AbortController
  private running = false
  private loop?: Promise<void>
  /** Last frame from the sequencer (entry or beat), ms since the epoch */
  lastHeard = Date.now()
  private lastAck = 0
  private ackTimer?: ReturnType<typeof setTimeout>
  /** Agent whose node to subscribe to next (after a promise, before its epoch entry) */
  target?: string
  /** Peer to subscribe to before the roster is known */
  hint?: string

  constructor (team: TeamRuntime, init: FollowerInit) {
    this.team = team
    this.init = init
    this.hint = init.hint
  }

  get isRunning (): boolean {
    return this.running
  }

  start (): void {
    if (this.running) return
    this.running = true
    this.controller = new AbortController()
    this.lastHeard = Date.now()
    this.loop = this.run().catch((err: Error) => { this.init.log.error('team %s: follower stopped - %e', this.team.id, err) })
  }

  async stop (): Promise<void> {
    this.running = false
    this.controller.abort()
    clearTimeout(this.ackTimer)
    await this.loop
  }

  /** Follow `agent` from now on (a member promised its epoch): drop the current subscription */
  retarget (agent: string): void {
    this.target = agent
    this.lastHeard = Date.now()
    this.current?.abort()
  }

  /** The peer id of the node to subscribe to */
  private peer (): string | undefined {
    if (!this.team.hasRoster) return this.hint
    const agent = this.target ?? this.team.sequencer
    return this.team.peerOf(agent) ?? this.hint
  }

  private async run (): Promise<void> {
    const { sequencerTimeout } = this.init.limits
    const signal = this.controller.signal
    while (this.running && !this.team.concluded && !this.team.isSequencer) {
      const peer = this.peer()
      const sequencer = this.team.hasRoster ? this.team.sequencer : undefined
      let failure: string | undefined
      if (peer != null) {
        try {
          const request: Record<string, unknown> = { team: this.team.id, agent: this.team.agent, from: this.team.length }
          if (this.team.store.head != null) request.head = this.team.store.head
          this.current = new AbortController()
          const both = anySignal([signal, this.current.signal])
          try {
            for await (const item of this.init.components.messaging.stream(peerIdFromString(peer), TEAM_PROTOCOL, 'subscribe', request, { signal: both, timeout: sequencerTimeout })) {
              this.lastHeard = Date.now()
              await this.take(item)
              if (this.team.concluded || this.team.isSequencer) break
              // a new epoch names another sequencer: follow it
              if (this.team.hasRoster && this.team.sequencer !== sequencer && this.target == null) break
            }
          } finally {
            both.clear()
          }
        } catch (err: any) {
          if (signal.aborted) return
          if (this.current?.signal.aborted === true) continue
          failure = err?.code
          if (failure === DIVERGED) {
            await this.repair()
            continue
          }
          this.init.log.trace('team %s: subscription to %s ended - %s', this.team.id, peer, err?.message)
        }
      }
      this.init.onFailure?.(failure)
      if (this.team.concluded) break
      try {
        await delay(Math.min(250, this.init.limits.heartbeat), { signal })
      } catch {
        // aborted: the loop ends on the next check
      }
    }
    this.running = false
  }

  /** Drop what is not known to be stable and follow again from there (spec 7.3) */
  private async repair (): Promise<void> {
    const keep = Math.max(1, Math.min(this.team.length, this.team.stable + 1))
    const from = keep >= this.team.length ? Math.max(1, Math.floor(this.team.length / 2)) : keep
    this.init.log('team %s: log diverges from the sequencer; truncating from %d', this.team.id, from)
    await this.team.truncate(from)
  }

  private async take (item: unknown): Promise<void> {
    if (!isMap(item)) throw new InvalidTeamRecordError('Subscription item must be a map')
    if (item.entry != null) {
      const entry = parseEntry(item.entry)
      if (entry.seq < this.team.length) return
      await this.team.take(entry)
      if (this.target != null && this.team.sequencer === this.target) this.target = undefined
      this.scheduleAck()
    } else if (isMap(item.beat)) {
      const beat = item.beat
      if (typeof beat.stable === 'number') this.team.stablePoint = Math.min(beat.stable, this.team.length - 1)
      if (beat.checkpoint != null) await this.takeCheckpoint(beat.checkpoint)
      this.scheduleAck()
    }
  }

  private async takeCheckpoint (raw: unknown): Promise<void> {
    const cp = parseCheckpoint(raw)
    const p = cp.payload
    const ours = this.team.store.cid(p.seq)
    if (p.team !== this.team.id || ours == null) return
    if (ours !== p.head) {
      this.init.log.error('team %s: checkpoint %d names another head than the entry held', this.team.id, p.seq)
      return
    }
    if (!await verifyRecord('checkpoint', cp, this.team.sequencer)) {
      this.init.log.error('team %s: checkpoint %d signature does not verify', this.team.id, p.seq)
      return
    }
    this.team.lastCheckpoint = cp
  }

  private scheduleAck (): void {
    if (this.ackTimer != null) return
    const wait = Math.max(0, this.lastAck + this.init.limits.ackInterval - Date.now())
    this.ackTimer = setTimeout(() => {
      this.ackTimer = undefined
      this.lastAck = Date.now()
      this.sendAck()
    }, wait)
    this.ackTimer.unref?.()
  }

  private sendAck (): void {
    if (!this.running || !this.team.hasRoster) return
    const peer = this.team.peerOf(this.team.sequencer)
    if (peer == null) return
    const payload = { team: this.team.id, agent: this.team.agent, epoch: this.team.epoch, seq: this.team.length - 1 }
    this.init.components.messaging.request(peerIdFromString(peer), TEAM_PROTOCOL, 'ack', payload, { timeout: this.init.limits.requestTimeout, signal: this.controller.signal })
      .catch((err: Error) => { this.init.log.trace('team %s: ack failed - %s', this.team.id, err.message) })
  }
}
