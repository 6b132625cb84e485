/**
 * The messaging codec against the normative spec: the test vectors of
 * `spec/transport.md` are read at run time, so the spec and the code cannot
 * drift apart unnoticed.
 */
import { CID } from 'multiformats/cid'
import * as varint from 'uint8-varint'
import { Uint8ArrayList } from 'uint8arraylist'
import { describe, expect, it } from 'vitest'
import {
  CanceledError, decodeFrame, DialFailedError, encodeFrame, errorFromWire, FrameType, HandlerError, InvalidArgumentError,
  MalformedFrameError, MESSAGING_DEFAULTS, MessagingError, METHOD_PATTERN, PayloadTooLargeError, RemoteError,
  StreamClosedError, TimeoutError, TooManyRequestsError, UnknownMethodError
} from '../src/index.js'
// errorToWire is internal to the package (not re-exported by index.ts)
import { errorToWire } from '../src/errors.js'
import { errorOf, fromHex, prng, readSpec, readSpecBlock, toHex } from '../../../test/util.js'
import { revive, toJson } from './dag-json.js'
import type { Frame } from '../src/index.js'

interface ValidVector { name: string, frame: Record<string, unknown>, hex: string }
interface InvalidVector { name: string, error: string, frameId: number | null, hex: string }

/** The full wire form of a frame: varint length prefix, then the body */
function wire (frame: Frame): Uint8Array {
  const body = encodeFrame(frame)
  const prefix = varint.encode(body.byteLength)
  const out = new Uint8Array(prefix.byteLength + body.byteLength)
  out.set(prefix, 0)
  out.set(body, prefix.byteLength)
  return out
}

/** Split a full frame into its body, checking the length prefix */
function body (bytes: Uint8Array): Uint8Array {
  const length = varint.decode(bytes)
  const offset = varint.encodingLength(length)
  expect(bytes.byteLength - offset, 'length prefix matches the body').toBe(length)
  return bytes.subarray(offset)
}

const valid = readSpecBlock<ValidVector[]>('transport.md', 'vectors')
const invalid = readSpecBlock<InvalidVector[]>('transport.md', 'invalid-vectors')

describe('spec test vectors', () => {
  it('cover every frame type', () => {
    const types = new Set(valid.map(v => v.frame.type))
    for (const t of Object.values(FrameType)) {
      expect(types.has(t), `a vector of type ${t}`).toBe(true)
    }
    expect(invalid.length).toBeGreaterThan(0)
  })

  describe.each(valid)('valid: $name', (vector) => {
    const frame = revive(vector.frame) as Frame

    it('encodes to exactly the vector bytes', () => {
      expect(toHex(wire(frame))).toBe(vector.hex)
    })

    it('decodes back to the frame', () => {
      const decoded = decodeFrame(body(fromHex(vector.hex)))
      expect(toJson(decoded)).toEqual(vector.frame)
    })

    it('decodes from a Uint8ArrayList too', () => {
      const b = body(fromHex(vector.hex))
      const list = new Uint8ArrayList(b.subarray(0, 1), b.subarray(1))
      expect(toJson(decodeFrame(list))).toEqual(vector.frame)
    })
  })

  describe.each(invalid)('invalid: $name', (vector) => {
    it(`is rejected with ${vector.error}`, () => {
      const err = errorOf(() => decodeFrame(body(fromHex(vector.hex))))
      expect(err.name).toBe(vector.error)
      expect(err.code).toBe('MALFORMED_FRAME')
      expect(err.frameId ?? null).toBe(vector.frameId)
    })
  })
})

describe('spec defaults table', () => {
  it('matches MESSAGING_DEFAULTS', () => {
    const rows = new Map<string, number>()
    for (const m of readSpec('transport.md').matchAll(/^\| `(\w+)` \| (\d+) \|/gm)) {
      rows.set(m[1], Number(m[2]))
    }
    expect(Object.fromEntries(rows)).toEqual({ ...MESSAGING_DEFAULTS })
  })
})

const ALPHABET = ['a', 'b', 'z', 'A', '0', '_', ' ', '/', '"', '\\', '\n', 'é', 'ß', '中', '✓', '😀', '\u0000']

function randomString (r: () => number, max = 12): string {
  let s = ''
  const n = Math.floor(r() * max)
  for (let i = 0; i < n; i++) s += ALPHABET[Math.floor(r() * ALPHABET.length)]
  return s
}

