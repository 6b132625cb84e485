/**
 * The one table of retryable codes (src/retry.ts) pinned against the six
 * lists it replaced, code by code: every site's predicate gives exactly what
 * its own list gave, for every code of every layer's error family, for
 * codes of no family, and for errors without a code.
 */
import { describe, expect, it } from 'vitest'
import { ANSWER, RETRY_TABLE, countsAgainstAgent, isRepeatable, isUnreached, mayTryAnotherPeer, retryFacts } from '../src/index.js'

/** Every code of the stack's error families (transport, interconnect, collab, node), task error codes, and codes of no family */
const CODES = [
  // transport
  'UNKNOWN_METHOD', 'PAYLOAD_TOO_LARGE', 'TIMEOUT', 'HANDLER_ERROR', 'TOO_MANY_REQUESTS', 'MALFORMED_FRAME', 'MALFORMED_LENGTH',
  'RESOURCE_EXHAUSTED', 'CANCELED', 'STREAM_CLOSED', 'NOT_STARTED', 'INVALID_ARGUMENT', 'DIAL_FAILED', 'PROTOCOL_NOT_SUPPORTED',
  'INVALID_DOMAIN_KEY',
  // interconnect
  'INVALID_DID', 'INVALID_CAPABILITY', 'INVALID_CARD', 'INVALID_SIGNATURE', 'CARD_EXPIRED', 'CARD_BINDING', 'UNKNOWN_AGENT',
  'PEER_UNREACHABLE', 'AGENT_NOT_HERE', 'NO_INBOX', 'NOT_EXPORTED', 'RATE_LIMITED', 'DUPLICATE_AGENT', 'BAD_REQUEST', 'FORBIDDEN',
  // collab
  'INVALID_TOKEN', 'TOKEN_EXPIRED', 'TOKEN_NOT_YET_VALID', 'ESCALATION', 'PRINCIPAL_MISMATCH', 'CHAIN_TOO_DEEP', 'REVOKED',
  'UNAUTHORIZED', 'POLICY_DENIED', 'APPROVAL_REQUIRED', 'DEADLINE_EXCEEDED', 'BUDGET_EXCEEDED', 'INVALID_PLAN', 'INVALID_ENVELOPE',
  'PLANNER_FAILED', 'NO_PROVIDER', 'REPLAY', 'ENVELOPE_EXPIRED', 'LEASE_LAPSED', 'INTERRUPTED', 'TOO_MANY_TASKS', 'UNKNOWN_TASK',
  'INVALID_TRANSITION', 'SKILL_MISMATCH', 'STEP_FAILED', 'DUPLICATE_RUN', 'UNKNOWN_RUN', 'LIMIT_EXCEEDED', 'REVOCATION_QUOTA',
  'STOPPED', 'NOT_LOADED',
  // node
  'INVALID_CONFIG', 'LAYER_FAILED', 'AGENT_START_FAILED', 'AGENT_START_TIMEOUT', 'UNSUPPORTED_PROTOCOL', 'AGENT_EXITED',
  'AGENT_PROTOCOL_ERROR', 'LINE_TOO_LONG', 'PROTOCOL_IN_USE', 'USAGE',
  // no family
  'MY_CODE', 'ERROR', 'TRANSIENT', '', 'constructor', '__proto__', 'toString'
]

