/**
 * The repetition filter of the group conversation (`spec/teams.md` 10.7).
 *
 * A `discuss` or `propose` message whose text is too similar to one of the
 * last W such messages of the log is a repeat: the sender's node does not
 * send it, the sequencer does not order it and a member does not take an
 * entry that carries it, all with `REPEATED`. The measure is the Jaccard
 * similarity of the texts' sets of word 3-shingles after a fixed
 * normalisation; the comparison with the threshold is done in integers, so
 * every member reaches the same verdict on the same log.
 */
import { InvalidTeamRecordError, RepeatedError } from './errors.js'
import { encodedSize } from './records.js'
import type { TeamLog } from './log.js'
import type { MessageType, RosterLimits, TeamMessage } from './records.js'

/** Message types whose text the filter compares */
export const REPETITION_TYPES: ReadonlySet<MessageType> = new Set<MessageType>(['discuss', 'propose'])

/** Words per shingle: a text of fewer words is never a repeat */
export const SHINGLE_WORDS = 3

/** The rule when the roster's `limits` do not name it */
export const REPETITION_DEFAULTS = Object.freeze({
  /** The last W discussion messages a text is compared with; 0 turns the filter off */
  repeatWindow: 32,
  /** Similarity at or above which a text is a repeat, per mille */
  repeatThreshold: 800
})

/** Largest window a roster may name */
export const MAX_REPEAT_WINDOW = 1024

/** The rule of a team, from its roster */
export interface RepetitionRule {
  window: number
  threshold: number
}

/** The rule the roster's limits set (absent fields: the defaults) */
export function repetitionRule (limits: RosterLimits): RepetitionRule {
  return {
    window: limits.repeatWindow ?? REPETITION_DEFAULTS.repeatWindow,
    threshold: limits.repeatThreshold ?? REPETITION_DEFAULTS.repeatThreshold
  }
}

/** The fields a convener writes into a new roster's limits: only those that differ from the defaults */
export function repetitionLimits (options: { repeatWindow: number, repeatThreshold: number }): Pick<RosterLimits, 'repeatWindow' | 'repeatThreshold'> {
  const out: Pick<RosterLimits, 'repeatWindow' | 'repeatThreshold'> = {}
  if (options.repeatWindow !== REPETITION_DEFAULTS.repeatWindow) out.repeatWindow = options.repeatWindow
  if (options.repeatThreshold !== REPETITION_DEFAULTS.repeatThreshold) out.repeatThreshold = options.repeatThreshold
  return out
}

/** Bounds of the filter's `TeamsInit` options beyond the common ones (the roster's field bounds) */
export function checkRepetitionOption (key: string, value: number): void {
  if (key === 'repeatWindow' && value > MAX_REPEAT_WINDOW) throw new InvalidTeamRecordError(`Team option repeatWindow must be an integer from 0 to ${MAX_REPEAT_WINDOW}`)
  if (key === 'repeatThreshold' && value > 1000) throw new InvalidTeamRecordError('Team option repeatThreshold must be an integer from 1 to 1000')
}

/** The words of a text: NFKC, lower case, maximal runs of letters, marks and digits */
export function words (text: string): string[] {
  return text.normalize('NFKC').toLowerCase().match(/[\p{L}\p{M}\p{N}]+/gu) ?? []
}

/** The set of word 3-shingles of a text (each: 3 consecutive words joined by one space) */
export function shingles (text: string): Set<string> {
  const w = words(text)
  const out = new Set<string>()
  for (let i = 0; i + SHINGLE_WORDS <= w.length; i++) out.add(w[i] + ' ' + w[i + 1] + ' ' + w[i + 2])
  return out
}

/** Shared and total shingles of two sets (Jaccard similarity = shared / union; 0 / 0 when both are empty) */
export function overlap (a: ReadonlySet<string>, b: ReadonlySet<string>): { shared: number, union: number } {
  const [small, large] = a.size <= b.size ? [a, b] : [b, a]
  let shared = 0
  for (const s of small) if (large.has(s)) shared++
  return { shared, union: a.size + b.size - shared }
}

/** Jaccard similarity of two texts, rounded down to 3 decimals (what the spec's vectors and the notices show) */
export function similarity (a: string, b: string): number {
  const { shared, union } = overlap(shingles(a), shingles(b))
  return union === 0 ? 0 : Math.floor(shared * 1000 / union) / 1000
}

/** Whether an overlap is a repeat under a threshold (per mille), in integers */
export function isRepeat (o: { shared: number, union: number }, threshold: number): boolean {
  return o.shared > 0 && o.shared * 1000 >= threshold * o.union
}

/**
 * The overlap of two sets when it is a repeat under `threshold`, else
 * undefined; the same verdict as `isRepeat(overlap(a, b))`, but it stops as
 * soon as the threshold cannot be reached: a repeat needs
 * shared ≥ threshold × (|a| + |b|) / (1000 + threshold)
 */
export function repeatOverlap (a: ReadonlySet<string>, b: ReadonlySet<string>, threshold: number): { shared: number, union: number } | undefined {
  const [small, large] = a.size <= b.size ? [a, b] : [b, a]
  const needed = Math.max(1, Math.ceil(threshold * (a.size + b.size) / (1000 + threshold)))
  // the misses the smaller set can afford
  let spare = small.size - needed
  if (spare < 0) return undefined
  let shared = 0
  for (const s of small) {
    if (large.has(s)) shared++
    else if (--spare < 0) return undefined
  }
  const o = { shared, union: a.size + b.size - shared }
  return isRepeat(o, threshold) ? o : undefined
}