function randomValue (r: () => number, depth: number): unknown {
  const kinds = depth > 0 ? 10 : 8
  switch (Math.floor(r() * kinds)) {
    case 0: return null
    case 1: return r() < 0.5
    case 2: {
      // integers across every CBOR width, both signs, up to the safe range
      const bounds = [23, 24, 255, 256, 65535, 65536, 2 ** 32 - 1, 2 ** 32, Number.MAX_SAFE_INTEGER]
      const n = Math.floor(r() * bounds[Math.floor(r() * bounds.length)])
      return r() < 0.3 && n !== 0 ? -n : n
    }
    case 3: return (r() - 0.5) * 10 ** Math.floor(r() * 20) + 0.5
    case 4: return randomString(r, 40)
    case 5: return crypto.getRandomValues(new Uint8Array(Math.floor(r() * 40)))
    case 6: return Number.MAX_SAFE_INTEGER
    case 7: return -Number.MAX_SAFE_INTEGER
    case 8: return Array.from({ length: Math.floor(r() * 5) }, () => randomValue(r, depth - 1))
    default: {
      const o: Record<string, unknown> = {}
      const n = Math.floor(r() * 5)
      for (let i = 0; i < n; i++) o[randomString(r, 8)] = randomValue(r, depth - 1)
      return o
    }
  }
}

describe('round trip of random payloads', () => {
  const r = prng(0x10a)
  const cases = Array.from({ length: 300 }, (_, i) => ({ i, payload: randomValue(r, 4) }))

  it.each([FrameType.REQUEST, FrameType.STREAM_REQUEST, FrameType.RESPONSE, FrameType.ITEM])('frame type %i', (type) => {
    for (const { i, payload } of cases) {
      const frame = type === FrameType.REQUEST || type === FrameType.STREAM_REQUEST
        ? { type, id: i + 1, method: 'svc/method.v1_x-y', payload, timeout: i * 7 } as Frame
        : { type, id: i + 1, payload } as Frame
      const bytes = encodeFrame(frame)
      const decoded = decodeFrame(bytes)
      expect(decoded, `case ${i}`).toEqual(frame)
      // the encoding is deterministic: decoding and encoding again gives the same bytes
      expect(toHex(encodeFrame(decoded)), `case ${i}`).toBe(toHex(bytes))
    }
  })

  it('encodes the same map the same way whatever the key order', () => {
    const a = encodeFrame({ type: FrameType.RESPONSE, id: 9, payload: { b: 1, a: [1, 2], ccc: { y: null, x: true } } })
    const b = encodeFrame({ type: FrameType.RESPONSE, id: 9, payload: { ccc: { x: true, y: null }, a: [1, 2], b: 1 } })
    expect(toHex(a)).toBe(toHex(b))
  })

  it('keeps bytes as bytes and CIDs as links', () => {
    const cid = CID.parse('bafyreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku')
    const payload = { raw: new Uint8Array([0, 1, 2, 255]), link: cid, empty: new Uint8Array(0) }
    const decoded = decodeFrame(encodeFrame({ type: FrameType.ITEM, id: 1, payload })) as { payload: typeof payload }
    expect(decoded.payload.raw).toBeInstanceOf(Uint8Array)
    expect([...decoded.payload.raw]).toEqual([0, 1, 2, 255])
    expect(decoded.payload.empty.byteLength).toBe(0)
    expect(CID.asCID(decoded.payload.link)?.equals(cid)).toBe(true)
  })

  it('sends an undefined or missing payload as null', () => {
    const frame = decodeFrame(encodeFrame({ type: FrameType.RESPONSE, id: 1, payload: undefined }))
    expect(frame).toEqual({ type: FrameType.RESPONSE, id: 1, payload: null })
    // a receiver reads an absent `p` as null
    expect(decodeFrame(fromHex('a2616901617403'))).toEqual({ type: FrameType.RESPONSE, id: 1, payload: null })
  })
})

describe('values DAG-CBOR cannot encode', () => {
  const bad: Array<[string, unknown]> = [
    ['undefined inside a map', { a: undefined }],
    ['undefined inside a list', [1, undefined]],
    ['a function', { f: () => 1 }],
    ['a symbol', Symbol('s')],
    ['NaN', NaN],
    ['Infinity', { n: Infinity }],
    ['-Infinity', -Infinity],
    ['a Date', new Date(0)],
    ['a Set', new Set([1])],
    ['a Map with a non-string key', new Map([[1, 'x']])],
    ['a BigInt beyond 64 bits', 2n ** 70n]
  ]

  it.each(bad)('%s throws MalformedFrameError', (_label, payload) => {
    const err = errorOf(() => encodeFrame({ type: FrameType.RESPONSE, id: 1, payload }))
    expect(err).toBeInstanceOf(MessagingError)
    expect(err.name).toBe('MalformedFrameError')
    expect(err.code).toBe('MALFORMED_FRAME')
  })

  it('fails for request payloads too', () => {
    const err = errorOf(() => encodeFrame({ type: FrameType.REQUEST, id: 1, method: 'x', payload: { deep: [{ v: undefined }] } }))
    expect(err.name).toBe('MalformedFrameError')
  })
})

