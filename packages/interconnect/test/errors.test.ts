/**
 * The interconnect's error classes: written-out names and wire codes, and
 * errors from a peer rebuilt as their class
 */
import { CodedError } from '@ioa/transport'
import { describe, expect, it } from 'vitest'
import {
  AgentNotHereError, BadRequestError, CardBindingError, DuplicateAgentError, ExpiredCardError, ForbiddenError,
  InterconnectError, InvalidCapabilityError, InvalidCardError, InvalidDidError, InvalidSignatureError, NoInboxError,
  NotExportedError, PeerUnreachableError, RateLimitedError, UnknownAgentError, InvalidSnapshotError, SnapshotTooLargeError, fromRemote
} from '../src/index.js'

const CLASSES = [
  [InvalidDidError, 'INVALID_DID', 'Invalid DID'],
  [InvalidCapabilityError, 'INVALID_CAPABILITY', 'Invalid capability name'],
  [InvalidCardError, 'INVALID_CARD', 'Invalid agent card'],
  [InvalidSignatureError, 'INVALID_SIGNATURE', 'Invalid signature'],
  [ExpiredCardError, 'CARD_EXPIRED', 'Card expired'],
  [CardBindingError, 'CARD_BINDING', 'Card is not bound to the serving peer'],
  [UnknownAgentError, 'UNKNOWN_AGENT', 'Unknown agent'],
  [PeerUnreachableError, 'PEER_UNREACHABLE', 'Peer unreachable'],
  [AgentNotHereError, 'AGENT_NOT_HERE', 'Agent is not hosted on this peer'],
  [NoInboxError, 'NO_INBOX', 'Agent has no inbox'],
  [NotExportedError, 'NOT_EXPORTED', 'Not exported by this gateway'],
  [RateLimitedError, 'RATE_LIMITED', 'Rate limit exceeded'],
  [DuplicateAgentError, 'DUPLICATE_AGENT', 'Agent already hosted'],
  [BadRequestError, 'BAD_REQUEST', 'Bad request'],
  [ForbiddenError, 'FORBIDDEN', 'Forbidden'],
  [InvalidSnapshotError, 'INVALID_SNAPSHOT', 'Invalid capability snapshot'],
  [SnapshotTooLargeError, 'SNAPSHOT_TOO_LARGE', 'Capability snapshot too large']
] as const

describe('interconnect errors', () => {
  it.each(CLASSES)('%o has its name, code and default message', (C, code, message) => {
    const err = new C()
    expect(C.code).toBe(code)
    expect(err).toBeInstanceOf(InterconnectError)
    expect(err).toBeInstanceOf(CodedError)
    expect(err.name).toBe(C.name)
    expect(err.code).toBe(code)
    expect(err.message).toBe(message)
  })

  it('rebuilds an error from a peer as its class, with remote === true', () => {
    const remote = Object.assign(new Error('Agent x is not hosted on y'), { code: 'AGENT_NOT_HERE', remote: true })
    const err = fromRemote(remote) as AgentNotHereError & { remote: boolean }
    expect(err).toBeInstanceOf(AgentNotHereError)
    expect(err.name).toBe('AgentNotHereError')
    expect(err.message).toBe('Agent x is not hosted on y')
    expect(err.remote).toBe(true)
    expect(err.cause).toBe(remote)
  })

  it('leaves local errors and unknown codes alone', () => {
    const local = new NotExportedError()
    expect(fromRemote(local)).toBe(local)
    const other = Object.assign(new Error('x'), { code: 'TIMEOUT', remote: true })
    expect(fromRemote(other)).toBe(other)
  })
})
