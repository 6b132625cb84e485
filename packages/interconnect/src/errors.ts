/**
 * Error classes of the interconnect layer. Each has a stable `code` that is
 * also used on the wire (see `spec/interconnect.md`, "Errors").
 */
import { CodedError, ErrorFamily } from '@ioa/transport'
import type { CodedErrorClass } from '@ioa/transport'

export class InterconnectError extends CodedError {
  static override name = 'InterconnectError'
}

export type InterconnectErrorClass = CodedErrorClass<InterconnectError>

const family = new ErrorFamily<InterconnectError>(InterconnectError)

/**
 * Turn an error received from a remote peer (a transport `RemoteError` with one
 * of these codes) into the matching class; other errors pass unchanged
 */
export function fromRemote (err: unknown): unknown {
  return family.fromRemote(err)
}

/** A DID or key could not be parsed, or is of an unsupported type */
export const InvalidDidError = family.define('InvalidDidError', 'INVALID_DID', 'Invalid DID')
/** A capability name breaks the grammar */
export const InvalidCapabilityError = family.define('InvalidCapabilityError', 'INVALID_CAPABILITY', 'Invalid capability name')
/** A card does not follow the schema */
export const InvalidCardError = family.define('InvalidCardError', 'INVALID_CARD', 'Invalid agent card')
/** A signature does not verify */
export const InvalidSignatureError = family.define('InvalidSignatureError', 'INVALID_SIGNATURE', 'Invalid signature')
/** A card (or grant) is past its expiry, or not yet valid */
export const ExpiredCardError = family.define('ExpiredCardError', 'CARD_EXPIRED', 'Card expired')
/** A card was served by a peer it is not bound to */
export const CardBindingError = family.define('CardBindingError', 'CARD_BINDING', 'Card is not bound to the serving peer')
/** No agent with this id could be found */
export const UnknownAgentError = family.define('UnknownAgentError', 'UNKNOWN_AGENT', 'Unknown agent')
/** The agent's peer could not be reached */
export const PeerUnreachableError = family.define('PeerUnreachableError', 'PEER_UNREACHABLE', 'Peer unreachable')
/** The peer does not host the addressed agent */
export const AgentNotHereError = family.define('AgentNotHereError', 'AGENT_NOT_HERE', 'Agent is not hosted on this peer')
/** The agent has no inbox handler */
export const NoInboxError = family.define('NoInboxError', 'NO_INBOX', 'Agent has no inbox')
/** A gateway refused to forward: the export policy does not allow it */
export const NotExportedError = family.define('NotExportedError', 'NOT_EXPORTED', 'Not exported by this gateway')
/** A gateway refused to forward: the caller exceeded its rate */
export const RateLimitedError = family.define('RateLimitedError', 'RATE_LIMITED', 'Rate limit exceeded')
/** An agent with this name or id is already hosted */
export const DuplicateAgentError = family.define('DuplicateAgentError', 'DUPLICATE_AGENT', 'Agent already hosted')
/** A request to the interconnect protocols was malformed */
export const BadRequestError = family.define('BadRequestError', 'BAD_REQUEST', 'Bad request')
/** The caller is not allowed to do this */
export const ForbiddenError = family.define('ForbiddenError', 'FORBIDDEN', 'Forbidden')
