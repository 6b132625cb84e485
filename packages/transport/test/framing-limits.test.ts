/**
 * The pieces that bound what a peer can make a node hold or do before a
 * frame is decoded: strict length prefixes (spec section 4, vectors in
 * section 14), the pre-decode scan of items and nesting (section 5), the
 * buffer accounting and the token buckets (section 11.1).
 */
import * as dagCbor from '@ipld/dag-cbor'
import { Uint8ArrayList } from 'uint8arraylist'
import { describe, expect, it } from 'vitest'
import { BufferBudget } from '../src/buffer-budget.js'
import { FrameReader, readPrefix } from '../src/length-prefix.js'
import { decodeFrame } from '../src/index.js'
import { TokenBuckets } from '../src/internal.js'
import { errorOf, fromHex, readSpecBlock } from '../../../test/util.js'

interface PrefixVector { name: string, hex: string, length?: number, error?: string }

const MAX = 1_048_576

describe('length prefix vectors (spec section 14)', () => {
  const vectors = readSpecBlock<PrefixVector[]>('transport.md', 'length-prefix-vectors')

  it('cover every outcome', () => {
    expect(new Set(vectors.map(v => v.error ?? 'length'))).toEqual(new Set(['length', 'PAYLOAD_TOO_LARGE', 'MALFORMED_LENGTH']))
  })

  describe.each(vectors)('$name', (vector) => {
    it(vector.error != null ? `is answered ${vector.error} from these bytes alone` : `announces ${vector.length} bytes`, () => {
      const buf = new Uint8ArrayList(fromHex(vector.hex))
      if (vector.error != null) {
        const err = errorOf(() => readPrefix(buf, MAX))
        expect(err.code).toBe(vector.error)
        expect(err.name).toBe(vector.error === 'MALFORMED_LENGTH' ? 'MalformedLengthError' : 'PayloadTooLargeError')
      } else {
        expect(readPrefix(buf, MAX)).toEqual({ kind: 'length', length: vector.length, bytes: vector.hex.length / 2 })
      }
    })
  })

  it('waits for more bytes only while a prefix can still be valid', () => {
    expect(readPrefix(new Uint8ArrayList(), MAX)).toEqual({ kind: 'more' })
    expect(readPrefix(new Uint8ArrayList(fromHex('8080808080808080')), MAX)).toEqual({ kind: 'more' })
  })
})

describe('FrameReader', () => {
  it('reads frames split anywhere, skips empty ones and holds at most one partial frame', () => {
    const reader = new FrameReader(1024)
    // 0x00 (empty), then a 3-byte frame, then a 200-byte frame with a 2-byte prefix
    const bytes = new Uint8Array([0x00, 0x03, 1, 2, 3, 0xc8, 0x01, ...new Uint8Array(200).fill(7)])
    const out: number[][] = []
    for (let i = 0; i < bytes.length; i += 5) {
      reader.push(bytes.subarray(i, i + 5))
      for (let f = reader.next(); f != null; f = reader.next()) out.push([...f.subarray()])
      expect(reader.buffered).toBeLessThanOrEqual(2 + 200)
    }
    expect(out).toEqual([[1, 2, 3], new Array(200).fill(7)])
    expect(reader.buffered).toBe(0)
  })

  it('reads the body of a frame at the right offset after a multi-byte prefix', () => {
    const reader = new FrameReader(1024)
    reader.push(new Uint8Array([0x81, 0x01, ...new Uint8Array(129).fill(9), 0x01, 42]))
    expect(reader.next()?.byteLength).toBe(129)
    expect([...reader.next()?.subarray() ?? []]).toEqual([42])
  })
})