describe('envelope limits', () => {
  const enc = (frame: Frame): Uint8Array => encodeFrame(frame)

  it('accepts the largest id and rejects id 0 in requests', () => {
    expect(decodeFrame(enc({ type: FrameType.END, id: Number.MAX_SAFE_INTEGER })).id).toBe(Number.MAX_SAFE_INTEGER)
    expect(decodeFrame(enc({ type: FrameType.ERROR, id: 0, code: 'TIMEOUT', message: 'idle' })).id).toBe(0)
    const err = errorOf(() => decodeFrame(enc({ type: FrameType.REQUEST, id: 0, method: 'echo', payload: null })))
    expect(err.name).toBe('MalformedFrameError')
    expect(err.frameId).toBe(0)
  })

  it('bounds method names at 64 characters', () => {
    const ok = 'a'.repeat(64)
    expect(METHOD_PATTERN.test(ok)).toBe(true)
    expect((decodeFrame(enc({ type: FrameType.REQUEST, id: 1, method: ok, payload: null })) as { method: string }).method).toBe(ok)
    for (const method of ['a'.repeat(65), '', 'has space', 'ümlaut', 'semi;colon', 'new\nline']) {
      const err = errorOf(() => decodeFrame(enc({ type: FrameType.REQUEST, id: 1, method, payload: null })))
      expect(err.name, JSON.stringify(method)).toBe('MalformedFrameError')
      expect(err.frameId).toBe(1)
    }
  })

  it('bounds error messages at 1024 characters', () => {
    const at = decodeFrame(enc({ type: FrameType.ERROR, id: 2, code: 'X', message: 'm'.repeat(1024) }))
    expect((at as { message: string }).message).toHaveLength(1024)
    const err = errorOf(() => decodeFrame(enc({ type: FrameType.ERROR, id: 2, code: 'X', message: 'm'.repeat(1025) })))
    expect(err.name).toBe('MalformedFrameError')
    expect(err.frameId).toBe(2)
  })

  it('bounds error codes at 64 characters', () => {
    const code = 'A' + 'B_9'.repeat(21)
    expect(code).toHaveLength(64)
    expect(decodeFrame(enc({ type: FrameType.ERROR, id: 2, code, message: '' }))).toMatchObject({ code })
    for (const c of [code + 'X', '9LIVES', '_X', 'lower', '']) {
      expect(errorOf(() => decodeFrame(enc({ type: FrameType.ERROR, id: 2, code: c, message: '' }))).name, c).toBe('MalformedFrameError')
    }
  })

  it('bounds credit', () => {
    expect(decodeFrame(enc({ type: FrameType.CREDIT, id: 1, credit: 2 ** 32 - 1 }))).toMatchObject({ credit: 2 ** 32 - 1 })
    expect(decodeFrame(enc({ type: FrameType.STREAM_REQUEST, id: 1, method: 'm', payload: null, credit: 0 }))).toMatchObject({ credit: 0 })
    expect(errorOf(() => decodeFrame(enc({ type: FrameType.CREDIT, id: 1, credit: 0 }))).name).toBe('MalformedFrameError')
  })

  it('drops the credit key from a REQUEST', () => {
    const bytes = enc({ type: FrameType.REQUEST, id: 1, method: 'm', payload: null, credit: 5 })
    expect(decodeFrame(bytes)).toEqual({ type: FrameType.REQUEST, id: 1, method: 'm', payload: null })
  })
})

describe('errorFromWire', () => {
  const known: Array<[string, new (...args: any[]) => MessagingError]> = [
    ['UNKNOWN_METHOD', UnknownMethodError],
    ['PAYLOAD_TOO_LARGE', PayloadTooLargeError],
    ['TIMEOUT', TimeoutError],
    ['HANDLER_ERROR', HandlerError],
    ['TOO_MANY_REQUESTS', TooManyRequestsError],
    ['MALFORMED_FRAME', MalformedFrameError],
    ['CANCELED', CanceledError],
    ['STREAM_CLOSED', StreamClosedError],
    ['INVALID_ARGUMENT', InvalidArgumentError]
  ]

  it.each(known)('maps %s to its class', (code, Ctor) => {
    const err = errorFromWire(code, `remote said ${code}`)
    expect(err).toBeInstanceOf(Ctor)
    expect(err).toBeInstanceOf(MessagingError)
    expect(err.name).toBe(Ctor.name)
    expect(err.code).toBe(code)
    expect(err.message).toBe(`remote said ${code}`)
    expect(err.remote).toBe(true)
  })

  it.each(['ROOM_UNAVAILABLE', 'X', 'NOT_STARTED', 'DIAL_FAILED', 'PROTOCOL_NOT_SUPPORTED'])('maps %s to RemoteError', (code) => {
    const err = errorFromWire(code, 'app failure')
    expect(err).toBeInstanceOf(RemoteError)
    expect(err.name).toBe('RemoteError')
    expect(err.code).toBe(code)
    expect(err.message).toBe('app failure')
    expect(err.remote).toBe(true)
  })

  it('leaves locally made errors marked local', () => {
    expect(new TimeoutError().remote).toBe(false)
    expect(new RemoteError('X', 'y').remote).toBe(false)
  })
})

