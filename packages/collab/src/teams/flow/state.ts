/**
 * The conversation's finite-state machine (`spec/teams.md` 10.1-10.3): a
 * pure function `nextFlow(state, entry, roster)` from the state after entry
 * n-1 to the state after entry n, or a typed error when the entry is not
 * allowed. Every member (the sequencer included) runs it over the log, so
 * the state after any entry is the same everywhere and a new sequencer
 * rebuilds it from the log alone.
 */
import { IllegalTransitionError, MaxTurnsError, NotYourTurnError, TeamConcludedError } from '../errors.js'
import { memberOf } from '../records.js'
import { ruleSpeaker, isRulePolicy } from './rules.js'
import type { Trigger } from './rules.js'
import type { Entry, RosterPayload, Roster } from '../records.js'
import type { Did } from '@ioa/interconnect'

/** The states of a conversation (spec 10.1) */
export type FlowPhase = 'discussion' | 'sync' | 'paused' | 'concluded'

/** Names of the shipped policies; other names are policies a sequencer brings (spec 10.4) */
export const RULE_POLICIES = ['round-robin', 'moderator', 'priority'] as const

/** The flow parameters of a team, from its first roster's `limits` (absent fields: the defaults) */
export interface FlowParams {
  /** `open`, a rule policy, `llm`, or a policy the sequencer brings */
  policy: string
  maxTurns: number
  moderator: string
  /** Roles from the highest priority down (empty: the order of `successors`) */
  priority: string[]
  turnTimeout: number
}

/** Defaults of the flow fields of a roster's `limits` (spec 9) */
export const FLOW_DEFAULTS: Readonly<Omit<FlowParams, 'priority'>> = Object.freeze({
  policy: 'open',
  maxTurns: 1_000,
  moderator: 'convener',
  turnTimeout: 60_000
})

/** Message types that take a turn (spec 10.3) */
export const TURN_TYPES: ReadonlySet<string> = new Set(['discuss', 'propose', 'assign', 'pause'])

/** Most tasks open at once in a team (spec 10.2) */
export const MAX_OPEN_TASKS = 64

export interface OpenTask {
  mode: 'sync' | 'async'
  assignee: Did
  assigner: Did
  /** Seq of its (latest) `assign` entry */
  seq: number
}

/** Why a decision is due: the turn `after` ended (`turn`) or its speaker left (`left`) */
export type DueDecision = Trigger & { kind: 'turn' | 'left' }

export interface FlowState {
  readonly params: FlowParams
  readonly phase: FlowPhase
  /** Turns taken */
  readonly turn: number
  /** Whose turn it is; absent under `open` or while a decision is due */
  readonly speaker?: Did
  /** A policy decision the sequencer owes (not under `open`) */
  readonly due?: DueDecision
  /** Open tasks by id */
  readonly tasks: ReadonlyMap<string, OpenTask>
  /** Tasks that have a result */
  readonly done: ReadonlySet<string>
  /** The tasks a `pause` waits for (in `paused`) */
  readonly waiting: readonly string[]
  /** Turns had per member, skips included (the `priority` policy) */
  readonly spoken: ReadonlyMap<Did, number>
}

/** The flow parameters a roster carries */
export function flowParams (roster: RosterPayload): FlowParams {
  const l = roster.limits
  return {
    policy: l.policy ?? FLOW_DEFAULTS.policy,
    maxTurns: l.maxTurns ?? FLOW_DEFAULTS.maxTurns,
    moderator: l.moderator ?? FLOW_DEFAULTS.moderator,
    priority: l.priority ?? [],
    turnTimeout: l.turnTimeout ?? FLOW_DEFAULTS.turnTimeout
  }
}

/** The state of a new team (after entry 0): discussion, the convener speaks first unless the policy is `open` */
export function initialFlow (roster: RosterPayload): FlowState {
  const params = flowParams(roster)
  const state: FlowState = { params, phase: 'discussion', turn: 0, tasks: new Map(), done: new Set(), waiting: [], spoken: new Map() }
  return params.policy === 'open' ? state : { ...state, speaker: roster.convener }
}

