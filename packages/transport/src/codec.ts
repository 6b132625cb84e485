/**
 * The messaging envelope: one DAG-CBOR map per length-prefixed frame.
 * The normative description is `spec/transport.md`.
 */
import * as dagCbor from '@ipld/dag-cbor'
import * as varint from 'uint8-varint'
import { scanBody } from './cbor-scan.js'
import { MalformedFrameError } from './errors.js'
import type { ScanLimits } from './cbor-scan.js'
import type { Uint8ArrayList } from 'uint8arraylist'

export const FrameType = {
  REQUEST: 1,
  STREAM_REQUEST: 2,
  RESPONSE: 3,
  ITEM: 4,
  END: 5,
  ERROR: 6,
  CANCEL: 7,
  CREDIT: 8
} as const

export type FrameTypeValue = typeof FrameType[keyof typeof FrameType]

export interface RequestFrame {
  type: typeof FrameType.REQUEST | typeof FrameType.STREAM_REQUEST
  id: number
  method: string
  payload: unknown
  /** How long the requester will wait, in ms */
  timeout?: number
  /** STREAM_REQUEST only: how many ITEM frames the server may send before the next CREDIT */
  credit?: number
  /**
   * Set when the payload holds a float whose value is a safe integer (or
   * -0): decoding and encoding the payload again gives other bytes (the
   * transport accepts it; a protocol that needs canonical payloads refuses it)
   */
  nonCanonical?: true
}

export interface PayloadFrame {
  type: typeof FrameType.RESPONSE | typeof FrameType.ITEM
  id: number
  payload: unknown
}

export interface ControlFrame {
  type: typeof FrameType.END | typeof FrameType.CANCEL
  id: number
}

export interface CreditFrame {
  type: typeof FrameType.CREDIT
  id: number
  credit: number
}

export interface ErrorFrame {
  type: typeof FrameType.ERROR
  id: number
  code: string
  message: string
}

export type Frame = RequestFrame | PayloadFrame | ControlFrame | CreditFrame | ErrorFrame

/** Method names: 1-64 chars of letters, digits, `.`, `_`, `-` and `/` */
export const METHOD_PATTERN = /^[A-Za-z0-9._/-]{1,64}$/

/** Largest request id (ids are unsigned integers that fit a JS number) */
export const MAX_ID = Number.MAX_SAFE_INTEGER

const MAX_ERROR_MESSAGE = 1024

/** Item and nesting limits a body is checked against before it is decoded */
export const DEFAULT_SCAN_LIMITS: Readonly<ScanLimits> = Object.freeze({ maxItems: 131_072, maxDepth: 128 })

export interface DecodeFrameOptions extends ScanLimits {
  /**
   * Called with the body's item count after the scan and before decoding;
   * throwing stops the decoding (used to charge decode cost to the peer)
   */
  beforeDecode?(items: number): void
}
const ERROR_CODE = /^[A-Z][A-Z0-9_]{0,63}$/

const ALLOWED_KEYS: Record<number, ReadonlySet<string>> = {
  [FrameType.REQUEST]: new Set(['t', 'i', 'm', 'p', 'd']),
  [FrameType.STREAM_REQUEST]: new Set(['t', 'i', 'm', 'p', 'd', 'n']),
  [FrameType.RESPONSE]: new Set(['t', 'i', 'p']),
  [FrameType.ITEM]: new Set(['t', 'i', 'p']),
  [FrameType.END]: new Set(['t', 'i']),
  [FrameType.ERROR]: new Set(['t', 'i', 'c', 'e']),
  [FrameType.CANCEL]: new Set(['t', 'i']),
  [FrameType.CREDIT]: new Set(['t', 'i', 'n'])
}

const utf8 = new TextEncoder()

/** CBOR head: major type and argument, in the shortest form (RFC 8949 §3) */
export function head (major: number, n: number): Uint8Array {
  const m = major << 5
  if (n < 24) return Uint8Array.of(m | n)
  if (n <= 0xff) return Uint8Array.of(m | 24, n)
  if (n <= 0xffff) return Uint8Array.of(m | 25, n >> 8, n & 0xff)
  if (n <= 0xffffffff) return Uint8Array.of(m | 26, n >>> 24, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff)
  const out = new Uint8Array(9)
  out[0] = m | 27
  new DataView(out.buffer).setBigUint64(1, BigInt(n))
  return out
}

