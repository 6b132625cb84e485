/**
 * Error classes of the collaboration layer. Each has a stable `code`, also
 * used on the wire (`spec/collab.md`, "Errors").
 */
import { fromRemote as interconnectFromRemote } from '@ioa/interconnect'
import { CodedError, ErrorFamily } from '@ioa/transport'
import type { CodedErrorClass } from '@ioa/transport'

export class CollabError extends CodedError {
  static override name = 'CollabError'
}

export type CollabErrorClass = CodedErrorClass<CollabError>

const family = new ErrorFamily<CollabError>(CollabError)

export const InvalidTokenError = family.define('InvalidTokenError', 'INVALID_TOKEN', 'Invalid delegation token')
export const TokenExpiredError = family.define('TokenExpiredError', 'TOKEN_EXPIRED', 'Delegation token expired')
export const TokenNotYetValidError = family.define('TokenNotYetValidError', 'TOKEN_NOT_YET_VALID', 'Delegation token not yet valid')
export const EscalationError = family.define('EscalationError', 'ESCALATION', 'Delegation grants more than its proof')
export const PrincipalMismatchError = family.define('PrincipalMismatchError', 'PRINCIPAL_MISMATCH', 'Proof audience is not the issuer')
export const ChainTooDeepError = family.define('ChainTooDeepError', 'CHAIN_TOO_DEEP', 'Delegation chain too deep')
export const RevokedError = family.define('RevokedError', 'REVOKED', 'Delegation revoked')
export const InvalidSignatureError = family.define('InvalidSignatureError', 'INVALID_SIGNATURE', 'Invalid signature')
export const InvalidEnvelopeError = family.define('InvalidEnvelopeError', 'INVALID_ENVELOPE', 'Invalid request envelope')
export const ReplayError = family.define('ReplayError', 'REPLAY', 'Replayed request')
export const EnvelopeExpiredError = family.define('EnvelopeExpiredError', 'ENVELOPE_EXPIRED', 'Request envelope expired')
export const UnauthorizedError = family.define('UnauthorizedError', 'UNAUTHORIZED', 'No delegated capability for this skill')
export const PolicyDeniedError = family.define('PolicyDeniedError', 'POLICY_DENIED', 'Denied by policy')
export const ApprovalRequiredError = family.define('ApprovalRequiredError', 'APPROVAL_REQUIRED', 'Approval required')
export const DeadlineExceededError = family.define('DeadlineExceededError', 'DEADLINE_EXCEEDED', 'Deadline exceeded')
export const BudgetExceededError = family.define('BudgetExceededError', 'BUDGET_EXCEEDED', 'Budget exceeded')
export const UnknownTaskError = family.define('UnknownTaskError', 'UNKNOWN_TASK', 'Unknown task')
export const InvalidPlanError = family.define('InvalidPlanError', 'INVALID_PLAN', 'Invalid plan')
export const PlannerFailedError = family.define('PlannerFailedError', 'PLANNER_FAILED', 'Planner failed')
export const NoProviderError = family.define('NoProviderError', 'NO_PROVIDER', 'No provider for a capability')
export const StepFailedError = family.define('StepFailedError', 'STEP_FAILED', 'Plan step failed')
export const RevocationQuotaError = family.define('RevocationQuotaError', 'REVOCATION_QUOTA', 'Revocation store quota exceeded')

/**
 * Turn an error received from a remote peer (a transport `RemoteError` with one
 * of these codes) into the matching class; other errors pass unchanged
 */
export function fromRemote (err: unknown): unknown {
  const out = family.fromRemote(err)
  // codes of the layer below (e.g. NOT_EXPORTED from a gateway) keep their names too
  return out === err ? interconnectFromRemote(err) : out
}