function illegal (message: string): never {
  throw new IllegalTransitionError(message)
}

/** Is the task open or finished in this team? */
function known (s: FlowState, task: string): boolean {
  return s.tasks.has(task) || s.done.has(task)
}

/** Guard and effect of a message that takes a turn */
function takeTurn (s: FlowState, from: Did, named: Did | undefined): FlowState {
  if (s.turn >= s.params.maxTurns) throw new MaxTurnsError(`The conversation used its ${s.params.maxTurns} turns`)
  const spoken = new Map(s.spoken)
  spoken.set(from, (spoken.get(from) ?? 0) + 1)
  if (s.params.policy === 'open') return { ...s, turn: s.turn + 1, spoken }
  if (s.due != null) throw new NotYourTurnError('The next speaker is being decided')
  if (s.speaker !== from) throw new NotYourTurnError(`It is the turn of ${s.speaker ?? 'nobody'}`)
  const due: DueDecision = named != null ? { kind: 'turn', after: from, named } : { kind: 'turn', after: from }
  return { ...s, turn: s.turn + 1, spoken, speaker: undefined, due }
}

/** The state once the open tasks changed: sync ends with its last sync task, paused with the last task it waits for */
function settle (s: FlowState): FlowState {
  if (s.phase === 'sync' && ![...s.tasks.values()].some(t => t.mode === 'sync')) return { ...s, phase: 'discussion' }
  if (s.phase === 'paused' && !s.waiting.some(t => s.tasks.has(t))) return { ...s, phase: 'discussion', waiting: [] }
  return s
}

/**
 * The state after `entry`, given the state before it and the roster in force
 * after it (for a `roster` entry, the new one). Throws `ILLEGAL_TRANSITION`,
 * `NOT_YOUR_TURN`, `MAX_TURNS` or `TEAM_CONCLUDED` when the entry is refused.
 * Membership, sender roles of 8.2, epochs and signatures are checked before
 * (spec 8.3); this adds the rules of section 10.
 */
export function nextFlow (s: FlowState, entry: Entry, roster: RosterPayload): FlowState {
  const m = entry.msg.payload
  const b = m.body
  if (s.phase === 'concluded') throw new TeamConcludedError()
  switch (m.type) {
    case 'conclude':
      return { ...s, phase: 'concluded', speaker: undefined, due: undefined }
    case 'roster': {
      const next = (b.roster as Roster).payload
      // the speaker left: a decision is due
      if (s.speaker != null && memberOf(next, s.speaker) == null) return { ...s, speaker: undefined, due: { kind: 'left', after: s.speaker } }
      return s
    }
    case 'epoch': case 'leave': case 'remove': case 'admit': case 'subteam': case 'vote-result':
      return s
    case 'vote':
      if (s.phase !== 'discussion') illegal(`No vote in state ${s.phase}`)
      return s
    case 'discuss': case 'propose':
      if (s.phase !== 'discussion') illegal(`No ${m.type} in state ${s.phase}: it waits for ${s.phase === 'sync' ? 'the sync assignment' : 'the paused tasks'}`)
      return takeTurn(s, m.from, b.next as Did | undefined)
    case 'assign': {
      const task = b.task as string
      const open = s.tasks.get(task)
      if (open != null) {
        // reassignment (shared rule 3): by its assigner or the convener, same mode, to a member
        if (m.from !== open.assigner && m.from !== roster.convener) illegal(`Only the assigner or the convener reassigns task ${task}`)
        if (b.mode !== open.mode) illegal(`Task ${task} is ${open.mode}; a reassignment keeps the mode`)
        if (memberOf(roster, b.assignee as Did) == null) illegal(`The assignee ${String(b.assignee)} is not a member`)
        const tasks = new Map(s.tasks)
        tasks.set(task, { ...open, assignee: b.assignee as Did, seq: entry.seq })
        return { ...s, tasks }
      }
      if (s.phase !== 'discussion') illegal(`No new assignment in state ${s.phase}`)
      if (s.done.has(task)) illegal(`Task ${task} has a result already`)
      if (s.tasks.size >= MAX_OPEN_TASKS) illegal(`${MAX_OPEN_TASKS} tasks are open`)
      if (memberOf(roster, b.assignee as Did) == null) illegal(`The assignee ${String(b.assignee)} is not a member`)
      const after = takeTurn(s, m.from, undefined)
      const tasks = new Map(s.tasks)
      const mode = b.mode as 'sync' | 'async'
      tasks.set(task, { mode, assignee: b.assignee as Did, assigner: m.from, seq: entry.seq })
      return { ...after, tasks, phase: mode === 'sync' ? 'sync' : after.phase }
    }
    case 'progress': case 'result': {
      const task = b.task as string
      const open = s.tasks.get(task)
      if (open == null) illegal(`Task ${task} is not open`)
      const lapsed = m.type === 'result' && (b.error as { code?: unknown } | undefined)?.code === 'LEASE_LAPSED'
      if (m.from !== open.assignee && !(lapsed && (m.from === open.assigner || m.from === roster.convener))) {
        illegal(`Only the assignee reports on task ${task}`)
      }
      if (m.type === 'progress') return s
      const tasks = new Map(s.tasks)
      tasks.delete(task)
      const done = new Set(s.done)
      done.add(task)
      return settle({ ...s, tasks, done })
    }
    case 'pause': {
      if (s.phase !== 'discussion') illegal(`No pause in state ${s.phase}`)
      const list = b.tasks as string[]
      const unknown = list.find(t => !known(s, t))
      if (unknown != null) illegal(`Task ${unknown} was never assigned`)
      const after = takeTurn(s, m.from, undefined)
      const waiting = list.filter(t => s.tasks.has(t))
      return waiting.length === 0 ? after : { ...after, phase: 'paused', waiting }
    }
    case 'turn':
      return decided(s, entry, roster)
  }
}

