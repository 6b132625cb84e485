/**
 * Ranking and filtering of discovered agents.
 */
import type { AgentCard, Skill } from './card.js'
import type { AgentHistory } from './history.js'

/** What a lookup asks for */
export interface DiscoveryQuery {
  /** A capability name or prefix, e.g. `travel.hotel` */
  capability: string
  /** Every tag must be on one of the matching skills */
  tags?: string[]
  /** Only agents of this domain */
  domain?: string
  /**
   * A JSON Schema of the input the caller can provide: a skill matches only if
   * every property its input schema requires is provided (with the same
   * `type` where both name one)
   */
  input?: Record<string, unknown>
  /**
   * A JSON Schema of the output the caller needs: a skill matches only if its
   * output schema provides every property this one requires
   */
  output?: Record<string, unknown>
}

/** What the ranker sees about a candidate */
export interface RankInput {
  card: AgentCard
  /** Skills of the card that match the query */
  skills: Skill[]
  /** Round-trip time to the serving peer, when measured, in ms */
  latency?: number
  /** Whether the serving peer answered recently */
  alive: boolean
  /** Hosted on the asking node */
  local: boolean
  /** What the asking node has seen of this agent (answered and failed calls), when anything */
  history?: Pick<AgentHistory, 'successes' | 'failures' | 'rtt'>
}

/** A pluggable scoring function: higher is better */
export interface Ranker {
  score(candidate: RankInput, query: DiscoveryQuery, now: number): number
}

export interface DefaultRankerInit {
  /** Weight of match quality (exact name beats a deeper prefix match) @default 0.4 */
  matchWeight?: number
  /** Weight of the agent's record with the asking node (answered vs failed calls) @default 0.3 */
  historyWeight?: number
  /** Weight of latency (the agent's smoothed round trip when known, else the measured one) @default 0.2 */
  latencyWeight?: number
  /** Weight of card freshness; keep it below half of `historyWeight` so freshness alone never beats a known agent @default 0.1 */
  freshnessWeight?: number
  /** Latency at which the latency score halves, in ms @default 50 */
  latencyHalf?: number
  /** Card age at which the freshness score halves, in ms @default 600_000 */
  freshnessHalf?: number
}

/** The record score: 1 for a local agent, 0 for an agent never seen, else s / (s + f + 1) */
export function historyScore (c: Pick<RankInput, 'local' | 'history'>): number {
  if (c.local) return 1
  const h = c.history
  if (h == null) return 0
  return h.successes / (h.successes + h.failures + 1)
}

/**
 * The default ranker: a weighted mean of match quality, the agent's record
 * with this node, latency and card freshness, in [0, 1]; agents whose peer
 * is not alive score 0. With the default weights an agent that answered
 * this node before (record score at least 0.5) is never outranked by a
 * newcomer of equal match and latency through a fresher card: 0.3 * 0.5 >
 * 0.1, the most freshness can add (spec `interconnect.md` 7.1).
 */
export function defaultRanker (init: DefaultRankerInit = {}): Ranker {
  const wm = init.matchWeight ?? 0.4
  const wh = init.historyWeight ?? 0.3
  const wl = init.latencyWeight ?? 0.2
  const wf = init.freshnessWeight ?? 0.1
  const lh = init.latencyHalf ?? 50
  const fh = init.freshnessHalf ?? 600_000
  const total = wm + wh + wl + wf

  return {
    score (c, query, now) {
      if (!c.alive) return 0
      const q = query.capability
      let match = 0
      for (const s of c.skills) {
        if (s.id !== q && !s.id.startsWith(q + '.')) continue
        // exact: 1; a skill below the prefix scores less the deeper it lies
        const extra = s.id === q ? 0 : s.id.split('.').length - q.split('.').length
        match = Math.max(match, 1 / (1 + extra))
      }
      // a card issued after `now` (within the clock skew) counts as issued now
      const age = Math.max(0, now - c.card.issuedAt)
      const freshness = fh / (fh + age)
      const rtt = c.history?.rtt ?? c.latency
      const latency = c.local ? 1 : rtt == null ? 0.5 : lh / (lh + rtt)
      return (wm * match + wh * historyScore(c) + wl * latency + wf * freshness) / total
    }
  }
}

function typeOf (schema: unknown): string | undefined {
  if (schema != null && typeof schema === 'object') {
    const t = (schema as { type?: unknown }).type
    return typeof t === 'string' ? t : undefined
  }
  return undefined
}

function properties (schema: Record<string, unknown> | undefined): Record<string, unknown> {
  const p = schema?.properties
  return p != null && typeof p === 'object' && !Array.isArray(p) ? p as Record<string, unknown> : {}
}

function required (schema: Record<string, unknown> | undefined): string[] {
  const r = schema?.required
  return Array.isArray(r) ? r.filter((x): x is string => typeof x === 'string') : []
}

/**
 * Does `provider` supply everything `consumer` requires? Every property in
 * `consumer.required` must be a property of `provider`, and where both name a
 * `type` for it, the types must agree. Schemas without object properties
 * compare by their top-level `type`.
 */
export function schemaSatisfies (provider: Record<string, unknown> | undefined, consumer: Record<string, unknown> | undefined): boolean {
  if (consumer == null) return true
  if (provider == null) return required(consumer).length === 0 && typeOf(consumer) == null
  const pt = typeOf(provider)
  const ct = typeOf(consumer)
  if (pt != null && ct != null && pt !== ct) return false
  const provided = properties(provider)
  const wanted = properties(consumer)
  for (const name of required(consumer)) {
    if (!(name in provided)) return false
    const a = typeOf(provided[name])
    const b = typeOf(wanted[name])
    if (a != null && b != null && a !== b) return false
  }
  return true
}

/** The skills of a card that satisfy the query (empty: the card does not match) */
export function matchQuery (card: AgentCard, query: DiscoveryQuery): Skill[] {
  if (query.domain != null && card.domain !== query.domain) return []
  return card.skills.filter(s => {
    if (s.id !== query.capability && !s.id.startsWith(query.capability + '.')) return false
    if (query.tags != null && !query.tags.every(t => s.tags.includes(t))) return false
    // the caller's input must satisfy the skill's input; the skill's output must satisfy the caller's need
    if (query.input != null && !schemaSatisfies(query.input, s.inputSchema)) return false
    if (query.output != null && !schemaSatisfies(s.outputSchema, query.output)) return false
    return true
  })
}
