/**
 * Error classes of the collaboration layer. Each has a stable `code`, also
 * used on the wire (`spec/collab.md`, "Errors"). Written out as named
 * classes (`static name`, `static code`), as the transport's errors are.
 */
import { fromRemote as interconnectFromRemote } from '@ioa/interconnect'
import { CodedError } from '@ioa/transport'
import type { CodedErrorClass } from '@ioa/transport'

export class CollabError extends CodedError {
  static override name = 'CollabError'
}

export type CollabErrorClass = CodedErrorClass<CollabError>

export class InvalidTokenError extends CollabError {
  static override name = 'InvalidTokenError'
  static code = 'INVALID_TOKEN'
  constructor (message = 'Invalid delegation token', options?: ErrorOptions) {
    super(InvalidTokenError.code, message, options)
    this.name = InvalidTokenError.name
  }
}

export class TokenExpiredError extends CollabError {
  static override name = 'TokenExpiredError'
  static code = 'TOKEN_EXPIRED'
  constructor (message = 'Delegation token expired', options?: ErrorOptions) {
    super(TokenExpiredError.code, message, options)
    this.name = TokenExpiredError.name
  }
}

export class TokenNotYetValidError extends CollabError {
  static override name = 'TokenNotYetValidError'
  static code = 'TOKEN_NOT_YET_VALID'
  constructor (message = 'Delegation token not yet valid', options?: ErrorOptions) {
    super(TokenNotYetValidError.code, message, options)
    this.name = TokenNotYetValidError.name
  }
}

export class EscalationError extends CollabError {
  static override name = 'EscalationError'
  static code = 'ESCALATION'
  constructor (message = 'Delegation grants more than its proof', options?: ErrorOptions) {
    super(EscalationError.code, message, options)
    this.name = EscalationError.name
  }
}

export class PrincipalMismatchError extends CollabError {
  static override name = 'PrincipalMismatchError'
  static code = 'PRINCIPAL_MISMATCH'
  constructor (message = 'Proof audience is not the issuer', options?: ErrorOptions) {
    super(PrincipalMismatchError.code, message, options)
    this.name = PrincipalMismatchError.name
  }
}

export class ChainTooDeepError extends CollabError {
  static override name = 'ChainTooDeepError'
  static code = 'CHAIN_TOO_DEEP'
  constructor (message = 'Delegation chain too deep', options?: ErrorOptions) {
    super(ChainTooDeepError.code, message, options)
    this.name = ChainTooDeepError.name
  }
}

export class RevokedError extends CollabError {
  static override name = 'RevokedError'
  static code = 'REVOKED'
  constructor (message = 'Delegation revoked', options?: ErrorOptions) {
    super(RevokedError.code, message, options)
    this.name = RevokedError.name
  }
}

export class InvalidSignatureError extends CollabError {
  static override name = 'InvalidSignatureError'
  static code = 'INVALID_SIGNATURE'
  constructor (message = 'Invalid signature', options?: ErrorOptions) {
    super(InvalidSignatureError.code, message, options)
    this.name = InvalidSignatureError.name
  }
}

export class InvalidEnvelopeError extends CollabError {
  static override name = 'InvalidEnvelopeError'
  static code = 'INVALID_ENVELOPE'
  constructor (message = 'Invalid request envelope', options?: ErrorOptions) {
    super(InvalidEnvelopeError.code, message, options)
    this.name = InvalidEnvelopeError.name
  }
}

export class ReplayError extends CollabError {
  static override name = 'ReplayError'
  static code = 'REPLAY'
  constructor (message = 'Replayed request', options?: ErrorOptions) {
    super(ReplayError.code, message, options)
    this.name = ReplayError.name
  }
}

export class EnvelopeExpiredError extends CollabError {
  static override name = 'EnvelopeExpiredError'
  static code = 'ENVELOPE_EXPIRED'
  constructor (message = 'Request envelope expired', options?: ErrorOptions) {
    super(EnvelopeExpiredError.code, message, options)
    this.name = EnvelopeExpiredError.name
  }
}

export class UnauthorizedError extends CollabError {
  static override name = 'UnauthorizedError'
  static code = 'UNAUTHORIZED'
  constructor (message = 'No delegated capability for this skill', options?: ErrorOptions) {
    super(UnauthorizedError.code, message, options)
    this.name = UnauthorizedError.name
  }
}

export class PolicyDeniedError extends CollabError {
  static override name = 'PolicyDeniedError'
  static code = 'POLICY_DENIED'
  constructor (message = 'Denied by policy', options?: ErrorOptions) {
    super(PolicyDeniedError.code, message, options)
    this.name = PolicyDeniedError.name
  }
}

export class ApprovalRequiredError extends CollabError {
  static override name = 'ApprovalRequiredError'
  static code = 'APPROVAL_REQUIRED'
  constructor (message = 'Approval required', options?: ErrorOptions) {
    super(ApprovalRequiredError.code, message, options)
    this.name = ApprovalRequiredError.name
  }
}