describe('pre-decode scan', () => {
  it('refuses a body with more items than the limit before decoding it', () => {
    const body = dagCbor.encode({ i: 1, p: new Array(1000).fill(1), t: 3 })
    expect(decodeFrame(body, { maxItems: 1010, maxDepth: 8 })).toMatchObject({ id: 1 })
    const err = errorOf(() => decodeFrame(body, { maxItems: 1000, maxDepth: 8 }))
    expect(err.name).toBe('MalformedFrameError')
    expect(err.message).toMatch(/more than 1000 items/)
  })

  it('refuses nesting deeper than the limit', () => {
    let deep: unknown = null
    for (let i = 0; i < 10; i++) deep = [deep]
    const body = dagCbor.encode({ i: 1, p: deep, t: 3 })
    expect(decodeFrame(body, { maxItems: 100, maxDepth: 11 })).toMatchObject({ id: 1 })
    const err = errorOf(() => decodeFrame(body, { maxItems: 100, maxDepth: 10 }))
    expect(err.name).toBe('MalformedFrameError')
    expect(err.message).toMatch(/nested deeper than 10/)
  })

  it('refuses a 1,500-deep map with the default limit', () => {
    let deep: unknown = {}
    for (let i = 0; i < 1500; i++) deep = { a: deep }
    const err = errorOf(() => decodeFrame(dagCbor.encode({ i: 1, p: deep, t: 3 })))
    expect(err.code).toBe('MALFORMED_FRAME')
  })

  it('stops a frame when the decode charge throws', () => {
    const body = dagCbor.encode({ i: 1, p: [1, 2, 3], t: 3 })
    let charged = 0
    expect(decodeFrame(body, { maxItems: 100, maxDepth: 8, beforeDecode: (n) => { charged = n } })).toMatchObject({ payload: [1, 2, 3] })
    // map, 3 keys, 3 values, the array's 3 items
    expect(charged).toBe(10)
    expect(() => decodeFrame(body, { maxItems: 100, maxDepth: 8, beforeDecode: () => { throw new Error('spent') } })).toThrow('spent')
  })

  it('accepts every canonical value kind', () => {
    const payload = { a: 1.5, b: -1, bb: [true, false, null], c: new Uint8Array([1]), long: 'x'.repeat(300), n: 2 ** 40 }
    expect(decodeFrame(dagCbor.encode({ i: 9, p: payload, t: 3 }))).toEqual({ type: 3, id: 9, payload })
  })
})

describe('BufferBudget', () => {
  it('counts per peer, per address and in total, refuses growth over a budget and releases', () => {
    const budget = new BufferBudget({ perPeer: 100, perAddress: 150, total: 200 })
    const a1 = budget.open('A', '10.0.0.1')
    const a2 = budget.open('A', '10.0.0.1')
    const b = budget.open('B', '10.0.0.1')
    const c = budget.open('C', undefined)
    expect(a1.set(60)).toBeUndefined()
    expect(a2.set(50)?.name).toBe('ResourceExhaustedError')
    expect(a2.held).toBe(0)
    expect(a2.set(40)).toBeUndefined()
    expect(b.set(60)?.code).toBe('RESOURCE_EXHAUSTED')
    expect(b.set(50)).toBeUndefined()
    expect(c.set(60)?.message).toMatch(/Node/)
    expect(c.set(50)).toBeUndefined()
    expect(budget.stats()).toEqual({ total: 200, peers: { A: 100, B: 50, C: 50 }, addresses: { '10.0.0.1': 150 } })
    a1.set(10)
    expect(budget.held).toBe(150)
    for (const acc of [a1, a2, b, c]) acc.release()
    expect(budget.stats()).toEqual({ total: 0, peers: {}, addresses: {} })
    expect(budget.entries).toBe(0)
  })
})

describe('TokenBuckets', () => {
  it('charges a cost and refills over time', () => {
    const buckets = new TokenBuckets(1000, 1000)
    expect(buckets.take('p', 0, 600)).toBe(true)
    expect(buckets.take('p', 0, 600)).toBe(false)
    expect(buckets.take('p', 200, 600)).toBe(true)
    expect(buckets.take('q', 200, 1000)).toBe(true)
  })

  it('forgets buckets that have filled up again', () => {
    const buckets = new TokenBuckets(10, 1000)
    for (let i = 0; i < 50; i++) buckets.take(`peer-${i}`, 0, 10)
    expect(buckets.size(500)).toBe(50)
    expect(buckets.size(1000)).toBe(0)
  })
})
