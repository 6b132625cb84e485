/**
 * Error classes of the collaboration layer. Each has a stable `code`, also
 * used on the wire (`spec/collab.md`, "Errors"). Written out as named
 * classes (`static name`, `static code`), as the transport's errors are.
 */
import { fromRemote as interconnectFromRemote } from '@ioa/interconnect'
import { CodedError, ErrorFamily, withCode } from '@ioa/transport'
import type { CodedErrorClass } from '@ioa/transport'

export class CollabError extends CodedError {
  static override name = 'CollabError'
}

export type CollabErrorClass = CodedErrorClass<CollabError>

export class InvalidTokenError extends withCode(CollabError, 'INVALID_TOKEN', 'Invalid delegation token') {
  static override name = 'InvalidTokenError'
}

export class TokenExpiredError extends withCode(CollabError, 'TOKEN_EXPIRED', 'Delegation token expired') {
  static override name = 'TokenExpiredError'
}

export class TokenNotYetValidError extends withCode(CollabError, 'TOKEN_NOT_YET_VALID', 'Delegation token not yet valid') {
  static override name = 'TokenNotYetValidError'
}

export class EscalationError extends withCode(CollabError, 'ESCALATION', 'Delegation grants more than its proof') {
  static override name = 'EscalationError'
}

export class PrincipalMismatchError extends withCode(CollabError, 'PRINCIPAL_MISMATCH', 'Proof audience is not the issuer') {
  static override name = 'PrincipalMismatchError'
}

export class ChainTooDeepError extends withCode(CollabError, 'CHAIN_TOO_DEEP', 'Delegation chain too deep') {
  static override name = 'ChainTooDeepError'
}

export class RevokedError extends withCode(CollabError, 'REVOKED', 'Delegation revoked') {
  static override name = 'RevokedError'
}

export class InvalidSignatureError extends withCode(CollabError, 'INVALID_SIGNATURE', 'Invalid signature') {
  static override name = 'InvalidSignatureError'
}

export class InvalidEnvelopeError extends withCode(CollabError, 'INVALID_ENVELOPE', 'Invalid request envelope') {
  static override name = 'InvalidEnvelopeError'
}

export class ReplayError extends withCode(CollabError, 'REPLAY', 'Replayed request') {
  static override name = 'ReplayError'
}

export class EnvelopeExpiredError extends withCode(CollabError, 'ENVELOPE_EXPIRED', 'Request envelope expired') {
  static override name = 'EnvelopeExpiredError'
}

export class UnauthorizedError extends withCode(CollabError, 'UNAUTHORIZED', 'No delegated capability for this skill') {
  static override name = 'UnauthorizedError'
}

export class PolicyDeniedError extends withCode(CollabError, 'POLICY_DENIED', 'Denied by policy') {
  static override name = 'PolicyDeniedError'
}

export class ApprovalRequiredError extends withCode(CollabError, 'APPROVAL_REQUIRED', 'Approval required') {
  static override name = 'ApprovalRequiredError'
}

export class DeadlineExceededError extends withCode(CollabError, 'DEADLINE_EXCEEDED', 'Deadline exceeded') {
  static override name = 'DeadlineExceededError'
}

export class BudgetExceededError extends withCode(CollabError, 'BUDGET_EXCEEDED', 'Budget exceeded') {
  static override name = 'BudgetExceededError'
}

export class UnknownTaskError extends withCode(CollabError, 'UNKNOWN_TASK', 'Unknown task') {
  static override name = 'UnknownTaskError'
}

export class InvalidPlanError extends withCode(CollabError, 'INVALID_PLAN', 'Invalid plan') {
  static override name = 'InvalidPlanError'
}

export class PlannerFailedError extends withCode(CollabError, 'PLANNER_FAILED', 'Planner failed') {
  static override name = 'PlannerFailedError'
}

export class NoProviderError extends withCode(CollabError, 'NO_PROVIDER', 'No provider for a capability') {
  static override name = 'NoProviderError'
}

export class StepFailedError extends withCode(CollabError, 'STEP_FAILED', 'Plan step failed') {
  static override name = 'StepFailedError'
}

export class RevocationQuotaError extends withCode(CollabError, 'REVOCATION_QUOTA', 'Revocation store quota exceeded') {
  static override name = 'RevocationQuotaError'
}

/**
 * A handler's result cannot be encoded (DAG-CBOR: no functions, symbols,
 * `BigInt` beyond 64 bits, `NaN`, class instances…; `undefined` map values
 * are dropped first): the task fails with this code
 */
export class ResultNotEncodableError extends withCode(CollabError, 'RESULT_NOT_ENCODABLE', 'Result is not encodable') {
  static override name = 'ResultNotEncodableError'
}

/**
 * Task protocol 2.0.0: the request's `trace` field is not a valid trace
 * context (spec/collab-tasks.md 14.4)
 */
export class InvalidTraceError extends withCode(CollabError, 'INVALID_TRACE', 'Invalid trace context') {
  static override name = 'InvalidTraceError'
}

/**
 * Task protocol 2.0.0: the request's payload is not the canonical DAG-CBOR
 * encoding of what it decodes to (spec/collab-tasks.md 14.5)
 */
export class NonCanonicalError extends withCode(CollabError, 'NON_CANONICAL', 'Request is not canonical DAG-CBOR') {
  static override name = 'NonCanonicalError'
}

/** A session binding is malformed, or not for this connection, requester or executor (spec/collab-tasks.md 2.6) */
export class InvalidSessionError extends withCode(CollabError, 'INVALID_SESSION', 'Invalid session binding') {
  static override name = 'InvalidSessionError'
}

/** The session binding of the request's sender has expired: bind again (spec/collab-tasks.md 2.6) */
export class SessionExpiredError extends withCode(CollabError, 'SESSION_EXPIRED', 'Session binding expired') {
  static override name = 'SessionExpiredError'
}

/** An unsigned (session-mode) request whose sender has no binding on this connection: bind first (spec/collab-tasks.md 2.6) */
export class SessionRequiredError extends withCode(CollabError, 'SESSION_REQUIRED', 'Session binding required') {
  static override name = 'SessionRequiredError'
}

/** The skill requires envelope mode (a per-request signature): send the request signed (spec/collab-tasks.md 2.6) */
export class EnvelopeRequiredError extends withCode(CollabError, 'ENVELOPE_REQUIRED', 'Signed envelope required') {
  static override name = 'EnvelopeRequiredError'
}

/** The classes whose codes `fromRemote` turns back into them */
const FAMILY = new ErrorFamily<CollabError>(CollabError).register(
  InvalidTokenError, TokenExpiredError, TokenNotYetValidError, EscalationError, PrincipalMismatchError, ChainTooDeepError,
  RevokedError, InvalidSignatureError, InvalidEnvelopeError, ReplayError, EnvelopeExpiredError, UnauthorizedError,
  PolicyDeniedError, ApprovalRequiredError, DeadlineExceededError, BudgetExceededError, UnknownTaskError, InvalidPlanError,
  PlannerFailedError, NoProviderError, StepFailedError, RevocationQuotaError, ResultNotEncodableError,
  InvalidTraceError, NonCanonicalError,
  InvalidSessionError, SessionExpiredError, SessionRequiredError, EnvelopeRequiredError
)

/**
 * Turn an error received from a remote peer (a transport `RemoteError` with one
 * of these codes) into the matching class; other errors pass unchanged
 */
export function fromRemote (err: unknown): unknown {
  const out = FAMILY.fromRemote(err)
  // codes of the layer below (e.g. NOT_EXPORTED from a gateway) keep their names too
  return out !== err ? out : interconnectFromRemote(err)
}
