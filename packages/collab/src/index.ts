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
} from './delegation.js'
export type { Capability, TokenPayload, Token, DelegateInit, VerifiedChain, VerifyChainOptions } from './delegation.js'
export {
  createRevocation, verifyRevocation, parseRevocation, encodeRevocation, decodeRevocation, revocationCid,
  revocationSigningBytes, revocationAuthorities, RevocationStore, createRevocationService,
  REVOCATION_PROTOCOL, ANNOUNCE_METHOD, REVOCATION_SIG_PREFIX, REVOCATION_LIMITS
} from './revocation.js'
export type { Revocation, RevocationPayload, RevocationStoreInit, RevocationService, RevocationServiceInit, PublishResult } from './revocation.js'
export {
  validatePlan, topologicalOrder, resolveInput, criticalPath, subGoal, PlanSchema, PLAN_LIMITS, STEP_ID
} from './plan.js'
export type { Goal, Plan, PlanStep, Fanout, Planner, PlannerContext, InvalidPlanDetails } from './plan.js'
export { declarativePlanner, compositionPlanner, llmPlanner, DEFAULT_SYSTEM_PROMPT } from './planners/index.js'
export type {
  DeclarativePlannerInit, Template, TemplateStep, CompositionPlannerInit, LlmPlannerInit, CapabilityInfo
} from './planners/index.js'
