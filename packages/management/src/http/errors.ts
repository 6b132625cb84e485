/**
 * Errors of the management HTTP server: the ones it throws to its caller
 * (a bad address, a port it cannot listen on) and the refusals it answers
 * with (spec/management.md 2.2), each with its HTTP status.
 */
import { withCode } from '@ioa/transport'
import { ManagementError } from '../errors.js'

/** Base class of the HTTP server's errors: a management error like the protocol's and tracing's */
export class ManagementHttpError extends ManagementError {
  static override name = 'ManagementHttpError'
}

/** `listen` is not `host:port` with an IP address or `localhost` */
export class InvalidHttpAddressError extends withCode(ManagementHttpError, 'INVALID_HTTP_ADDRESS', 'Invalid management HTTP address') {
  static override name = 'InvalidHttpAddressError'
}

/** The server could not listen (the port is taken, the address is not local) */
export class HttpListenError extends withCode(ManagementHttpError, 'HTTP_LISTEN_FAILED', 'The management HTTP server could not listen') {
  static override name = 'HttpListenError'
}

/** A refusal the server answers with: its code and HTTP status (spec/management.md 2.2) */
export interface Refusal {
  status: number
  code: string
  message: string
}

/** The refusals of spec/management.md 2.2 */
export const REFUSALS = {
  misdirected: { status: 421, code: 'MISDIRECTED_HOST', message: 'The Host header names neither an IP address nor localhost nor an allowed host' },
  unauthorized: { status: 401, code: 'UNAUTHORIZED', message: 'The operator\'s token is needed: open the login URL `ioa start` printed, or send Authorization: Bearer <token>' },
  loginUsed: { status: 401, code: 'LOGIN_USED', message: 'This login link was used already: it logs in once. The browser that opened it first stays logged in; elsewhere, use Authorization: Bearer <token>, or ask for a new link (ioa login)' },
  badRequest: { status: 400, code: 'BAD_REQUEST', message: 'The body must be JSON {"proofs": [token, …]}: the leaf first, each token the base64url of its DAG-CBOR encoding' },
  loginProofUsed: { status: 401, code: 'LOGIN_PROOF_USED', message: 'This delegation was used for a login link already: issue a new one' },
  loginProofTooLong: { status: 401, code: 'LOGIN_PROOF_TOO_LONG', message: 'The leaf token of a login-link request must expire within maxLoginProofTtl' },
  noLoginAuthority: { status: 403, code: 'NO_OPERATOR', message: 'This node has no operator configured: only its token can ask for a new login link' },
  crossOrigin: { status: 403, code: 'CROSS_ORIGIN', message: 'Requests from another origin are refused' },
  notFound: { status: 404, code: 'NOT_FOUND', message: 'No such path' },
  method: { status: 405, code: 'METHOD_NOT_ALLOWED', message: 'Method not allowed on this path' },
  tooLarge: { status: 413, code: 'REQUEST_TOO_LARGE', message: 'The request body is larger than the server accepts' },
  internal: { status: 500, code: 'INTERNAL', message: 'The request failed inside the node' }
} satisfies Record<string, Refusal>
