/**
 * Error classes of the transport layer.
 *
 * Errors that can cross the wire carry a stable `code` (see
 * `spec/transport.md`, "Error codes"). A remote error is rebuilt on the
 * requesting side as the class that owns its code, or as {@link RemoteError}
 * when the code belongs to an application.
 */

/**
 * Base class of every error that has a wire code
 */
export class MessagingError extends Error {
  static override name = 'MessagingError'
  /** The stable code carried on the wire */
  readonly code: string
  /** `true` when the error was produced by the remote peer */
  remote = false

  constructor (code: string, message: string, options?: ErrorOptions) {
    super(message, options)
    this.code = code
    this.name = new.target.name
  }
}

/** A class of error with a fixed wire code */
export interface CodedErrorClass<E extends Error & { code: string }> {
  new (message?: string, options?: ErrorOptions): E
  readonly code: string
}

/**
 * The base of an error class with a fixed code and a default message, the
 * one constructor every such class shares: a class written out as
 * `class TimeoutError extends withCode(MessagingError, 'TIMEOUT', 'Timed out') { static override name = 'TimeoutError' }`
 * is constructed with `(message?, options?)`, has `code` (and the static
 * `code`) set, and its `name` is its `static name`. `Base` is the family's
 * base class, constructed with `(code, message, options?)`; it sets `name`
 * from `new.target.name` (as {@link CodedError} and {@link MessagingError} do).
 */
export function withCode<E extends Error & { code: string }> (
  Base: new (code: string, message: string, options?: ErrorOptions) => E,
  code: string,
  defaultMessage: string
): CodedErrorClass<E> {
  const B = Base as unknown as new (code: string, message: string, options?: ErrorOptions) => Error
  return class extends B {
    static code = code
    constructor (message = defaultMessage, options?: ErrorOptions) {
      super(code, message, options)
    }
  } as unknown as CodedErrorClass<E>
}

/** The remote peer has no handler for the requested method */
export class UnknownMethodError extends withCode(MessagingError, 'UNKNOWN_METHOD', 'Unknown method') {
  static override name = 'UnknownMethodError'
}

/** An encoded frame exceeds the maximum frame size */
export class PayloadTooLargeError extends withCode(MessagingError, 'PAYLOAD_TOO_LARGE', 'Payload too large') {
  static override name = 'PayloadTooLargeError'
}

/** A request, handler or idle stream ran out of time */
export class TimeoutError extends withCode(MessagingError, 'TIMEOUT', 'Timed out') {
  static override name = 'TimeoutError'
}

/** The remote handler threw an error that had no code of its own */
export class HandlerError extends withCode(MessagingError, 'HANDLER_ERROR', 'Handler failed') {
  static override name = 'HandlerError'
}

/** The peer has too many requests in flight */
export class TooManyRequestsError extends withCode(MessagingError, 'TOO_MANY_REQUESTS', 'Too many requests in flight') {
  static override name = 'TooManyRequestsError'
}

/** A frame could not be decoded or broke the envelope rules */
export class MalformedFrameError extends withCode(MessagingError, 'MALFORMED_FRAME', 'Malformed frame') {
  static override name = 'MalformedFrameError'
}

/** A length prefix does not decode: over 9 bytes, or not in shortest form */
export class MalformedLengthError extends withCode(MessagingError, 'MALFORMED_LENGTH', 'Malformed length prefix') {
  static override name = 'MalformedLengthError'
}

/**
 * A peer (or its address, or all peers together) holds more buffered bytes
 * of partial frames than the receiver allows
 */
export class ResourceExhaustedError extends withCode(MessagingError, 'RESOURCE_EXHAUSTED', 'Resource exhausted') {
  static override name = 'ResourceExhaustedError'
}

/** The request was canceled, by the caller's signal or a CANCEL frame */
export class CanceledError extends withCode(MessagingError, 'CANCELED', 'Canceled') {
  static override name = 'CanceledError'
}

/** The stream carrying the request closed before the response arrived */
export class StreamClosedError extends withCode(MessagingError, 'STREAM_CLOSED', 'Stream closed') {
  static override name = 'StreamClosedError'
}

/** The messaging service has not been started or was stopped */
export class NotStartedError extends withCode(MessagingError, 'NOT_STARTED', 'Not started') {
  static override name = 'NotStartedError'
}

/** A caller passed an argument that can never work (bad method name, etc.) */
export class InvalidArgumentError extends withCode(MessagingError, 'INVALID_ARGUMENT', 'Invalid argument') {
  static override name = 'InvalidArgumentError'
}

/** The peer could not be dialled (no address, refused, unreachable) */
export class DialFailedError extends withCode(MessagingError, 'DIAL_FAILED', 'Dial failed') {
  static override name = 'DialFailedError'
}