export class DeadlineExceededError extends CollabError {
  static override name = 'DeadlineExceededError'
  static code = 'DEADLINE_EXCEEDED'
  constructor (message = 'Deadline exceeded', options?: ErrorOptions) {
    super(DeadlineExceededError.code, message, options)
    this.name = DeadlineExceededError.name
  }
}

export class BudgetExceededError extends CollabError {
  static override name = 'BudgetExceededError'
  static code = 'BUDGET_EXCEEDED'
  constructor (message = 'Budget exceeded', options?: ErrorOptions) {
    super(BudgetExceededError.code, message, options)
    this.name = BudgetExceededError.name
  }
}

export class UnknownTaskError extends CollabError {
  static override name = 'UnknownTaskError'
  static code = 'UNKNOWN_TASK'
  constructor (message = 'Unknown task', options?: ErrorOptions) {
    super(UnknownTaskError.code, message, options)
    this.name = UnknownTaskError.name
  }
}

export class InvalidPlanError extends CollabError {
  static override name = 'InvalidPlanError'
  static code = 'INVALID_PLAN'
  constructor (message = 'Invalid plan', options?: ErrorOptions) {
    super(InvalidPlanError.code, message, options)
    this.name = InvalidPlanError.name
  }
}

export class PlannerFailedError extends CollabError {
  static override name = 'PlannerFailedError'
  static code = 'PLANNER_FAILED'
  constructor (message = 'Planner failed', options?: ErrorOptions) {
    super(PlannerFailedError.code, message, options)
    this.name = PlannerFailedError.name
  }
}

export class NoProviderError extends CollabError {
  static override name = 'NoProviderError'
  static code = 'NO_PROVIDER'
  constructor (message = 'No provider for a capability', options?: ErrorOptions) {
    super(NoProviderError.code, message, options)
    this.name = NoProviderError.name
  }
}

export class StepFailedError extends CollabError {
  static override name = 'StepFailedError'
  static code = 'STEP_FAILED'
  constructor (message = 'Plan step failed', options?: ErrorOptions) {
    super(StepFailedError.code, message, options)
    this.name = StepFailedError.name
  }
}

export class RevocationQuotaError extends CollabError {
  static override name = 'RevocationQuotaError'
  static code = 'REVOCATION_QUOTA'
  constructor (message = 'Revocation store quota exceeded', options?: ErrorOptions) {
    super(RevocationQuotaError.code, message, options)
    this.name = RevocationQuotaError.name
  }
}

/** The classes whose codes `fromRemote` turns back into them */
const BY_CODE = new Map<string, CollabErrorClass>([
  [InvalidTokenError.code, InvalidTokenError],
  [TokenExpiredError.code, TokenExpiredError],
  [TokenNotYetValidError.code, TokenNotYetValidError],
  [EscalationError.code, EscalationError],
  [PrincipalMismatchError.code, PrincipalMismatchError],
  [ChainTooDeepError.code, ChainTooDeepError],
  [RevokedError.code, RevokedError],
  [InvalidSignatureError.code, InvalidSignatureError],
  [InvalidEnvelopeError.code, InvalidEnvelopeError],
  [ReplayError.code, ReplayError],
  [EnvelopeExpiredError.code, EnvelopeExpiredError],
  [UnauthorizedError.code, UnauthorizedError],
  [PolicyDeniedError.code, PolicyDeniedError],
  [ApprovalRequiredError.code, ApprovalRequiredError],
  [DeadlineExceededError.code, DeadlineExceededError],
  [BudgetExceededError.code, BudgetExceededError],
  [UnknownTaskError.code, UnknownTaskError],
  [InvalidPlanError.code, InvalidPlanError],
  [PlannerFailedError.code, PlannerFailedError],
  [NoProviderError.code, NoProviderError],
  [StepFailedError.code, StepFailedError],
  [RevocationQuotaError.code, RevocationQuotaError]
])

/**
 * Turn an error received from a remote peer (a transport `RemoteError` with one
 * of these codes) into the matching class; other errors pass unchanged
 */
export function fromRemote (err: unknown): unknown {
  const e = err as { code?: unknown, remote?: unknown, message?: string } | undefined
  if (e?.remote === true && typeof e.code === 'string') {
    const C = BY_CODE.get(e.code)
    if (C != null) {
      const out = new C(e.message, { cause: err })
      ;(out as CollabError & { remote: boolean }).remote = true
      return out
    }
  }
  // codes of the layer below (e.g. NOT_EXPORTED from a gateway) keep their names too
  return interconnectFromRemote(err)
}

/**
 * A handler's result cannot be encoded (DAG-CBOR: no functions, symbols,
 * `BigInt` beyond 64 bits, `NaN`, class instances…; `undefined` map values
 * are dropped first): the task fails with this code
 */
export class ResultNotEncodableError extends CollabError {
  static override name = 'ResultNotEncodableError'
  static code = 'RESULT_NOT_ENCODABLE'
  constructor (message = 'Result is not encodable', options?: ErrorOptions) {
    super(ResultNotEncodableError.code, message, options)
    this.name = ResultNotEncodableError.name
  }
}
BY_CODE.set(ResultNotEncodableError.code, ResultNotEncodableError)
