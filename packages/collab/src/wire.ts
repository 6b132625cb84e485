/**
 * @packageDocumentation
 *
 * `@ioa/collab/wire`: what the layers of the stack and the implementers of a
 * compatible peer need, and an application does not: the signing bytes and
 * their prefixes, the CBOR codecs of tokens, revocations and approvals, the
 * request envelopes and the replay cache the task service keeps, the
 * `LIMITS` tables, the protocol ids, the task state machine and the plan
 * helpers the orchestrator uses. Each of them follows a section of
 * `spec/collab-*.md`; an application uses the main entry point
 * (`@ioa/collab`), which creates, verifies and carries all of these for it.
 */

export {
  encodeToken, decodeToken, parseToken, tokenSigningBytes, isTokenCid, newNonce,
  TOKEN_VERSION, TOKEN_SIG_PREFIX, TOKEN_LIMITS, DEFAULT_MAX_DEPTH, DEFAULT_CLOCK_SKEW
} from './auth/delegation.js'
export {
  parseRevocation, encodeRevocation, decodeRevocation, revocationSigningBytes,
  REVOCATION_PROTOCOL, REVOCATION_PROTOCOL_1_0, REVOCATION_PROTOCOLS, ANNOUNCE_METHOD, REVOCATION_SIG_PREFIX, REVOCATION_LIMITS
} from './auth/revocation.js'
export type { RevocationPayload } from './auth/revocation.js'
export { defaultVerificationCache } from './auth/verification-cache.js'
export {
  createEnvelope, verifyEnvelope, parseEnvelope, envelopeSigningBytes, bodyCid, randomNonce, ReplayCache,
  ENVELOPE_PREFIX, ENVELOPE_LIMITS, TASK_ID_PATTERN, DEFAULT_ENVELOPE_TTL
} from './auth/envelope.js'
export type {
  Envelope, EnvelopePayload, EnvelopeInit, ReplayCacheInit, ReplayCacheStats, ReplayOutcome, VerifyEnvelopeOptions, VerifiedEnvelope
} from './auth/envelope.js'
// session mode (spec/collab-tasks.md 2.6)
export { createUnsignedEnvelope } from './auth/envelope.js'
export type { UnsignedEnvelope } from './auth/envelope.js'
export {
  createBinding, parseBinding, verifyBinding, bindingSigningBytes, SESSION_PREFIX, SESSION_LIMITS, DEFAULT_BINDING_TTL
} from './auth/session.js'
export type { SessionBinding, SessionBindingPayload, BindingInit, VerifyBindingOptions } from './auth/session.js'
export { evaluatePolicy, parseApproval, approvalSigningBytes, APPROVAL_PREFIX, DEFAULT_APPROVAL_TTL } from './auth/policy.js'
export type { ApprovalPayload } from './auth/policy.js'
export {
  topologicalOrder, resolveInput, criticalPath, subGoal, PlanSchema, PLAN_LIMITS, STEP_ID
} from './planning/plan.js'
export {
  TASK_STATES, TERMINAL_STATES, TRANSITIONS, DEFAULT_TASK_LIMITS, isTaskState, canTransition, transition, TaskStore
} from './tasks/model.js'
export type { TaskRecord } from './tasks/model.js'
export { TASK_PROTOCOL, taskFailure } from './tasks/service.js'
export { subtaskId } from './orchestration/orchestrator.js'
export { RunJournal, JOURNAL_PREFIX, RUN_ID } from './orchestration/journal.js'
export type { RunRecord, StepRecord, AttemptRecord } from './orchestration/journal.js'
// teams and negotiation records (spec/teams.md)
export * from './teams/wire.js'
export { TEAM_ID } from './teams/records.js'
