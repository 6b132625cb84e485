/**
 * @packageDocumentation
 *
 * The task collaboration layer: who may ask whom to do what (chained
 * delegation tokens, revocation, signed request envelopes, call-time policy),
 * how a goal becomes a plan (planners), and how a plan is carried out by agents
 * found at run time (tasks and the orchestrator).
 *
 * Wire formats: `spec/collab.md`.
 */

export {
  CollabError, InvalidTokenError, TokenExpiredError, TokenNotYetValidError, EscalationError, PrincipalMismatchError,
  ChainTooDeepError, RevokedError, InvalidSignatureError, InvalidEnvelopeError, ReplayError, EnvelopeExpiredError,
  UnauthorizedError, PolicyDeniedError, ApprovalRequiredError, DeadlineExceededError, BudgetExceededError,
  UnknownTaskError, InvalidPlanError, PlannerFailedError, NoProviderError, StepFailedError, fromRemote
} from './errors.js'
export {
  delegate, encodeToken, decodeToken, parseToken, tokenCid, tokenSigningBytes, verifyChain, capabilityFor,
  capabilityCovers, skillCovers, isSkillPattern, isTokenCid, newNonce,
  TOKEN_VERSION, TOKEN_SIG_PREFIX, TOKEN_LIMITS, DEFAULT_MAX_DEPTH, DEFAULT_CLOCK_SKEW
} from './auth/delegation.js'
export type { Capability, TokenPayload, Token, DelegateInit, VerifiedChain, VerifyChainOptions } from './auth/delegation.js'
export {
  createRevocation, verifyRevocation, parseRevocation, encodeRevocation, decodeRevocation, revocationCid,
  revocationSigningBytes, revocationAuthorities, RevocationStore, createRevocationService,
  REVOCATION_PROTOCOL, REVOCATION_PROTOCOL_1_0, REVOCATION_PROTOCOLS, ANNOUNCE_METHOD, REVOCATION_SIG_PREFIX, REVOCATION_LIMITS
} from './auth/revocation.js'
export type { Revocation, RevocationPayload, RevocationStoreInit, RevocationService, RevocationServiceInit, PublishResult } from './auth/revocation.js'
export {
  validatePlan, topologicalOrder, resolveInput, criticalPath, subGoal, PlanSchema, PLAN_LIMITS, STEP_ID
} from './planning/plan.js'
export type { Goal, Plan, PlanStep, Fanout, Planner, PlannerContext, InvalidPlanDetails } from './planning/plan.js'
export { declarativePlanner, compositionPlanner, llmPlanner, DEFAULT_SYSTEM_PROMPT } from './planning/planners/index.js'
export type {
  DeclarativePlannerInit, Template, TemplateStep, CompositionPlannerInit, LlmPlannerInit, CapabilityInfo
} from './planning/planners/index.js'
export {
  createEnvelope, verifyEnvelope, parseEnvelope, envelopeSigningBytes, bodyCid, randomNonce, ReplayCache,
  ENVELOPE_PREFIX, ENVELOPE_LIMITS, TASK_ID_PATTERN, DEFAULT_ENVELOPE_TTL
} from './auth/envelope.js'
export type { Envelope, EnvelopePayload, EnvelopeInit, ReplayCacheInit, VerifyEnvelopeOptions, VerifiedEnvelope } from './auth/envelope.js'
// bounds of the replay cache and the revocation store (issue 9, items 3a and 3b)
export type { ReplayCacheStats, ReplayOutcome } from './auth/envelope.js'
export { RevocationQuotaError } from './errors.js'
export type { CreateRevocationOptions } from './auth/revocation.js'
export type { RevocationLimits, RevocationLimitsInit } from './auth/revocation-limits.js'
export {
  allowAll, constraintPolicy, rateLimitPolicy, timeWindowPolicy, approvalPolicy, allOf, evaluatePolicy,
  createApproval, verifyApproval, parseApproval, approvalSigningBytes, APPROVAL_PREFIX, DEFAULT_APPROVAL_TTL
} from './auth/policy.js'
export type { Policy, PolicyContext, Decision, ConstraintPolicyInit, RateLimitInit, TimeWindowInit, Approval, ApprovalPayload, VerifyApprovalOptions } from './auth/policy.js'
export {
  TASK_STATES, TERMINAL_STATES, TRANSITIONS, DEFAULT_TASK_LIMITS, isTaskState, isTerminal, canTransition, transition,
  TaskStore, InvalidTransitionError, TaskLimitError
} from './tasks/model.js'
export type { TaskState, TaskSnapshot, TaskError, TaskAuth, TaskLimits, TaskRecord } from './tasks/model.js'
export { createTaskService, taskService, TASK_PROTOCOL, LeaseLapsedError, taskFailure } from './tasks/service.js'
export type { TaskService, TaskServiceInit, TaskServiceComponents, TaskRequest, TaskEvent, TaskScope, SubmitOptions, SkillContext, SkillHandler, ServeOptions } from './tasks/service.js'
export type { TaskRetentionInit } from './tasks/retention.js'
export { createTaskGateway, TaskProtocolInUseError } from './tasks/gateway.js'
export type { TaskGateway, TaskGatewayInit, TaskGatewayStats, RelayEvent } from './tasks/gateway.js'
export { createOrchestrator, subtaskId, UnknownRunError, DuplicateRunError, OrchestratorStoppedError } from './orchestration/orchestrator.js'
export type {
  Orchestrator, OrchestratorInit, OrchestratorEvent, RunOptions, RunResult, RunSummary, StepOutcome, BackoffInit, AttenuateContext
} from './orchestration/orchestrator.js'
export { RunJournal, JOURNAL_PREFIX, RUN_ID } from './orchestration/journal.js'
export type { RunRecord, StepRecord, AttemptRecord, AttemptState, RunState, StepState } from './orchestration/journal.js'
// teams: formation, rosters, the ordered group conversation (spec/teams.md)
export * from './teams/index.js'
export * from './teams/negotiation/index.js'
