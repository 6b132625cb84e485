/**
 * The messaging envelope: one DAG-CBOR map per length-prefixed frame.
 * The normative description is `spec/transport.md`.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { MalformedFrameError } from './errors.js'
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

/**
 * Encode a frame body (without its length prefix)
 */
export function encodeFrame (frame: Frame): Uint8Array {
  const m: Record<string, unknown> = { t: frame.type, i: frame.id }

  switch (frame.type) {
    case FrameType.REQUEST:
    case FrameType.STREAM_REQUEST:
      m.m = frame.method
      m.p = frame.payload ?? null
      if (frame.timeout != null) m.d = frame.timeout
      if (frame.type === FrameType.STREAM_REQUEST && frame.credit != null) m.n = frame.credit
      break
    case FrameType.RESPONSE:
    case FrameType.ITEM:
      m.p = frame.payload ?? null
      break
    case FrameType.ERROR:
      m.c = frame.code
      m.e = frame.message
      break
    case FrameType.CREDIT:
      m.n = frame.credit
      break
    default:
      break
  }

  try {
    return dagCbor.encode(m)
  } catch (err: any) {
    throw new MalformedFrameError(`Payload cannot be encoded as DAG-CBOR: ${err?.message ?? err}`, { cause: err })
  }
}

function isUint (v: unknown, max = MAX_ID): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= max
}

/**
 * Decode and validate a frame body. Throws `MalformedFrameError` on anything
 * that does not follow the envelope rules. When the request id could be read
 * it is attached to the error as `frameId` so that the receiver can answer
 * that request with an error.
 */
export function decodeFrame (bytes: Uint8Array | Uint8ArrayList): Frame {
  const buf = bytes instanceof Uint8Array ? bytes : bytes.subarray()
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

  if (!isUint(id)) {
    throw new MalformedFrameError('Frame id must be an unsigned integer')
  }

  const fail = (msg: string): never => {
    const err = new MalformedFrameError(msg)
    ;(err as MalformedFrameError & { frameId?: number }).frameId = id
    throw err
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
