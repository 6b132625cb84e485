/**
 * Teams (`spec/teams.md`): formation by capability, signed rosters, nested
 * teams, and the ordered, signed group conversation with sequencer failover.
 */
export { createTeamService, teamService, defaultAcceptor } from './service.js'
export { defaultMatcher } from './matcher.js'
export { TEAM_PROTOCOL, TEAM_DEFAULTS } from './api.js'
export type {
  TeamService, TeamServiceComponents, TeamsInit, TeamsLimits, Team, TeamEvent, TeamAssignmentEvent, TeamServiceEvent, TeamTree, FormOptions,
  RoleInit, RoleFailure, PostOptions, Acceptor, InvitationContext, Matcher, TeamGoal, TeamGoalInit, FlowOptions
} from './api.js'
export * from './flow/index.js'
export type {
  Signed, Invitation, InvitationPayload, Acceptance, AcceptancePayload, Roster, RosterPayload, RosterMember, RosterLimits,
  TeamMessage, MessagePayload, MessageType, Entry, Checkpoint, CheckpointPayload, Claim, ClaimPayload, Watch, WatchPayload, ParentRef, Decline, DeclineCode
} from './records.js'
export { REPETITION_DEFAULTS, REPETITION_TYPES, SHINGLE_WORDS, repetitionSaved, shingles, similarity, words } from './repetition.js'
export type { RepetitionStats, RepetitionCount, RepetitionSaved } from './repetition.js'
export { WATCH_SKILL, watchTeam } from './watch.js'
export type { WatchItem, WatchTeamInit } from './watch.js'
export * from './errors.js'
export * from './assignments/index.js'