function text (s: string): Uint8Array[] {
  // ASCII (method names, error codes; most messages) byte by byte: a short
  // string costs TextEncoder more than the rest of its frame
  const n = s.length
  if (n <= 64) {
    const bytes = new Uint8Array(n)
    let i = 0
    for (; i < n; i++) {
      const c = s.charCodeAt(i)
      if (c > 0x7f) break
      bytes[i] = c
    }
    if (i === n) return [head(3, n), bytes]
  }
  const bytes = utf8.encode(s)
  return [head(3, bytes.length), bytes]
}

/** The envelope's one-letter keys as CBOR text strings */
const KEY: Record<string, Uint8Array> = Object.fromEntries(
  ['c', 'd', 'e', 'i', 'm', 'n', 'p', 't'].map(k => [k, Uint8Array.of(0x61, k.charCodeAt(0))])
)

/**
 * A frame payload its sender has already encoded as DAG-CBOR (say, from
 * parts it encoded once for a hash or a signature): the bytes go into the
 * frame as they are, not encoded again. They must be one canonical DAG-CBOR
 * value; the receiver decodes and checks them as any payload. Sent on the
 * wire, the frame is the same as if the decoded value had been given.
 */
export class EncodedPayload {
  readonly bytes: Uint8Array
  constructor (bytes: Uint8Array) {
    this.bytes = bytes
  }
}

function payloadBytes (payload: unknown): Uint8Array {
  if (payload instanceof EncodedPayload) return payload.bytes
  // bytes as they are: a byte string's head and the bytes (what DAG-CBOR gives, without its encoder)
  if (payload instanceof Uint8Array) return byteString(payload)
  try {
    return dagCbor.encode(payload ?? null)
  } catch (err: any) {
    throw new MalformedFrameError(`Payload cannot be encoded as DAG-CBOR: ${err?.message ?? err}`, { cause: err })
  }
}

function byteString (bytes: Uint8Array): Uint8Array {
  const h = head(2, bytes.byteLength)
  const out = new Uint8Array(h.byteLength + bytes.byteLength)
  out.set(h)
  out.set(bytes, h.byteLength)
  return out
}

/**
 * Encode a frame body (without its length prefix).
 *
 * The result is exactly the DAG-CBOR encoding of the envelope map; the fixed
 * envelope fields are written directly (keys in DAG-CBOR order: c, d, e, i,
 * m, n, p, t) and only the payload goes through the generic encoder.
 */
export function encodeFrame (frame: Frame): Uint8Array {
  return build(frame, false)
}

/**
 * Encode a frame with its unsigned-varint length prefix, in one buffer (what
 * goes on the wire)
 */
export function encodeFramePrefixed (frame: Frame): Uint8Array {
  return build(frame, true)
}

function build (frame: Frame, prefixed: boolean): Uint8Array {
  // [key, value parts], in canonical key order
  const fields: Array<[string, Uint8Array[]]> = []

  switch (frame.type) {
    case FrameType.REQUEST:
    case FrameType.STREAM_REQUEST:
      if (frame.timeout != null) fields.push(['d', [head(0, frame.timeout)]])
      fields.push(['i', [head(0, frame.id)]])
      fields.push(['m', text(frame.method)])
      if (frame.type === FrameType.STREAM_REQUEST && frame.credit != null) fields.push(['n', [head(0, frame.credit)]])
      fields.push(['p', [payloadBytes(frame.payload)]])
      break
    case FrameType.RESPONSE:
    case FrameType.ITEM:
      fields.push(['i', [head(0, frame.id)]])
      fields.push(['p', [payloadBytes(frame.payload)]])
      break
    case FrameType.ERROR:
      fields.push(['c', text(frame.code)])
      fields.push(['e', text(frame.message)])
      fields.push(['i', [head(0, frame.id)]])
      break
    case FrameType.CREDIT:
      fields.push(['i', [head(0, frame.id)]])
      fields.push(['n', [head(0, frame.credit)]])
      break
    default:
      fields.push(['i', [head(0, frame.id)]])
      break
  }
  fields.push(['t', [head(0, frame.type)]])

  const parts: Uint8Array[] = [head(5, fields.length)]
  for (const [key, value] of fields) {
    parts.push(KEY[key], ...value)
  }
  let length = 0
  for (const p of parts) length += p.length
  const prefix = prefixed ? varint.encodingLength(length) : 0
  const out = new Uint8Array(prefix + length)
  if (prefixed) varint.encode(length, out)
  let offset = prefix
  for (const p of parts) {
    out.set(p, offset)
    offset += p.length
  }
  return out
}

