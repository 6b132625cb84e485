/**
 * Error classes of the interconnect layer. Each has a stable `code` that is
 * also used on the wire (see `spec/interconnect.md`, "Errors").
 */

export class InterconnectError extends Error {
  static override name = 'InterconnectError'
  readonly code: string

  constructor (code: string, message: string, options?: ErrorOptions) {
    super(message, options)
    this.code = code
    this.name = 'InterconnectError'
  }
}

export interface InterconnectErrorClass {
  new (message?: string, options?: ErrorOptions): InterconnectError
  readonly code: string
}

const BY_CODE = new Map<string, InterconnectErrorClass>()

function define (name: string, code: string, fallback: string): InterconnectErrorClass {
  const C = class extends InterconnectError {
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

/**
 * Turn an error received from a remote peer (a transport `RemoteError` with an
 * interconnect code) into the matching interconnect class; other errors are
 * returned unchanged
 */
export function fromRemote (err: unknown): unknown {
  const e = err as { code?: unknown, remote?: unknown, message?: string } | undefined
  if (e?.remote === true && typeof e.code === 'string') {
    const C = BY_CODE.get(e.code)
    if (C != null) {
      const out = new C(e.message, { cause: err })
      ;(out as InterconnectError & { remote: boolean }).remote = true
      return out
    }
  }
  return err
}

/** A DID or key could not be parsed, or is of an unsupported type */
export const InvalidDidError = define('InvalidDidError', 'INVALID_DID', 'Invalid DID')
/** A capability name breaks the grammar */
export const InvalidCapabilityError = define('InvalidCapabilityError', 'INVALID_CAPABILITY', 'Invalid capability name')
/** A card does not follow the schema */
export const InvalidCardError = define('InvalidCardError', 'INVALID_CARD', 'Invalid agent card')
/** A signature does not verify */
export const InvalidSignatureError = define('InvalidSignatureError', 'INVALID_SIGNATURE', 'Invalid signature')
/** A card (or grant) is past its expiry, or not yet valid */
export const ExpiredCardError = define('ExpiredCardError', 'CARD_EXPIRED', 'Card expired')
/** A card was served by a peer it is not bound to */
export const CardBindingError = define('CardBindingError', 'CARD_BINDING', 'Card is not bound to the serving peer')
/** No agent with this id could be found */
export const UnknownAgentError = define('UnknownAgentError', 'UNKNOWN_AGENT', 'Unknown agent')
/** The agent's peer could not be reached */
export const PeerUnreachableError = define('PeerUnreachableError', 'PEER_UNREACHABLE', 'Peer unreachable')
/** The peer does not host the addressed agent */
export const AgentNotHereError = define('AgentNotHereError', 'AGENT_NOT_HERE', 'Agent is not hosted on this peer')
/** The agent has no inbox handler */
export const NoInboxError = define('NoInboxError', 'NO_INBOX', 'Agent has no inbox')
/** A gateway refused to forward: the export policy does not allow it */
export const NotExportedError = define('NotExportedError', 'NOT_EXPORTED', 'Not exported by this gateway')
/** A gateway refused to forward: the caller exceeded its rate */
export const RateLimitedError = define('RateLimitedError', 'RATE_LIMITED', 'Rate limit exceeded')
/** An agent with this name or id is already hosted */
export const DuplicateAgentError = define('DuplicateAgentError', 'DUPLICATE_AGENT', 'Agent already hosted')
/** A request to the interconnect protocols was malformed */
export const BadRequestError = define('BadRequestError', 'BAD_REQUEST', 'Bad request')
/** The caller is not allowed to do this */
export const ForbiddenError = define('ForbiddenError', 'FORBIDDEN', 'Forbidden')
