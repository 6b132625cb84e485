/**
 * Error classes of the collaboration layer. Each has a stable `code`, also
 * used on the wire (`spec/collab.md`, "Errors").
 */

export class CollabError extends Error {
  static override name = 'CollabError'
  readonly code: string

  constructor (code: string, message: string, options?: ErrorOptions) {
    super(message, options)
    this.code = code
    this.name = 'CollabError'
  }
}

export interface CollabErrorClass {
  new (message?: string, options?: ErrorOptions): CollabError
  readonly code: string
}

const BY_CODE = new Map<string, CollabErrorClass>()

function define (name: string, code: string, fallback: string): CollabErrorClass {
  const C = class extends CollabError {
    static override name = name
    static code = code
    constructor (message = fallback, options?: ErrorOptions) {
      super(code, message, options)
      this.name = name
    }
  }
  BY_CODE.set(code, C)
  return C
}

export const InvalidTokenError = define('InvalidTokenError', 'INVALID_TOKEN', 'Invalid delegation token')
export const TokenExpiredError = define('TokenExpiredError', 'TOKEN_EXPIRED', 'Delegation token expired')
export const TokenNotYetValidError = define('TokenNotYetValidError', 'TOKEN_NOT_YET_VALID', 'Delegation token not yet valid')
export const EscalationError = define('EscalationError', 'ESCALATION', 'Delegation grants more than its proof')
export const PrincipalMismatchError = define('PrincipalMismatchError', 'PRINCIPAL_MISMATCH', 'Proof audience is not the issuer')
export const ChainTooDeepError = define('ChainTooDeepError', 'CHAIN_TOO_DEEP', 'Delegation chain too deep')
export const RevokedError = define('RevokedError', 'REVOKED', 'Delegation revoked')
export const InvalidSignatureError = define('InvalidSignatureError', 'INVALID_SIGNATURE', 'Invalid signature')
export const InvalidEnvelopeError = define('InvalidEnvelopeError', 'INVALID_ENVELOPE', 'Invalid request envelope')
export const ReplayError = define('ReplayError', 'REPLAY', 'Replayed request')
export const EnvelopeExpiredError = define('EnvelopeExpiredError', 'ENVELOPE_EXPIRED', 'Request envelope expired')
export const UnauthorizedError = define('UnauthorizedError', 'UNAUTHORIZED', 'No delegated capability for this skill')
export const PolicyDeniedError = define('PolicyDeniedError', 'POLICY_DENIED', 'Denied by policy')
export const ApprovalRequiredError = define('ApprovalRequiredError', 'APPROVAL_REQUIRED', 'Approval required')
export const DeadlineExceededError = define('DeadlineExceededError', 'DEADLINE_EXCEEDED', 'Deadline exceeded')
export const BudgetExceededError = define('BudgetExceededError', 'BUDGET_EXCEEDED', 'Budget exceeded')
export const UnknownTaskError = define('UnknownTaskError', 'UNKNOWN_TASK', 'Unknown task')
export const InvalidPlanError = define('InvalidPlanError', 'INVALID_PLAN', 'Invalid plan')
export const PlannerFailedError = define('PlannerFailedError', 'PLANNER_FAILED', 'Planner failed')
export const NoProviderError = define('NoProviderError', 'NO_PROVIDER', 'No provider for a capability')
export const StepFailedError = define('StepFailedError', 'STEP_FAILED', 'Plan step failed')

/**
 * Turn an error from a remote peer (a transport `RemoteError` carrying one of
 * the codes above) into the matching class; other errors pass unchanged
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
  return err
}
