/**
 * The collaboration layer's error classes: written-out names and codes (the
 * codes are on the wire, spec/collab.md "Errors"), default messages, and
 * fromRemote turning a remote error back into its class.
 */
import { RemoteError } from '@ioa/transport'
import { describe, expect, it } from 'vitest'
import * as errors from '../src/errors.js'

const EXPECTED: Array<[string, string, string]> = [
  ['InvalidTokenError', 'INVALID_TOKEN', 'Invalid delegation token'],
  ['TokenExpiredError', 'TOKEN_EXPIRED', 'Delegation token expired'],
  ['TokenNotYetValidError', 'TOKEN_NOT_YET_VALID', 'Delegation token not yet valid'],
  ['EscalationError', 'ESCALATION', 'Delegation grants more than its proof'],
  ['PrincipalMismatchError', 'PRINCIPAL_MISMATCH', 'Proof audience is not the issuer'],
  ['ChainTooDeepError', 'CHAIN_TOO_DEEP', 'Delegation chain too deep'],
  ['RevokedError', 'REVOKED', 'Delegation revoked'],
  ['InvalidSignatureError', 'INVALID_SIGNATURE', 'Invalid signature'],
  ['InvalidEnvelopeError', 'INVALID_ENVELOPE', 'Invalid request envelope'],
  ['ReplayError', 'REPLAY', 'Replayed request'],
  ['EnvelopeExpiredError', 'ENVELOPE_EXPIRED', 'Request envelope expired'],
  ['UnauthorizedError', 'UNAUTHORIZED', 'No delegated capability for this skill'],
  ['PolicyDeniedError', 'POLICY_DENIED', 'Denied by policy'],
  ['ApprovalRequiredError', 'APPROVAL_REQUIRED', 'Approval required'],
  ['DeadlineExceededError', 'DEADLINE_EXCEEDED', 'Deadline exceeded'],
  ['BudgetExceededError', 'BUDGET_EXCEEDED', 'Budget exceeded'],
  ['UnknownTaskError', 'UNKNOWN_TASK', 'Unknown task'],
  ['InvalidPlanError', 'INVALID_PLAN', 'Invalid plan'],
  ['PlannerFailedError', 'PLANNER_FAILED', 'Planner failed'],
  ['NoProviderError', 'NO_PROVIDER', 'No provider for a capability'],
  ['StepFailedError', 'STEP_FAILED', 'Plan step failed'],
  ['RevocationQuotaError', 'REVOCATION_QUOTA', 'Revocation store quota exceeded'],
  ['ResultNotEncodableError', 'RESULT_NOT_ENCODABLE', 'Result is not encodable'],
  ['InvalidSessionError', 'INVALID_SESSION', 'Invalid session binding'],
  ['SessionExpiredError', 'SESSION_EXPIRED', 'Session binding expired'],
  ['SessionRequiredError', 'SESSION_REQUIRED', 'Session binding required'],
  ['EnvelopeRequiredError', 'ENVELOPE_REQUIRED', 'Signed envelope required']
]

describe('collab errors', () => {
  it.each(EXPECTED)('%s has code %s and its default message', (name, code, message) => {
    const C = (errors as unknown as Record<string, errors.CollabErrorClass>)[name]
    expect(C.name).toBe(name)
    expect(C.code).toBe(code)
    const err = new C()
    expect(err).toBeInstanceOf(errors.CollabError)
    expect(err).toBeInstanceOf(Error)
    expect(err.name).toBe(name)
    expect(err.code).toBe(code)
    expect(err.message).toBe(message)
    expect(new C('custom').message).toBe('custom')
  })

  it('fromRemote rebuilds a remote error as its class, remote, with the remote message', () => {
    for (const [name, code] of EXPECTED) {
      const remote = Object.assign(new RemoteError(code, 'from afar'), { remote: true })
      const out = errors.fromRemote(remote) as errors.CollabError & { remote?: boolean }
      expect(out.name).toBe(name)
      expect(out.code).toBe(code)
      expect(out.message).toBe('from afar')
      expect(out.remote).toBe(true)
      expect(out.cause).toBe(remote)
    }
  })

  it('fromRemote leaves local errors and unknown codes alone', () => {
    const local = new errors.ReplayError()
    expect(errors.fromRemote(local)).toBe(local)
    const unknown = Object.assign(new RemoteError('SOMETHING_ELSE', 'x'), { remote: true })
    expect(errors.fromRemote(unknown)).toBe(unknown)
  })
})
