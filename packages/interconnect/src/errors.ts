/**
 * Error classes of the interconnect layer, written out (as
 * `@ioa/transport`'s are). Each has a stable `code` that is also used on the
 * wire (see `spec/interconnect.md`, "Errors"); `fromRemote` rebuilds an error
 * received from a peer as the class that owns its code.
 */
import { CodedError } from '@ioa/transport'
import type { CodedErrorClass } from '@ioa/transport'

/** Base class of every interconnect error */
export class InterconnectError extends CodedError {
  static override name = 'InterconnectError'
}

export type InterconnectErrorClass = CodedErrorClass<InterconnectError>

/** A DID or key could not be parsed, or is of an unsupported type */
export class InvalidDidError extends InterconnectError {
  static override name = 'InvalidDidError'
  static code = 'INVALID_DID'
  constructor (message = 'Invalid DID', options?: ErrorOptions) {
    super(InvalidDidError.code, message, options)
    this.name = InvalidDidError.name
  }
}

/** A capability name breaks the grammar */
export class InvalidCapabilityError extends InterconnectError {
  static override name = 'InvalidCapabilityError'
  static code = 'INVALID_CAPABILITY'
  constructor (message = 'Invalid capability name', options?: ErrorOptions) {
    super(InvalidCapabilityError.code, message, options)
    this.name = InvalidCapabilityError.name
  }
}

/** A card does not follow the schema */
export class InvalidCardError extends InterconnectError {
  static override name = 'InvalidCardError'
  static code = 'INVALID_CARD'
  constructor (message = 'Invalid agent card', options?: ErrorOptions) {
    super(InvalidCardError.code, message, options)
    this.name = InvalidCardError.name
  }
}

/** A signature does not verify */
export class InvalidSignatureError extends InterconnectError {
  static override name = 'InvalidSignatureError'
  static code = 'INVALID_SIGNATURE'
  constructor (message = 'Invalid signature', options?: ErrorOptions) {
    super(InvalidSignatureError.code, message, options)
    this.name = InvalidSignatureError.name
  }
}

/** A card (or grant) is past its expiry, or not yet valid */
export class ExpiredCardError extends InterconnectError {
  static override name = 'ExpiredCardError'
  static code = 'CARD_EXPIRED'
  constructor (message = 'Card expired', options?: ErrorOptions) {
    super(ExpiredCardError.code, message, options)
    this.name = ExpiredCardError.name
  }
}

/** A card was served by a peer it is not bound to */
export class CardBindingError extends InterconnectError {
  static override name = 'CardBindingError'
  static code = 'CARD_BINDING'
  constructor (message = 'Card is not bound to the serving peer', options?: ErrorOptions) {
    super(CardBindingError.code, message, options)
    this.name = CardBindingError.name
  }
}

/** No agent with this id could be found */
export class UnknownAgentError extends InterconnectError {
  static override name = 'UnknownAgentError'
  static code = 'UNKNOWN_AGENT'
  constructor (message = 'Unknown agent', options?: ErrorOptions) {
    super(UnknownAgentError.code, message, options)
    this.name = UnknownAgentError.name
  }
}

/** The agent's peer could not be reached */
export class PeerUnreachableError extends InterconnectError {
  static override name = 'PeerUnreachableError'
  static code = 'PEER_UNREACHABLE'
  constructor (message = 'Peer unreachable', options?: ErrorOptions) {
    super(PeerUnreachableError.code, message, options)
    this.name = PeerUnreachableError.name
  }
}

/** The peer does not host the addressed agent */
export class AgentNotHereError extends InterconnectError {
  static override name = 'AgentNotHereError'
  static code = 'AGENT_NOT_HERE'
  constructor (message = 'Agent is not hosted on this peer', options?: ErrorOptions) {
    super(AgentNotHereError.code, message, options)
    this.name = AgentNotHereError.name
  }
}

/** The agent has no inbox handler */
export class NoInboxError extends InterconnectError {
  static override name = 'NoInboxError'
  static code = 'NO_INBOX'
  constructor (message = 'Agent has no inbox', options?: ErrorOptions) {
    super(NoInboxError.code, message, options)
    this.name = NoInboxError.name
  }
}

/** A gateway refused to forward: the export policy does not allow it */
export class NotExportedError extends InterconnectError {
  static override name = 'NotExportedError'
  static code = 'NOT_EXPORTED'
  constructor (message = 'Not exported by this gateway', options?: ErrorOptions) {
    super(NotExportedError.code, message, options)
    this.name = NotExportedError.name
  }
}

/** A gateway refused to forward: the caller exceeded its rate */
export class RateLimitedError extends InterconnectError {
  static override name = 'RateLimitedError'
  static code = 'RATE_LIMITED'
  constructor (message = 'Rate limit exceeded', options?: ErrorOptions) {
    super(RateLimitedError.code, message, options)
    this.name = RateLimitedError.name
  }
}

/** An agent with this name or id is already hosted */
export class DuplicateAgentError extends InterconnectError {
  static override name = 'DuplicateAgentError'
  static code = 'DUPLICATE_AGENT'
  constructor (message = 'Agent already hosted', options?: ErrorOptions) {
    super(DuplicateAgentError.code, message, options)
    this.name = DuplicateAgentError.name
  }
}

/** A request to the interconnect protocols was malformed */
export class BadRequestError extends InterconnectError {
  static override name = 'BadRequestError'
  static code = 'BAD_REQUEST'
  constructor (message = 'Bad request', options?: ErrorOptions) {
    super(BadRequestError.code, message, options)
    this.name = BadRequestError.name
  }
}

/** The caller is not allowed to do this */
export class ForbiddenError extends InterconnectError {
  static override name = 'ForbiddenError'
  static code = 'FORBIDDEN'
  constructor (message = 'Forbidden', options?: ErrorOptions) {
    super(ForbiddenError.code, message, options)
    this.name = ForbiddenError.name
  }
}

/** The classes by wire code, for `fromRemote` */
const BY_CODE = new Map<string, InterconnectErrorClass>(
  ([InvalidDidError, InvalidCapabilityError, InvalidCardError, InvalidSignatureError, ExpiredCardError, CardBindingError, UnknownAgentError, PeerUnreachableError, AgentNotHereError, NoInboxError, NotExportedError, RateLimitedError, DuplicateAgentError, BadRequestError, ForbiddenError] as InterconnectErrorClass[]).map(C => [C.code, C])
)

/**
 * Turn an error received from a remote peer (a transport `RemoteError` with one
 * of these codes) into the matching class, with `remote === true`; other
 * errors pass unchanged
 */
export function fromRemote (err: unknown): unknown {
  const e = err as { code?: unknown, remote?: unknown, message?: string } | undefined
  if (e?.remote !== true || typeof e.code !== 'string') return err
  const C = BY_CODE.get(e.code)
  if (C == null) return err
  const out = new C(e.message, { cause: err })
  ;(out as InterconnectError & { remote: boolean }).remote = true
  return out
}
