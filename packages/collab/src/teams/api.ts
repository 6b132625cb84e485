/**
 * The public types of teams (`createTeamService`): goals, options, events,
 * the team handle and the service (`spec/teams.md`).
 */
import type { Token } from '../auth/delegation.js'
import type { FlowPhase, FlowState } from './flow/state.js'
import type { LlmPolicyInit, SpeakerPolicy } from './flow/policy.js'
import type { Decline, Entry, Invitation, MessageType, ParentRef, RosterPayload, TeamGoal, TeamMessage } from './records.js'
import type { RepetitionStats } from './repetition.js'
import type { DiscoveredAgent, Did, Interconnect } from '@ioa/interconnect'
import type { Messaging } from '@ioa/transport'
import type { AbortOptions, ComponentLogger, PeerId } from '@libp2p/interface'
import type { Datastore } from 'interface-datastore'

export type { TeamGoal } from './records.js'

/** A goal as `form()` takes it: without a deadline, the team gets now + `defaultDeadline` */
export type TeamGoalInit = Omit<TeamGoal, 'deadline'> & { deadline?: number }

/** The protocol of teams */
export const TEAM_PROTOCOL = '/ioa/team/1.0.0'

/** Options of the team service; every limit of spec/teams.md section 9 */
export interface TeamsInit {
  /** Entries and team state @default an in-memory datastore */
  datastore?: Datastore
  /** Members per team @default 16 */
  maxMembers?: number
  /** Teams this node holds (as convener or member) @default 64 */
  maxTeams?: number
  /** Teams one inviting peer may hold on this node @default 8 */
  maxTeamsPerPeer?: number
  /** Largest encoded message @default 16_384 */
  maxMessageBytes?: number
  /** Messages per second per member (sequencer) @default 5 */
  rate?: number
  /** Burst of messages per member @default 20 */
  burst?: number
  /** Encoded history per team @default 8 MiB */
  historyBytes?: number
  /** Deepest nesting of sub-teams @default 3 */
  maxDepth?: number
  /** Formation attempts per sub-team part @default 3 */
  subteamAttempts?: number
  /** Candidates tried per capability @default 3 */
  candidatesPerCapability?: number
  /** How long an invitation waits for its answer, and an invitee for the first roster, ms @default 10_000 */
  inviteTimeout?: number
  /** The sequencer's beat interval, ms @default 1_000 */
  heartbeat?: number
  /** Members acknowledge at most this often, ms @default 250 */
  ackInterval?: number
  /** Silence after which the sequencer is suspected, and the sequencer's lease, ms @default 4_000 */
  sequencerTimeout?: number
  /** Wait per rank before a successor claims, ms @default 1_000 */
  claimStagger?: number
  /** How long a claimant waits for promises, ms @default 1_000 */
  claimTimeout?: number
  /** A member that does not acknowledge for this long is removed, ms @default 30_000 */
  memberTimeout?: number
  /** Entries between two checkpoints @default 64 */
  checkpointEvery?: number
  /** Tolerance of `ts` checks, ms @default 30_000 */
  clockSkew?: number
  /** Deadline of a team without a parent task, ms from formation @default 3_600_000 */
  defaultDeadline?: number
  /** Timeout of unary team requests (post, ack, claim, history), ms @default 5_000 */
  requestTimeout?: number
  /** Events buffered for one slow `events()` reader before it is ended with an error @default 4_096 */
  maxBufferedEvents?: number
  /** Repetition filter (spec 10.7), written into the rosters this node convenes: discussion messages compared, 0 turns it off (at most 1024) @default 32 */
  repeatWindow?: number
  /** Repetition filter: similarity (per mille) at or above which a message is a repeat (1 to 1000) @default 800 */
  repeatThreshold?: number
  /** Watchers (spec 5.10) of one team on this node @default 8 */
  maxWatchers?: number
  /** Watch streams one peer may hold on this node, all teams together @default 2 */
  maxWatchersPerPeer?: number
  /** Revocation check of every member's chain (a RevocationStore) */
  revocations?: { isRevoked(cid: string, issuers?: readonly Did[]): boolean | Promise<boolean> }
  /** How often the sequencer checks members' chains for revocation, ms @default 2_000 */
  revocationCheckInterval?: number
  /** Accepted root principals of invitation chains @default any */
  roots?: Did[]
  /** Decides whether a hosted agent accepts an invitation @default accept when it serves a skill for every capability */
  acceptor?: Acceptor
  /** Ranks discovered candidates @default BM25 over cards (defaultMatcher) */
  matcher?: Matcher
  /** Logger namespace prefix @default 'ioa:collab:teams' */
  logPrefix?: string
  /** The model behind the `llm` speaker policy, used while this node sequences a team of that policy (spec 10.4) @default none: such teams fall back to round-robin here */
  llm?: LlmPolicyInit
  /** Speaker policies this node brings, by name (a roster's `policy` other than the shipped ones) @default none */
  policies?: Record<string, SpeakerPolicy>
}

