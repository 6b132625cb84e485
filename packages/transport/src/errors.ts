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
    this.name = 'MessagingError'
  }
}

/** The remote peer has no handler for the requested method */
export class UnknownMethodError extends MessagingError {
  static override name = 'UnknownMethodError'
  static code = 'UNKNOWN_METHOD'
  constructor (message = 'Unknown method', options?: ErrorOptions) {
    super(UnknownMethodError.code, message, options)
    this.name = UnknownMethodError.name
  }
}

/** An encoded frame exceeds the maximum frame size */
export class PayloadTooLargeError extends MessagingError {
  static override name = 'PayloadTooLargeError'
  static code = 'PAYLOAD_TOO_LARGE'
  constructor (message = 'Payload too large', options?: ErrorOptions) {
    super(PayloadTooLargeError.code, message, options)
    this.name = PayloadTooLargeError.name
  }
}

/** A request, handler or idle stream ran out of time */
export class TimeoutError extends MessagingError {
  static override name = 'TimeoutError'
  static code = 'TIMEOUT'
  constructor (message = 'Timed out', options?: ErrorOptions) {
    super(TimeoutError.code, message, options)
    this.name = TimeoutError.name
  }
}

/** The remote handler threw an error that had no code of its own */
export class HandlerError extends MessagingError {
  static override name = 'HandlerError'
  static code = 'HANDLER_ERROR'
  constructor (message = 'Handler failed', options?: ErrorOptions) {
    super(HandlerError.code, message, options)
    this.name = HandlerError.name
  }
}

/** The peer has too many requests in flight */
export class TooManyRequestsError extends MessagingError {
  static override name = 'TooManyRequestsError'
  static code = 'TOO_MANY_REQUESTS'
  constructor (message = 'Too many requests in flight', options?: ErrorOptions) {
    super(TooManyRequestsError.code, message, options)
    this.name = TooManyRequestsError.name
  }
}

/** A frame could not be decoded or broke the envelope rules */
export class MalformedFrameError extends MessagingError {
  static override name = 'MalformedFrameError'
  static code = 'MALFORMED_FRAME'
  constructor (message = 'Malformed frame', options?: ErrorOptions) {
    super(MalformedFrameError.code, message, options)
    this.name = MalformedFrameError.name
  }
}

/** A length prefix does not decode: over 9 bytes, or not in shortest form */
export class MalformedLengthError extends MessagingError {
  static override name = 'MalformedLengthError'
  static code = 'MALFORMED_LENGTH'
  constructor (message = 'Malformed length prefix', options?: ErrorOptions) {
    super(MalformedLengthError.code, message, options)
    this.name = MalformedLengthError.name
  }
}

/**
 * A peer (or its address, or all peers together) holds more buffered bytes
 * of partial frames than the receiver allows
 */
export class ResourceExhaustedError extends MessagingError {
  static override name = 'ResourceExhaustedError'
  static code = 'RESOURCE_EXHAUSTED'
  constructor (message = 'Resource exhausted', options?: ErrorOptions) {
    super(ResourceExhaustedError.code, message, options)
    this.name = ResourceExhaustedError.name
  }
}

/** The request was canceled, by the caller's signal or a CANCEL frame */
export class CanceledError extends MessagingError {
  static override name = 'CanceledError'
  static code = 'CANCELED'
  constructor (message = 'Canceled', options?: ErrorOptions) {
    super(CanceledError.code, message, options)
    this.name = CanceledError.name
  }
}

/** The stream carrying the request closed before the response arrived */
export class StreamClosedError extends MessagingError {
  static override name = 'StreamClosedError'
  static code = 'STREAM_CLOSED'
  constructor (message = 'Stream closed', options?: ErrorOptions) {
    super(StreamClosedError.code, message, options)
    this.name = StreamClosedError.name
  }
}

/** The messaging service has not been started or was stopped */
export class NotStartedError extends MessagingError {
  static override name = 'NotStartedError'
  static code = 'NOT_STARTED'
  constructor (message = 'Not started', options?: ErrorOptions) {
    super(NotStartedError.code, message, options)
    this.name = NotStartedError.name
  }
}

/** A caller passed an argument that can never work (bad method name, etc.) */
export class InvalidArgumentError extends MessagingError {
  static override name = 'InvalidArgumentError'
  static code = 'INVALID_ARGUMENT'
  constructor (message = 'Invalid argument', options?: ErrorOptions) {
    super(InvalidArgumentError.code, message, options)
    this.name = InvalidArgumentError.name
  }
}

/** The peer could not be dialled (no address, refused, unreachable) */
export class DialFailedError extends MessagingError {
  static override name = 'DialFailedError'
  static code = 'DIAL_FAILED'
  constructor (message = 'Dial failed', options?: ErrorOptions) {
    super(DialFailedError.code, message, options)
    this.name = DialFailedError.name
  }
}

/** The peer is connected but does not speak the requested protocol */
export class ProtocolNotSupportedError extends MessagingError {
  static override name = 'ProtocolNotSupportedError'
  static code = 'PROTOCOL_NOT_SUPPORTED'
  constructor (message = 'Protocol not supported', options?: ErrorOptions) {
    super(ProtocolNotSupportedError.code, message, options)
    this.name = ProtocolNotSupportedError.name
  }
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
    this.name = RemoteError.name
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

/** A class of error with a fixed wire code */
export interface CodedErrorClass<E extends Error & { code: string }> {
  new (message?: string, options?: ErrorOptions): E
  readonly code: string
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
 * A family of coded error classes sharing one base class, as the upper layers
 * define them: `define()` makes a named class per code, and `fromRemote()`
 * turns an error received from a peer (a {@link RemoteError} with one of the
 * family's codes) back into its class, with `remote === true`.
 */
export class ErrorFamily<E extends Error & { code: string }> {
  private readonly byCode = new Map<string, CodedErrorClass<E>>()
  private readonly Base: new (code: string, message: string, options?: ErrorOptions) => E

  constructor (Base: new (code: string, message: string, options?: ErrorOptions) => E) {
    this.Base = Base
  }

  define (name: string, code: string, fallback: string): CodedErrorClass<E> {
    if (!ERROR_CODE_PATTERN.test(code) || this.byCode.has(code)) {
      throw new InvalidArgumentError(`Invalid or duplicate error code ${code}`)
    }
    const Base = this.Base as unknown as new (code: string, message: string, options?: ErrorOptions) => Error & { code: string }
    const C = class extends Base {
      static override name = name
      static code = code
      constructor (message = fallback, options?: ErrorOptions) {
        super(code, message, options)
        this.name = name
      }
    }
    this.byCode.set(code, C as unknown as CodedErrorClass<E>)
    return C as unknown as CodedErrorClass<E>
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