/** The earlier message a text repeats */
export interface RepetitionMatch {
  /** Its seq */
  seq: number
  /** The similarity, rounded down to 3 decimals */
  similarity: number
}

/** Messages and encoded bytes */
export interface RepetitionCount {
  messages: number
  bytes: number
}

/** What the filter saved on this node for one team */
export interface RepetitionStats {
  /** Posts of this node's member that it did not send */
  notSent: RepetitionCount
  /** Posts this node refused to order as the sequencer (senders that did not filter) */
  notOrdered: RepetitionCount
  /** Entries this node's member refused (a sequencer that did not filter) */
  refused: RepetitionCount
}

/** What the filter kept out of a team's log, summed over its members' nodes */
export interface RepetitionSaved {
  /** Posts that never entered the log: not sent by their node, or not ordered by the sequencer */
  messages: number
  /** Their encoded bytes */
  bytes: number
  /** About the bytes they would have cost on the wire: the post to the sequencer and the entry to each of the other members */
  wireBytes: number
}

/**
 * Sum the `repetitionStats()` of every member's node of a team of `members`
 * members (for benchmarks and reports). Entries members refused are not
 * counted: they reached the wire already (from a sequencer that did not filter).
 */
export function repetitionSaved (stats: RepetitionStats[], members: number): RepetitionSaved {
  let messages = 0
  let bytes = 0
  for (const s of stats) {
    messages += s.notSent.messages + s.notOrdered.messages
    bytes += s.notSent.bytes + s.notOrdered.bytes
  }
  return { messages, bytes, wireBytes: bytes * Math.max(1, members) }
}

/**
 * The filter of one team: the seqs of the discussion entries of the log (an
 * index kept in step with it, rebuilt after a truncation) and the shingles
 * of the last ones, cached by seq and message id
 */
export class RepetitionFilter {
  private readonly log: TeamLog
  /** Seqs of discussion entries, ascending, the last MAX_REPEAT_WINDOW */
  private seqs: number[] = []
  /** Entries looked at, and the id of the last one (to notice a truncation) */
  private scanned = 0
  private lastId?: string
  private readonly cache = new Map<number, { id: string, set: Set<string> }>()
  private lastRefused?: string
  readonly stats: RepetitionStats = { notSent: count(), notOrdered: count(), refused: count() }

  constructor (log: TeamLog) {
    this.log = log
  }

  /** The earlier entry that the text of a message of `type` repeats, under `rule`, at the end of the log */
  find (type: MessageType, body: Record<string, unknown>, rule: RepetitionRule): RepetitionMatch | undefined {
    if (rule.window === 0 || !REPETITION_TYPES.has(type) || typeof body.text !== 'string') return undefined
    const mine = shingles(body.text)
    if (mine.size === 0) return undefined
    const window = this.window(rule.window)
    let best: { seq: number, shared: number, union: number } | undefined
    for (const seq of window) {
      const o = repeatOverlap(mine, this.shinglesOf(seq), rule.threshold)
      if (o == null) continue
      // the most similar; on a tie the earliest
      if (best == null || o.shared * best.union > best.shared * o.union) best = { seq, ...o }
    }
    this.prune(window)
    return best == null ? undefined : { seq: best.seq, similarity: Math.floor(best.shared * 1000 / best.union) / 1000 }
  }

  /** Throw `REPEATED` when the message repeats the log, counting it under `kind` */
  check (msg: TeamMessage, rule: RepetitionRule, kind: keyof RepetitionStats): void {
    const m = msg.payload
    const match = this.find(m.type, m.body, rule)
    if (match == null) return
    // an entry refused again on a retried subscription is counted once
    if (kind !== 'refused' || this.lastRefused !== m.id) this.record(kind, encodedSize(msg))
    if (kind === 'refused') this.lastRefused = m.id
    throw RepeatedError.of(match.seq, match.similarity)
  }

  /** Count a message the filter kept off the wire */
  record (kind: keyof RepetitionStats, bytes: number): void {
    this.stats[kind].messages++
    this.stats[kind].bytes += bytes
  }

  /** The seqs of the last `n` discussion entries */
  private window (n: number): number[] {
    const length = this.log.length
    if (this.scanned > length || (this.scanned > 0 && this.log.entry(this.scanned - 1)?.msg.payload.id !== this.lastId)) {
      this.seqs = []
      this.scanned = 0
      this.cache.clear()
    }
    for (; this.scanned < length; this.scanned++) {
      const e = this.log.entry(this.scanned)
      if (e != null && REPETITION_TYPES.has(e.msg.payload.type)) this.seqs.push(this.scanned)
    }
    if (this.seqs.length > MAX_REPEAT_WINDOW * 2) this.seqs = this.seqs.slice(-MAX_REPEAT_WINDOW)
    this.lastId = length > 0 ? this.log.entry(length - 1)?.msg.payload.id : undefined
    return this.seqs.slice(-n)
  }

  private shinglesOf (seq: number): Set<string> {
    const m = this.log.entry(seq)?.msg.payload
    if (m == null) return new Set()
    const hit = this.cache.get(seq)
    if (hit != null && hit.id === m.id) return hit.set
    const set = typeof m.body.text === 'string' ? shingles(m.body.text) : new Set<string>()
    this.cache.set(seq, { id: m.id, set })
    return set
  }

  /** Forget cached shingles that left the window */
  private prune (window: number[]): void {
    if (this.cache.size <= window.length + 64) return
    const keep = new Set(window)
    for (const seq of this.cache.keys()) if (!keep.has(seq)) this.cache.delete(seq)
  }
}

function count (): RepetitionCount {
  return { messages: 0, bytes: 0 }
}
