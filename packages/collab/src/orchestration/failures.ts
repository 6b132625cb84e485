/**
 * How the orchestrator reads a subtask's failure: which error codes end a
 * step at once, which mean the request never reached the executor, which the
 * executor refuses with, and which mark a provider as presumed gone. Which
 * codes mean the request never reached the executor (no task was created
 * there) is the transport's retry table (`isUnreached`).
 */
import { isUnreached } from '@ioa/transport'
import type { AttemptState } from './journal.js'

/** The `{ code, message }` of an error, as a task reports it (the executor's own mapping) */
export { errorOf } from '../tasks/wire.js'

/** Codes after which a step fails at once: the authority, the input or the limits are wrong, not the provider */
export const FATAL = new Set([
  'INVALID_TOKEN', 'INVALID_SIGNATURE', 'TOKEN_EXPIRED', 'TOKEN_NOT_YET_VALID', 'ESCALATION', 'PRINCIPAL_MISMATCH',
  'CHAIN_TOO_DEEP', 'REVOKED', 'UNAUTHORIZED', 'POLICY_DENIED', 'APPROVAL_REQUIRED', 'DEADLINE_EXCEEDED',
  'BUDGET_EXCEEDED', 'INVALID_PLAN', 'INVALID_ENVELOPE', 'PLANNER_FAILED'
])


/** Codes the executor answers a submit with instead of creating a task */
export const REFUSED = new Set(['NO_PROVIDER', 'TOO_MANY_REQUESTS', 'REPLAY', 'ENVELOPE_EXPIRED', ...FATAL])

/** Attempt states after which the executor's task is known not to have completed */
export const FAILED_STATES = new Set<AttemptState>(['failed', 'canceled', 'rejected'])

/** Codes of a provider presumed gone (deprioritised for a while), besides those that did not reach it */
const GONE = new Set(['LEASE_LAPSED', 'INTERRUPTED'])

/** A provider that failed with `code` is presumed gone (deprioritised for a while) */
export function isGone (code: string): boolean {
  return GONE.has(code) || isUnreached(code)
}

/** A provider that failed like this is ranked last for this long, ms */
export const SUSPECT_FOR = 60_000

export function codeOf (err: unknown): string {
  const c = (err as { code?: unknown } | undefined)?.code
  return typeof c === 'string' ? c : 'ERROR'
}

