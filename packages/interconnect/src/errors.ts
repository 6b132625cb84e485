/**
 * Error classes of the interconnect layer, written out (as
 * `@ioa/transport`'s are). Each has a stable `code` that is also used on the
 * wire (see `spec/interconnect.md`, "Errors"); `fromRemote` rebuilds an error
 * received from a peer as the class that owns its code.
 */
import { CodedError, ErrorFamily, withCode } from '@ioa/transport'
import type { CodedErrorClass } from '@ioa/transport'

/** Base class of every interconnect error */
export class InterconnectError extends CodedError {
  static override name = 'InterconnectError'
}

export type InterconnectErrorClass = CodedErrorClass<InterconnectError>

/** A DID or key could not be parsed, or is of an unsupported type */
export class InvalidDidError extends withCode(InterconnectError, 'INVALID_DID', 'Invalid DID') {
  static override name = 'InvalidDidError'
}

/** A capability name breaks the grammar */
export class InvalidCapabilityError extends withCode(InterconnectError, 'INVALID_CAPABILITY', 'Invalid capability name') {
  static override name = 'InvalidCapabilityError'
}

/** A card does not follow the schema */
export class InvalidCardError extends withCode(InterconnectError, 'INVALID_CARD', 'Invalid agent card') {
  static override name = 'InvalidCardError'
}

/** A signature does not verify */
export class InvalidSignatureError extends withCode(InterconnectError, 'INVALID_SIGNATURE', 'Invalid signature') {
  static override name = 'InvalidSignatureError'
}

/** A card (or grant) is past its expiry, or not yet valid */
export class ExpiredCardError extends withCode(InterconnectError, 'CARD_EXPIRED', 'Card expired') {
  static override name = 'ExpiredCardError'
}

/** A card was served by a peer it is not bound to */
export class CardBindingError extends withCode(InterconnectError, 'CARD_BINDING', 'Card is not bound to the serving peer') {
  static override name = 'CardBindingError'
}

/** No agent with this id could be found */
export class UnknownAgentError extends withCode(InterconnectError, 'UNKNOWN_AGENT', 'Unknown agent') {
  static override name = 'UnknownAgentError'
}

/** The agent's peer could not be reached */
export class PeerUnreachableError extends withCode(InterconnectError, 'PEER_UNREACHABLE', 'Peer unreachable') {
  static override name = 'PeerUnreachableError'
}

/** The peer does not host the addressed agent */
export class AgentNotHereError extends withCode(InterconnectError, 'AGENT_NOT_HERE', 'Agent is not hosted on this peer') {
  static override name = 'AgentNotHereError'
}

/** The agent has no inbox handler */
export class NoInboxError extends withCode(InterconnectError, 'NO_INBOX', 'Agent has no inbox') {
  static override name = 'NoInboxError'
}

/** A gateway refused to forward: the export policy does not allow it */
export class NotExportedError extends withCode(InterconnectError, 'NOT_EXPORTED', 'Not exported by this gateway') {
  static override name = 'NotExportedError'
}

/** A gateway refused to forward: the caller exceeded its rate */
export class RateLimitedError extends withCode(InterconnectError, 'RATE_LIMITED', 'Rate limit exceeded') {
  static override name = 'RateLimitedError'
}

/** An agent with this name or id is already hosted */
export class DuplicateAgentError extends withCode(InterconnectError, 'DUPLICATE_AGENT', 'Agent already hosted') {
  static override name = 'DuplicateAgentError'
}

/** A request to the interconnect protocols was malformed */
export class BadRequestError extends withCode(InterconnectError, 'BAD_REQUEST', 'Bad request') {
  static override name = 'BadRequestError'
}

/** The caller is not allowed to do this */
export class ForbiddenError extends withCode(InterconnectError, 'FORBIDDEN', 'Forbidden') {
  static override name = 'ForbiddenError'
}

/** A capability snapshot received over gossip breaks its schema (spec section 12.2) */
export class InvalidSnapshotError extends withCode(InterconnectError, 'INVALID_SNAPSHOT', 'Invalid capability snapshot') {
  static override name = 'InvalidSnapshotError'
}

/** A capability snapshot has more bytes or capabilities than the receiver accepts (spec section 12.2) */
export class SnapshotTooLargeError extends withCode(InterconnectError, 'SNAPSHOT_TOO_LARGE', 'Capability snapshot too large') {
  static override name = 'SnapshotTooLargeError'
}

/** An index answer holds a snapshot that does not announce the capability asked for (spec section 12.6) */
export class UnrequestedSnapshotError extends withCode(InterconnectError, 'SNAPSHOT_NOT_REQUESTED', 'Index answer holds a snapshot not asked for') {
  static override name = 'UnrequestedSnapshotError'
}

/** The classes by wire code, for `fromRemote` */
const FAMILY = new ErrorFamily<InterconnectError>(InterconnectError).register(
  InvalidDidError, InvalidCapabilityError, InvalidCardError, InvalidSignatureError, ExpiredCardError, CardBindingError, UnknownAgentError,
  PeerUnreachableError, AgentNotHereError, NoInboxError, NotExportedError, RateLimitedError, DuplicateAgentError, BadRequestError, ForbiddenError,
  InvalidSnapshotError, SnapshotTooLargeError, UnrequestedSnapshotError
)

/**
 * Turn an error received from a remote peer (a transport `RemoteError` with one
 * of these codes) into the matching class, with `remote === true`; other
 * errors pass unchanged
 */
export function fromRemote (err: unknown): unknown {
  return FAMILY.fromRemote(err)
}
