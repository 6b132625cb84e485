/**
 * Teams (`spec/teams.md`): formation by capability, signed rosters, nested
 * teams, and the ordered, signed group conversation with sequencer failover.
 */
export { createTeamService, teamService, defaultAcceptor } from './service.js'
export { defaultMatcher } from './matcher.js'
export { TEAM_PROTOCOL, TEAM_DEFAULTS } from './api.js'
export type {
  TeamService, TeamServiceComponents, TeamsInit, TeamsLimits, Team, TeamEvent, TeamAssignmentEvent, TeamServiceEvent, TeamTree, FormOptions,
  RoleInit, RoleFailure, PostOptions, Acceptor, InvitationContext, Matcher, TeamGoal, TeamGoalInit
} from './api.js'
export type {
  Signed, Invitation, InvitationPayload, Acceptance, AcceptancePayload, Roster, RosterPayload, RosterMember, RosterLimits,
  TeamMessage, MessagePayload, MessageType, Entry, Checkpoint, CheckpointPayload, Claim, ClaimPayload, ParentRef, Decline, DeclineCode
} from './records.js'
export * from './errors.js'
export * from './assignments/index.js'
