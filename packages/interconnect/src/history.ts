/**
 * What this node has seen of other agents: answered and failed deliveries
 * (and outcomes reported by the layers above, such as completed tasks), and
 * the smoothed round trip of the answered ones. The default ranker prefers
 * an agent with a good record over one it has never worked with, so a fresh
 * card from a newcomer does not push a known provider down (spec
 * `interconnect.md` 7.1). Bounded: the least recently seen agents are
 * forgotten first.
 */
import { BoundedMap } from '@ioa/transport/internal'
import type { Did } from './identity.js'

/** The record of one agent */
export interface AgentHistory {
  /** Interactions that succeeded (capped at `MAX_COUNT`) */
  successes: number
  /** Interactions that failed (capped at `MAX_COUNT`) */
  failures: number
  /** Smoothed round trip of the successful ones, in ms, when measured */
  rtt?: number
  /** Last outcome, ms since the epoch */
  at: number
}

/** An outcome reported for an agent */
export interface Outcome {
  ok: boolean
  /** Round trip, in ms (successes only) */
  rtt?: number
}

/** Counts stop growing here, so a long record can still change */
export const MAX_COUNT = 1_000

/** Weight of a new round trip in the smoothed value */
const RTT_ALPHA = 0.3

export class HistoryBook {
  private readonly records: BoundedMap<Did, AgentHistory>

  constructor (maxAgents: number) {
    this.records = new BoundedMap({ maxEntries: maxAgents })
  }

  get size (): number {
    return this.records.size
  }

  get (did: Did): AgentHistory | undefined {
    const r = this.records.peek(did)
    return r == null ? undefined : { ...r }
  }

  record (did: Did, outcome: Outcome, now = Date.now()): void {
    const r = this.records.get(did) ?? { successes: 0, failures: 0, at: now }
    r.at = now
    if (outcome.ok) {
      r.successes = Math.min(MAX_COUNT, r.successes + 1)
      if (outcome.rtt != null && Number.isFinite(outcome.rtt) && outcome.rtt >= 0) {
        r.rtt = r.rtt == null ? outcome.rtt : r.rtt + RTT_ALPHA * (outcome.rtt - r.rtt)
      }
    } else {
      r.failures = Math.min(MAX_COUNT, r.failures + 1)
    }
    this.records.set(did, r)
  }

  clear (): void {
    this.records.clear()
  }
}