function isUint (v: unknown, max = MAX_ID): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= max
}

/**
 * Decode and validate a frame body. Throws `MalformedFrameError` on anything
 * that does not follow the envelope rules, or has more items or nesting than
 * `limits` allow (checked before anything is decoded). When the request id could be read
 * it is attached to the error as `frameId` so that the receiver can answer
 * that request with an error.
 */
export function decodeFrame (bytes: Uint8Array | Uint8ArrayList, options: DecodeFrameOptions = DEFAULT_SCAN_LIMITS): Frame {
  const buf = bytes instanceof Uint8Array ? bytes : bytes.subarray()
  const scan = scanBody(buf, options)
  options.beforeDecode?.(scan.items)
  let m: unknown
  try {
    m = dagCbor.decode(buf)
  } catch (err: any) {
    throw new MalformedFrameError(`Frame is not valid DAG-CBOR: ${err?.message ?? err}`)
  }

  if (m == null || typeof m !== 'object' || Array.isArray(m) || m instanceof Uint8Array) {
    throw new MalformedFrameError('Frame is not a map')
  }

  const f = m as Record<string, unknown>
  const t = f.t
  const id = f.i

  if (!isUint(id) || scan.floatField === 'i') {
    throw new MalformedFrameError('Frame id must be an unsigned integer')
  }

  const fail = (msg: string): never => {
    const err = new MalformedFrameError(msg)
    ;(err as MalformedFrameError & { frameId?: number }).frameId = id
    throw err
  }

  if (scan.floatField != null) {
    return fail(`Field "${scan.floatField}" is a float`)
  }

  if (typeof t !== 'number' || ALLOWED_KEYS[t] == null) {
    return fail(`Unknown frame type ${String(t)}`)
  }

  const allowed = ALLOWED_KEYS[t]
  for (const key of Object.keys(f)) {
    if (!allowed.has(key)) {
      fail(`Unknown field "${key}" in frame of type ${t}`)
    }
  }

  switch (t) {
    case FrameType.REQUEST:
    case FrameType.STREAM_REQUEST: {
      if (id === 0) fail('Request id must not be 0')
      if (typeof f.m !== 'string' || !METHOD_PATTERN.test(f.m)) fail('Invalid method name')
      if (f.d != null && !isUint(f.d)) fail('Invalid timeout')
      if (t === FrameType.STREAM_REQUEST && f.n != null && !isUint(f.n, 0xffffffff)) fail('Invalid credit')
      const frame: RequestFrame = { type: t, id, method: f.m as string, payload: f.p ?? null }
      if (f.d != null) frame.timeout = f.d as number
      if (f.n != null) frame.credit = f.n as number
      if (scan.integralFloat === true) frame.nonCanonical = true
      return frame
    }
    case FrameType.RESPONSE:
    case FrameType.ITEM:
      return { type: t, id, payload: f.p ?? null }
    case FrameType.END:
    case FrameType.CANCEL:
      return { type: t, id }
    case FrameType.CREDIT:
      if (!isUint(f.n, 0xffffffff) || f.n === 0) fail('Invalid credit')
      return { type: t, id, credit: f.n as number }
    case FrameType.ERROR:
      if (typeof f.c !== 'string' || !ERROR_CODE.test(f.c)) fail('Invalid error code')
      if (typeof f.e !== 'string' || f.e.length > MAX_ERROR_MESSAGE) fail('Invalid error message')
      return { type: t, id, code: f.c as string, message: f.e as string }
    default:
      return fail(`Unknown frame type ${String(t)}`)
  }
}

export { MAX_ERROR_MESSAGE }