describe('errorToWire', () => {
  it('keeps a valid application code', () => {
    expect(errorToWire(new RemoteError('ROOM_UNAVAILABLE', 'full'), 1024)).toEqual({ code: 'ROOM_UNAVAILABLE', message: 'full' })
    const plain = Object.assign(new Error('nope'), { code: 'A' + '_'.repeat(63) })
    expect(errorToWire(plain, 1024)).toEqual({ code: 'A' + '_'.repeat(63), message: 'nope' })
  })

  it('keeps the codes of the typed errors', () => {
    expect(errorToWire(new InvalidArgumentError('bad input'), 1024)).toEqual({ code: 'INVALID_ARGUMENT', message: 'bad input' })
    expect(errorToWire(new TimeoutError('slow'), 1024)).toEqual({ code: 'TIMEOUT', message: 'slow' })
    expect(errorToWire(new DialFailedError('gone'), 1024).code).toBe('DIAL_FAILED')
  })

  it.each([
    ['lower case', 'lower'],
    ['a dash', 'BAD-CODE'],
    ['a leading digit', '9LIVES'],
    ['a leading underscore', '_X'],
    ['65 characters', 'A'.repeat(65)],
    ['empty', ''],
    ['a number', 42],
    ['an object', { code: 'X' }]
  ])('falls back to HANDLER_ERROR for a code with %s', (_label, code) => {
    const err = Object.assign(new Error('broken'), { code })
    expect(errorToWire(err, 1024)).toEqual({ code: 'HANDLER_ERROR', message: 'broken' })
  })

  it('handles errors without a code and non-errors', () => {
    expect(errorToWire(new Error('plain'), 1024)).toEqual({ code: 'HANDLER_ERROR', message: 'plain' })
    expect(errorToWire('a string', 1024)).toEqual({ code: 'HANDLER_ERROR', message: 'a string' })
    expect(errorToWire({ code: 'NOT_AN_ERROR' }, 1024)).toEqual({ code: 'HANDLER_ERROR', message: 'Handler failed' })
    expect(errorToWire(undefined, 1024)).toEqual({ code: 'HANDLER_ERROR', message: 'Handler failed' })
  })

  it('truncates long messages', () => {
    const long = 'x'.repeat(5000)
    expect(errorToWire(new Error(long), 1024).message).toBe('x'.repeat(1024))
    expect(errorToWire(long, 10).message).toBe('x'.repeat(10))
    expect(errorToWire(new Error('x'.repeat(1024)), 1024).message).toHaveLength(1024)
    // a truncated message still fits an ERROR frame
    const { code, message } = errorToWire(new Error(long), 1024)
    expect(decodeFrame(encodeFrame({ type: FrameType.ERROR, id: 1, code, message }))).toMatchObject({ code, message })
  })
})

describe('requests whose payload holds an integral float', () => {
  /** A REQUEST `{ i: 1, m: 'm', p: [<float>], t: 1 }` with the payload's 64-bit float written out */
  const request = (float: string): Uint8Array => fromHex(`a4616901616d616d617081fb${float}617401`)

  it.each([
    { name: '240.0', float: '406e000000000000', flagged: true },
    { name: '-0.0', float: '8000000000000000', flagged: true },
    { name: '2^53 - 1 as a float', float: '433fffffffffffff', flagged: true },
    { name: '2^53 (a float in canonical form: beyond the integers the encoder writes as such)', float: '4340000000000000', flagged: false },
    { name: '1.5', float: '3ff8000000000000', flagged: false }
  ])('$name: accepted, flagged not canonical when DAG-CBOR would write it as an integer', ({ float, flagged }) => {
    const frame = decodeFrame(request(float)) as Frame & { nonCanonical?: boolean }
    expect(frame).toMatchObject({ type: FrameType.REQUEST, id: 1, method: 'm' })
    expect(frame.nonCanonical).toBe(flagged ? true : undefined)
  })
})
