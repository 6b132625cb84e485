/**
 * The flow state of one team as its log is applied: `check` runs the
 * machine on an entry (and keeps the result), `apply` takes it and says
 * which `state` and `turn` events the entry caused.
 */
import { initialFlow, nextFlow } from './state.js'
import type { FlowPhase, FlowState } from './state.js'
import type { TeamEvent } from '../api.js'
import type { Entry, RosterPayload } from '../records.js'

export class Flow {
  private current?: FlowState
  private checked?: { entry: Entry, state: FlowState }

  /** The state after the last applied entry (none before entry 0) */
  get state (): FlowState | undefined {
    return this.current
  }

  /** Throws the typed error of a refused entry (spec 10.2); `roster` is the one in force after it */
  check (entry: Entry, roster: RosterPayload): void {
    if (this.current == null || entry.seq === 0) return
    this.checked = { entry, state: nextFlow(this.current, entry, roster) }
  }

  /** Take an entry that passed the entry checks; returns the events it causes */
  apply (entry: Entry, roster: RosterPayload): TeamEvent[] {
    if (entry.seq === 0 || this.current == null) {
      this.current = initialFlow(roster)
      this.checked = undefined
      return []
    }
    const before = this.current
    const after = this.checked?.entry === entry ? this.checked.state : nextFlow(before, entry, roster)
    this.checked = undefined
    this.current = after
    const events: TeamEvent[] = []
    // concluding is told by the `concluded` event
    if (after.phase !== before.phase && after.phase !== 'concluded') {
      events.push({ type: 'state', seq: entry.seq, state: after.phase as Exclude<FlowPhase, 'concluded'>, previous: before.phase })
    }
    const m = entry.msg.payload
    if (m.type === 'turn') {
      const b = m.body
      const e: TeamEvent = { type: 'turn', seq: entry.seq, turn: after.turn, speaker: b.speaker as string, policy: b.policy as string }
      if (typeof b.reason === 'string') e.reason = b.reason
      if (typeof b.fallback === 'string') e.fallback = b.fallback
      events.push(e)
    }
    return events
  }

  /** Forget the state (the log is replayed from entry 0) */
  reset (): void {
    this.current = undefined
    this.checked = undefined
  }
}