/** The peer is connected but does not speak the requested protocol */
export class ProtocolNotSupportedError extends withCode(MessagingError, 'PROTOCOL_NOT_SUPPORTED', 'Protocol not supported') {
  static override name = 'ProtocolNotSupportedError'
}

/**
 * An error with an application-defined code raised by a remote handler.
 * Handlers throw `new RemoteError('MY_CODE', 'message')` (or any error with a
 * string `code`) to send a code the caller can branch on.
 */
export class RemoteError extends MessagingError {
  static override name = 'RemoteError'
  constructor (code: string, message: string, options?: ErrorOptions) {
    super(code, message, options)
  }
}

type ErrorCtor = new (message?: string) => MessagingError

const BY_CODE: Record<string, ErrorCtor> = {
  [UnknownMethodError.code]: UnknownMethodError,
  [PayloadTooLargeError.code]: PayloadTooLargeError,
  [TimeoutError.code]: TimeoutError,
  [HandlerError.code]: HandlerError,
  [TooManyRequestsError.code]: TooManyRequestsError,
  [MalformedFrameError.code]: MalformedFrameError,
  [MalformedLengthError.code]: MalformedLengthError,
  [ResourceExhaustedError.code]: ResourceExhaustedError,
  [CanceledError.code]: CanceledError,
  [StreamClosedError.code]: StreamClosedError,
  [InvalidArgumentError.code]: InvalidArgumentError
}

/**
 * Rebuild an error received on the wire as a typed error
 */
export function errorFromWire (code: string, message: string): MessagingError {
  const Ctor = BY_CODE[code]
  const err = Ctor == null ? new RemoteError(code, message) : new Ctor(message)
  err.remote = true
  return err
}

/** Codes an application may use: upper-case letters, digits and `_` */
export const ERROR_CODE_PATTERN = /^[A-Z][A-Z0-9_]{0,63}$/

/**
 * Pick the code and message to send for an error thrown by a handler
 */
export function errorToWire (err: unknown, maxMessageLength: number): { code: string, message: string } {
  let code = HandlerError.code
  let message = 'Handler failed'

  if (err instanceof Error) {
    message = err.message
    const c = (err as { code?: unknown }).code
    if (typeof c === 'string' && ERROR_CODE_PATTERN.test(c)) {
      code = c
    }
  } else if (typeof err === 'string') {
    message = err
  }

  if (message.length > maxMessageLength) {
    message = message.slice(0, maxMessageLength)
  }

  return { code, message }
}

/**
 * Base class of a family of coded errors (a layer's, an extension's): a
 * subclass needs only its `static name`, which becomes the instances' `name`
 */
export class CodedError extends Error {
  static override name = 'CodedError'
  /** The stable code (also the wire code of errors that cross the network) */
  readonly code: string

  constructor (code: string, message: string, options?: ErrorOptions) {
    super(message, options)
    this.code = code
    this.name = new.target.name
  }
}

/**
 * The registry of a family of coded error classes sharing one base class (a
 * layer's, an extension's): `register()` records classes written out with
 * {@link withCode}, and `fromRemote()` turns an error received from a peer
 * (a {@link RemoteError} with one of the family's codes) back into its
 * class, with `remote === true`.
 */
export class ErrorFamily<E extends Error & { code: string }> {
  private readonly byCode = new Map<string, CodedErrorClass<E>>()
  private readonly Base: new (code: string, message: string, options?: ErrorOptions) => E

  constructor (Base: new (code: string, message: string, options?: ErrorOptions) => E) {
    this.Base = Base
  }

  /** Record classes of the family by their code (a code may be registered once); returns the family */
  register (...classes: Array<CodedErrorClass<E>>): this {
    for (const C of classes) {
      if (!ERROR_CODE_PATTERN.test(C.code) || this.byCode.has(C.code)) {
        throw new InvalidArgumentError(`Invalid or duplicate error code ${C.code}`)
      }
      this.byCode.set(C.code, C)
    }
    return this
  }

  /**
   * Make and register a class at run time
   *
   * @deprecated a class made at run time cannot be named as a type: write it
   * out with {@link withCode} and {@link register} it
   */
  define (name: string, code: string, fallback: string): CodedErrorClass<E> {
    const Coded = withCode(this.Base, code, fallback) as unknown as new (message?: string, options?: ErrorOptions) => Error
    const C = class extends Coded {
      static override name = name
    } as unknown as CodedErrorClass<E>
    this.register(C)
    return C
  }

  fromRemote (err: unknown): unknown {
    const e = err as { code?: unknown, remote?: unknown, message?: string } | undefined
    if (e?.remote === true && typeof e.code === 'string') {
      const C = this.byCode.get(e.code)
      if (C != null) {
        const out = new C(e.message, { cause: err })
        ;(out as E & { remote: boolean }).remote = true
        return out
      }
    }
    return err
  }
}
