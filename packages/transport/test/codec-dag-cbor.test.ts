/**
 * The hand-written envelope encoder (codec.ts writes the fixed fields of a
 * frame itself and only hands the payload to @ipld/dag-cbor) against
 * @ipld/dag-cbor encoding the whole envelope map: byte for byte, for every
 * valid vector of spec/transport.md §14 and for random frames of every type
 * (fast-check).
 */
import * as dagCbor from '@ipld/dag-cbor'
import fc from 'fast-check'
import { CID } from 'multiformats/cid'
import { sha256 } from 'multiformats/hashes/sha2'
import * as varint from 'uint8-varint'
import { describe, expect, it } from 'vitest'
import { encodeFrame, encodeFramePrefixed, FrameType } from '../src/index.js'
import { EncodedPayload } from '../src/internal.js'
import { fromHex, readSpecBlock, toHex } from '../../../test/util.js'
import { revive } from './dag-json.js'
import type { Frame } from '../src/index.js'

/** The envelope map of spec/transport.md §6.1 for a frame, as a generic encoder sees it */
function envelope (frame: Frame): Record<string, unknown> {
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
  return m
}

function expectSameBytes (frame: Frame): void {
  const reference = dagCbor.encode(envelope(frame))
  const body = encodeFrame(frame)
  expect(toHex(body)).toBe(toHex(reference))
  const prefixed = encodeFramePrefixed(frame)
  expect(toHex(prefixed)).toBe(toHex(varint.encode(reference.byteLength)) + toHex(reference))
}

interface ValidVector { name: string, frame: Record<string, unknown>, hex: string }

describe('envelope encoder = @ipld/dag-cbor', () => {
  const vectors = readSpecBlock<ValidVector[]>('transport.md', 'vectors')

  it.each(vectors)('vector: $name', (vector) => {
    const frame = revive(vector.frame) as Frame
    const wire = fromHex(vector.hex)
    const reference = dagCbor.encode(envelope(frame))
    // the vector is dag-cbor's bytes, and the encoder writes the same
    expect(toHex(wire.subarray(varint.encodingLength(reference.byteLength)))).toBe(toHex(reference))
    expectSameBytes(frame)
  })

  // ints around every CBOR head-size boundary, up to the largest id
  const uint = (max = Number.MAX_SAFE_INTEGER): fc.Arbitrary<number> => fc.oneof(
    fc.constantFrom(0, 1, 23, 24, 255, 256, 65_535, 65_536, 0xffff_ffff, 0x1_0000_0000, Number.MAX_SAFE_INTEGER).filter(n => n <= max),
    fc.integer({ min: 0, max: Math.min(max, 0xffff_ffff) }),
    fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }).filter(n => n <= max)
  )

  // unicode of every kind: BMP, astral, lone surrogates (an error message may carry anything)
  const str = fc.oneof(
    fc.string(),
    fc.string({ unit: 'grapheme', maxLength: 40 }),
    fc.string({ unit: 'binary', maxLength: 40 }),
    fc.string({ unit: fc.integer({ min: 0xd800, max: 0xdfff }).map(c => String.fromCharCode(c)), maxLength: 4 }),
    fc.string({ minLength: 200, maxLength: 70_000, unit: 'grapheme-ascii' })
  )

  const cid = fc.uint8Array({ minLength: 0, maxLength: 64 }).map(bytes => {
    const digest = sha256.digest(bytes) as Awaited<ReturnType<typeof sha256.digest>>
    return CID.createV1(dagCbor.code, digest)
  })

  const { value: payload } = fc.letrec<{ value: unknown }>(tie => ({
    value: fc.oneof(
      { depthSize: 'small', withCrossShrink: true },
      fc.constant(null),
      fc.boolean(),
      fc.integer(),
      fc.maxSafeInteger(),
      fc.bigInt({ min: -(2n ** 64n), max: 2n ** 64n - 1n }),
      fc.double({ noNaN: true, noDefaultInfinity: true }).filter(x => !Number.isInteger(x)),
      str,
      fc.uint8Array({ maxLength: 300 }),
      cid,
      fc.array(tie('value'), { maxLength: 6 }),
      fc.dictionary(str, tie('value'), { maxKeys: 6 })
    )
  }))

  const frame: fc.Arbitrary<Frame> = fc.oneof(
    fc.record({
      type: fc.constantFrom(FrameType.REQUEST, FrameType.STREAM_REQUEST),
      id: uint(),
      method: str,
      payload,
      timeout: fc.option(uint(), { nil: undefined }),
      credit: fc.option(uint(0xffff_ffff), { nil: undefined })
    }, { requiredKeys: ['type', 'id', 'method', 'payload'] }),
    fc.record({ type: fc.constantFrom(FrameType.RESPONSE, FrameType.ITEM), id: uint(), payload }),
    fc.record({ type: fc.constantFrom(FrameType.END, FrameType.CANCEL), id: uint() }),
    fc.record({ type: fc.constant(FrameType.CREDIT), id: uint(), credit: uint(0xffff_ffff) }),
    fc.record({ type: fc.constant(FrameType.ERROR), id: uint(), code: str, message: str })
  ) as fc.Arbitrary<Frame>

  it('random frames of every type encode to dag-cbor\'s bytes', () => {
    fc.assert(fc.property(frame, (f) => { expectSameBytes(f) }), { numRuns: 2_000 })
  })

  it('a payload given encoded (EncodedPayload) is framed as the value it encodes', () => {
    fc.assert(fc.property(frame, (f) => {
      if (!('payload' in f)) return
      const encoded = { ...f, payload: new EncodedPayload(dagCbor.encode(f.payload ?? null)) } as Frame
      expect(toHex(encodeFrame(encoded))).toBe(toHex(encodeFrame(f)))
    }), { numRuns: 500 })
  })

  it('strings with lone surrogates in every text field', () => {
    const lone = ['\ud800', 'a\udc00b', '\udfff\ud800', 'x\ud83d']
    for (const s of lone) {
      expectSameBytes({ type: FrameType.ERROR, id: 1, code: s, message: s })
      expectSameBytes({ type: FrameType.REQUEST, id: 1, method: s, payload: s })
    }
  })
})