/** The numeric options, all set */
export type TeamsLimits = Required<Omit<TeamsInit, 'datastore' | 'revocations' | 'roots' | 'acceptor' | 'matcher' | 'logPrefix' | 'llm' | 'policies'>>

export const TEAM_DEFAULTS: Readonly<TeamsLimits> = Object.freeze({
  maxMembers: 16,
  maxTeams: 64,
  maxTeamsPerPeer: 8,
  maxMessageBytes: 16_384,
  rate: 5,
  burst: 20,
  historyBytes: 8 * 1024 * 1024,
  maxDepth: 3,
  subteamAttempts: 3,
  candidatesPerCapability: 3,
  inviteTimeout: 10_000,
  heartbeat: 1_000,
  ackInterval: 250,
  sequencerTimeout: 4_000,
  claimStagger: 1_000,
  claimTimeout: 1_000,
  memberTimeout: 30_000,
  checkpointEvery: 64,
  clockSkew: 30_000,
  defaultDeadline: 3_600_000,
  requestTimeout: 5_000,
  maxBufferedEvents: 4_096,
  revocationCheckInterval: 2_000,
  repeatWindow: 32,
  repeatThreshold: 800,
  maxWatchers: 8,
  maxWatchersPerPeer: 2
})

/** What an invitee's acceptor is told */
export interface InvitationContext {
  invitation: Invitation
  /** The local agent invited */
  agent: Did
  /** Skills the agent serves (its card) */
  skills: string[]
}

export type Acceptor = (ctx: InvitationContext) => { accept: true } | { accept: false, decline: Decline } | Promise<{ accept: true } | { accept: false, decline: Decline }>

/** Ranks candidates for one capability of a goal, best first */
export type Matcher = (goal: TeamGoal, capability: string, candidates: DiscoveredAgent[]) => DiscoveredAgent[] | Promise<DiscoveredAgent[]>

/** One role of a team to fill */
export interface RoleInit {
  role: string
  capabilities: string[]
  /** Invite these agents (in order) instead of discovering candidates */
  candidates?: Array<{ agent: Did, peer: string }>
}

export interface FormOptions extends AbortOptions {
  /** Roles to fill @default one role per capability of the goal, named after it */
  roles?: RoleInit[]
  /** The convener's delegation chain (leaf first, audience: the convener); members' tokens derive from it */
  proofs?: Token[]
  /** Set when the team is a sub-team of a member's part (use `Team.formSubteam`) */
  parent?: ParentRef
  depth?: number
  /** Candidates per role to try @default candidatesPerCapability */
  candidates?: number
  /** How long discovery runs per capability, ms @default 5_000 */
  discoveryTimeout?: number
  /** Use the interconnect's cached discovery results when fresh @default true */
  cache?: boolean
  /** Flow control of the conversation, written into the first roster's `limits` (spec 10) @default the open policy, 1,000 turns */
  flow?: FlowOptions
}

/** The flow parameters every member agrees on (spec 10.3, 10.4) */
export interface FlowOptions {
  /** `open`, `round-robin`, `moderator`, `priority`, `llm`, or a policy the sequencer brings (`TeamsInit.policies`) @default 'open' */
  policy?: string
  /** Turns (discuss, propose, assign, pause) before the sequencer concludes the team @default 1_000 */
  maxTurns?: number
  /** The moderator's role under `moderator` @default 'convener' */
  moderator?: string
  /** Roles from the highest priority down, under `priority` @default the order of the roles */
  priority?: string[]
  /** A speaker silent this long loses its turn, ms @default 60_000 */
  turnTimeout?: number
}

/** Why a role could not be filled */
export interface RoleFailure {
  role: string
  tried: Array<{ agent: Did, outcome: 'declined' | 'failed', code: string, reason: string }>
}

export type TeamEvent =
  | { type: 'message', seq: number, epoch: number, message: TeamMessage }
  | { type: 'roster', seq: number, roster: RosterPayload }
  | { type: 'joined', seq: number, agent: Did }
  | { type: 'left', seq: number, agent: Did }
  | { type: 'epoch', seq: number, epoch: number, sequencer: Did }
  | { type: 'concluded', seq: number, summary: string, outcome: string }
  | { type: 'truncated', from: number, count: number }
  | { type: 'stalled', epoch: number }
  /** The conversation's state changed (spec 10.1; concluding is the `concluded` event) */
  | { type: 'state', seq: number, state: Exclude<FlowPhase, 'concluded'>, previous: FlowPhase }
  /** A policy decision: `speaker` has the next turn (spec 10.4) */
  | { type: 'turn', seq: number, turn: number, speaker: Did, policy: string, reason?: string, fallback?: string }
  /** A post of this member was not sent (`by: 'sender'`) or not ordered (`by: 'sequencer'`): it repeats entry `of` (spec 10.7) */
  | { type: 'repeated', of: number, similarity: number, messageType: MessageType, bytes: number, by: 'sender' | 'sequencer' }
  | TeamAssignmentEvent