/** The six lists as they stood before the table (collab and interconnect, issue 10) */
const BEFORE = {
  /** collab tasks/wire.ts TRANSIENT: the requester repeats a control call, the lease watch resubscribes */
  repeat: new Set(['STREAM_CLOSED', 'DIAL_FAILED', 'NOT_STARTED', 'PROTOCOL_NOT_SUPPORTED', 'TIMEOUT']),
  /** collab tasks/gateway.ts NOT_REACHED: the relay tries the next executor peer */
  gatewayNext: new Set(['DIAL_FAILED', 'PROTOCOL_NOT_SUPPORTED']),
  /** collab tasks/feedback.ts NO_ANSWER: an unanswered task stream is a failure in ranking */
  noAnswer: new Set(['STREAM_CLOSED', 'DIAL_FAILED', 'NOT_STARTED', 'PROTOCOL_NOT_SUPPORTED', 'TIMEOUT', 'HANDLER_ERROR', 'LEASE_LAPSED', 'PEER_UNREACHABLE']),
  /** collab orchestration/failures.ts NOT_REACHED: a subtask that created no task */
  notReached: new Set(['DIAL_FAILED', 'UNKNOWN_AGENT', 'PEER_UNREACHABLE', 'NOT_STARTED', 'PROTOCOL_NOT_SUPPORTED', 'AGENT_NOT_HERE']),
  /** interconnect routing.ts FAILURE_CODES: a delivery error that counts against the agent */
  routeFailure: new Set(['TIMEOUT', 'HANDLER_ERROR']),
  /** interconnect routing.ts NEXT_PEER_CODES: a delivery error after which the next peer is tried */
  routeNext: new Set(['DIAL_FAILED', 'STREAM_CLOSED', 'PROTOCOL_NOT_SUPPORTED'])
}

type Verdict = 'not-here' | 'next-peer' | 'count-and-throw' | 'throw'

/** Routing's decision on a delivery error, before: AGENT_NOT_HERE first, then the next peer, then the record */
function routeBefore (code: string): Verdict {
  if (code === 'AGENT_NOT_HERE') return 'not-here'
  if (BEFORE.routeNext.has(code)) return 'next-peer'
  return BEFORE.routeFailure.has(code) ? 'count-and-throw' : 'throw'
}

/** The same decision read from the table, as routing.ts reads it */
function routeAfter (code: string): Verdict {
  if (code === 'AGENT_NOT_HERE') return 'not-here'
  if (mayTryAnotherPeer({ code }, { reader: 'interconnect' })) return 'next-peer'
  return countsAgainstAgent({ code }, { reader: 'interconnect', reachedOnly: true }) ? 'count-and-throw' : 'throw'
}

describe('the retry table', () => {
  it.each(CODES)('%s: every site decides as before', (code) => {
    const err = Object.assign(new Error('x'), { code })
    expect(isRepeatable(err), 'wire TRANSIENT').toBe(BEFORE.repeat.has(code))
    expect(mayTryAnotherPeer(err, { once: true }), 'gateway NOT_REACHED').toBe(BEFORE.gatewayNext.has(code))
    expect(countsAgainstAgent(code), 'feedback NO_ANSWER').toBe(BEFORE.noAnswer.has(code))
    expect(isUnreached(code), 'orchestration NOT_REACHED').toBe(BEFORE.notReached.has(code))
    expect(routeAfter(code), 'routing FAILURE_CODES / NEXT_PEER_CODES').toBe(routeBefore(code))
  })

  it('an error without a code, or no error, is an answer: no site retries or counts it', () => {
    for (const err of [undefined, null, new Error('x'), { code: 42 }, 'not a code']) {
      expect(retryFacts(err)).toBe(ANSWER)
      expect(isRepeatable(err) || isUnreached(err) || mayTryAnotherPeer(err) || countsAgainstAgent(err)).toBe(false)
    }
  })

  it('a layer reads the codes of layers above it as answers', () => {
    expect(retryFacts('LEASE_LAPSED')).toBe(RETRY_TABLE.LEASE_LAPSED)
    expect(retryFacts('LEASE_LAPSED', { reader: 'interconnect' })).toBe(ANSWER)
    expect(retryFacts('PEER_UNREACHABLE', { reader: 'transport' })).toBe(ANSWER)
    expect(retryFacts('TIMEOUT', { reader: 'transport' })).toBe(RETRY_TABLE.TIMEOUT)
  })

  it('the table is frozen', () => {
    expect(Object.isFrozen(RETRY_TABLE)).toBe(true)
    expect(Object.isFrozen(RETRY_TABLE.TIMEOUT)).toBe(true)
  })
})
