/**
 * @packageDocumentation
 *
 * The task collaboration layer: who may ask whom to do what (chained
 * delegation tokens, revocation, signed request envelopes, call-time policy),
 * how a goal becomes a plan (planners), and how a plan is carried out by agents
 * found at run time (tasks and the orchestrator).
 *
 * Wire formats: `spec/collab.md`. What only the layers and the implementers of
 * a compatible peer need (codecs, signing bytes, limits tables, protocol ids,
 * the replay cache, the task state machine) is in `@ioa/collab/wire`.
 */

export {
  CollabError, InvalidTokenError, TokenExpiredError, TokenNotYetValidError, EscalationError, PrincipalMismatchError,
  ChainTooDeepError, RevokedError, InvalidSignatureError, InvalidEnvelopeError, ReplayError, EnvelopeExpiredError,
  UnauthorizedError, PolicyDeniedError, ApprovalRequiredError, DeadlineExceededError, BudgetExceededError,
  UnknownTaskError, InvalidPlanError, PlannerFailedError, NoProviderError, StepFailedError, RevocationQuotaError, fromRemote
} from './errors.js'
export {
  delegate, tokenCid, verifyChain, capabilityFor, capabilityCovers, skillCovers, isSkillPattern
} from './auth/delegation.js'
export type { Capability, TokenPayload, Token, DelegateInit, DelegateOptions, VerifiedChain, VerifyChainOptions } from './auth/delegation.js'
export { VerificationCache } from './auth/verification-cache.js'
export type { VerificationCacheInit, VerificationCacheStats } from './auth/verification-cache.js'
export {
  createRevocation, verifyRevocation, revocationCid, revocationAuthorities, RevocationStore, createRevocationService
} from './auth/revocation.js'
export type {
  Revocation, RevocationStoreInit, RevocationService, RevocationServiceInit, PublishResult, CreateRevocationOptions
} from './auth/revocation.js'
export type { RevocationLimits, RevocationLimitsInit } from './auth/revocation-limits.js'
export { validatePlan } from './planning/plan.js'
export type { Goal, Plan, PlanStep, Fanout, Planner, PlannerContext, InvalidPlanDetails } from './planning/plan.js'
export { declarativePlanner, compositionPlanner, llmPlanner, DEFAULT_SYSTEM_PROMPT } from './planning/planners/index.js'
export type {
  DeclarativePlannerInit, Template, TemplateStep, CompositionPlannerInit, LlmPlannerInit, CapabilityInfo
} from './planning/planners/index.js'
// the task service keeps the envelopes and the replay cache; their values are in `@ioa/collab/wire`
export type { ReplayCache, ReplayCacheInit, ReplayCacheStats, ReplayOutcome } from './auth/envelope.js'
export {
  allowAll, constraintPolicy, rateLimitPolicy, timeWindowPolicy, approvalPolicy, allOf, createApproval, verifyApproval
} from './auth/policy.js'
export type { Policy, PolicyContext, Decision, ConstraintPolicyInit, RateLimitInit, TimeWindowInit, Approval, VerifyApprovalOptions } from './auth/policy.js'
// issue 11: results that cannot be encoded, the executor's events, calls from a handler
export { ResultNotEncodableError, InvalidTraceError, NonCanonicalError } from './errors.js'
export type { ExecutorEvent, ExecutorTaskInfo, CallOptions } from './tasks/api.js'
export { isTerminal, InvalidTransitionError, TaskLimitError } from './tasks/model.js'
export type { TaskState, TaskSnapshot, TaskError, TaskAuth, TaskLimits } from './tasks/model.js'
export { createTaskService, taskService, LeaseLapsedError } from './tasks/service.js'
export type { AcceptedSubmit, TaskService, TaskServiceInit, TaskServiceComponents, TaskRequest, TaskEvent, TaskScope, SubmitOptions, SkillContext, SkillHandler, ServeOptions, TraceContext } from './tasks/service.js'
export type { TaskRetentionInit } from './tasks/retention.js'
// issue 16: the tracing facade the layer's spans go through (spec/management.md 3); `@ioa/management` implements it with OpenTelemetry
export { traceMcpClient, MAX_TOOL_NAME } from './tool-span.js'
export type { ToolCallOptions, ToolRunner, McpToolClient, TraceMcpOptions } from './tool-span.js'
export { NOOP_TRACER, NOOP_SPAN } from './tracing.js'
export type { IoaTracer, IoaSpan, IoaSpanKind, IoaSpanAttributes, IoaSpanParent } from './tracing.js'
// issue 15: session mode (spec/collab-tasks.md 2.6); bindings themselves are in `@ioa/collab/wire`
export { InvalidSessionError, SessionExpiredError, SessionRequiredError, EnvelopeRequiredError } from './errors.js'
export type { SessionInit } from './auth/session-registry.js'
export type { AuthMode, SessionClientInit } from './auth/session-client.js'
export { createTaskGateway, TaskProtocolInUseError } from './tasks/gateway.js'
export type { TaskGateway, TaskGatewayInit, TaskGatewayStats, RelayEvent } from './tasks/gateway.js'
export { createOrchestrator, UnknownRunError, DuplicateRunError, OrchestratorStoppedError } from './orchestration/orchestrator.js'
export type {
  Orchestrator, OrchestratorInit, OrchestratorEvent, RunOptions, RunResult, RunSummary, StepOutcome, BackoffInit, AttenuateContext
} from './orchestration/orchestrator.js'
export type { RunState, StepState, AttemptState } from './orchestration/journal.js'
// teams: formation, rosters, the ordered group conversation, negotiation (spec/teams.md)
export * from './teams/index.js'
export * from './teams/negotiation/index.js'