/**
 * An assignment as the log shows it (spec 10.6), derived from `assign`,
 * `progress` and `result` entries on every member: `opened` (first `assign`
 * of a task), `reassigned` (an `assign` for an open task by its assigner or
 * the convener), `progress`, `done` (the assignee's `result`) and `lapsed`
 * (a `result` with `error.code = 'LEASE_LAPSED'`)
 */
export interface TeamAssignmentEvent {
  type: 'assignment'
  phase: 'opened' | 'reassigned' | 'progress' | 'done' | 'lapsed'
  seq: number
  task: string
  /** The task's assignee (for `done`/`lapsed`: the one it had) */
  assignee: Did
  mode: 'sync' | 'async'
  /** `progress`, `done`, `lapsed`: the entry's `state` */
  state?: string
  text?: string
  output?: Record<string, unknown>
  error?: Record<string, unknown>
}

/** A node-level event of the team service */
export type TeamServiceEvent =
  | { type: 'invited', team: string, agent: Did, from: Did, accepted: boolean, decline?: Decline }
  | { type: 'team', team: Team }

export interface TeamTree {
  team: string
  member?: Did
  roster: RosterPayload
  concluded: boolean
  subteams: TeamTree[]
}

export interface PostOptions extends AbortOptions {
  /** The seq this message answers */
  re?: number
}

/** One team as this node holds it */
export interface Team {
  readonly id: string
  /** The local member agent */
  readonly agent: Did
  /** The current roster */
  readonly roster: RosterPayload
  readonly epoch: number
  /** The sequencer of the current epoch */
  readonly sequencer: Did
  readonly isSequencer: boolean
  readonly concluded: boolean
  /** Entries held (the next seq) */
  readonly length: number
  /** Highest seq acknowledged by a majority, as last heard */
  readonly stable: number
  /** Post a message; resolves with its position once the sequencer ordered it */
  post(type: MessageType, body: Record<string, unknown>, options?: PostOptions): Promise<{ seq: number, epoch: number }>
  /** Post a `discuss` message */
  say(text: string, options?: PostOptions): Promise<{ seq: number, epoch: number }>
  /** The conversation's flow state after the last entry held (spec 10) */
  readonly flow: FlowState
  /** The entries held, `from … to` */
  history(from?: number, to?: number): Entry[]
  /** Events from entry `from` (default: the next one) on, then live, until the team ends or `signal` aborts */
  events(options?: AbortOptions & { from?: number }): AsyncGenerator<TeamEvent, void, undefined>
  /** Wait until the log holds entry `seq` */
  waitFor(seq: number, options?: AbortOptions): Promise<void>
  /** Leave the team */
  leave(reason?: string, options?: AbortOptions): Promise<void>
  /** Convener: remove a member */
  remove(agent: Did, reason?: string, options?: AbortOptions): Promise<void>
  /** Convener: invite a new member into the running team */
  admit(candidate: { agent: Did, peer: string }, role: string, capabilities: string[], options?: AbortOptions): Promise<void>
  /** Convener (or sequencer at the deadline): end the conversation */
  conclude(summary: string, outcome?: 'done' | 'failed' | 'abandoned', options?: AbortOptions): Promise<void>
  /** Form a sub-team for this member's part */
  formSubteam(goal: TeamGoal, options?: FormOptions): Promise<Team>
  /** The team and its sub-teams, as far as the conveners answer */
  tree(options?: AbortOptions): Promise<TeamTree>
  /** What the repetition filter kept off the wire on this node (spec 10.7) */
  repetitionStats(): RepetitionStats
}

/** The slice of a node the team service needs */
export interface TeamServiceComponents {
  peerId: PeerId
  logger: ComponentLogger
  messaging: Pick<Messaging, 'handle' | 'handleStream' | 'unhandle' | 'request' | 'stream'>
  /** Hosted agents (members), discovery of candidates */
  interconnect: Pick<Interconnect, 'agents' | 'discoverAll'>
}

export interface TeamService {
  start(): Promise<void>
  stop(): Promise<void>
  /** Form a team convened by a hosted agent; a goal without a deadline gets now + `defaultDeadline` */
  form(agent: Did, goal: TeamGoalInit, options?: FormOptions): Promise<Team>
  /** A team this node holds (once its first roster arrived) */
  team(id: string): Team | undefined
  /** The teams this node holds (with a roster) */
  teams(): Team[]
  /** Pick up stored teams whose member agent is hosted now (`start()` does it for the agents hosted then) */
  resume(): Promise<void>
  /** Node-level events: invitations answered, teams joined */
  events(options?: AbortOptions): AsyncGenerator<TeamServiceEvent, void, undefined>
  /**
   * Let `acceptor` answer the invitations of one hosted agent instead of
   * `init.acceptor` (e.g. an external agent program decides its own);
   * returns the function that removes it again
   */
  acceptFor(agent: Did, acceptor: Acceptor): () => void
}