/** What the sequencer's next decision follows: a due decision, or else skipping the current speaker */
export function pendingTrigger (s: FlowState): Trigger | undefined {
  return s.due ?? (s.speaker != null ? { kind: 'skip', after: s.speaker } : undefined)
}

/** Turns had per member once the decision for `trigger` is taken (a skip counts as a turn of the skipped) */
function spokenAfter (s: FlowState, trigger: Trigger): ReadonlyMap<Did, number> {
  if (trigger.kind !== 'skip') return s.spoken
  const spoken = new Map(s.spoken)
  spoken.set(trigger.after, (spoken.get(trigger.after) ?? 0) + 1)
  return spoken
}

/** The speaker a rule gives the pending decision (the sequencer's choice, and what members check) */
export function ruleDecision (s: FlowState, roster: RosterPayload, rule: string, trigger: Trigger): Did {
  return ruleSpeaker(rule, s.params, roster, spokenAfter(s, trigger), trigger)
}

/** A `turn` entry (spec 10.4): checked against the state, and against the rule when a rule decided */
function decided (s: FlowState, entry: Entry, roster: RosterPayload): FlowState {
  const b = entry.msg.payload.body
  if (s.params.policy === 'open') illegal('The open policy has no turn decisions')
  if (b.policy !== s.params.policy) illegal(`The team's policy is ${s.params.policy}, not ${String(b.policy)}`)
  if (b.turn !== s.turn || b.state !== s.phase) illegal(`The decision names turn ${String(b.turn)} in ${String(b.state)}; the conversation is at turn ${s.turn} in ${s.phase}`)
  const speaker = b.speaker as Did
  if (memberOf(roster, speaker) == null) illegal(`The next speaker ${speaker} is not a member`)
  // with no decision due, a decision passes the turn of a silent speaker (turnTimeout)
  const trigger = pendingTrigger(s)
  if (trigger == null) illegal('No turn to decide')
  const rule = b.fallback as string | undefined ?? (isRulePolicy(s.params.policy) ? s.params.policy : undefined)
  if (rule != null) {
    const expected = ruleDecision(s, roster, rule, trigger)
    if (expected !== speaker) illegal(`The ${rule} rule gives the turn to ${expected}, not ${speaker}`)
  }
  return { ...s, speaker, due: undefined, spoken: spokenAfter(s, trigger) }
}
