/**
 * The journal's record encoder (orchestration/journal-codec.ts): the bytes
 * of `dagCbor.encode` of the record without its undefined map values, for
 * run and step records as the orchestrator writes them and for generated
 * values of every kind DAG-CBOR holds.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { CID } from 'multiformats/cid'
import { describe, expect, it } from 'vitest'
import { prng } from '../../../test/util.js'
import { encodeRecord } from '../src/orchestration/journal-codec.js'

/** The old write path: undefined map values dropped, then the generic encoder */
function clean (value: unknown): unknown {
  if (Array.isArray(value)) return value.map(clean)
  if (value == null || typeof value !== 'object' || value instanceof Uint8Array) return value
  const proto = Object.getPrototypeOf(value)
  if (proto !== Object.prototype && proto !== null) return value
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(value)) {
    if (v !== undefined) out[k] = clean(v)
  }
  return out
}

const reference = (value: unknown): Uint8Array => dagCbor.encode(clean(value))

const DID = 'did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK'

const KEYS = ['a', 'b', 'id', 'ab', 'ba', 'é', 'zz', 'état', 'slot', 'state', 'aaa', '', 'provider', '日本', 'x'.repeat(30)]
const STRINGS = ['', 'a', 'x'.repeat(23), 'x'.repeat(24), 'x'.repeat(300), 'naïve café', '日本語', '😀 emoji', DID]
const NUMBERS = [0, 1, 23, 24, 255, 256, 65_535, 65_536, 4_294_967_295, 4_294_967_296, Number.MAX_SAFE_INTEGER, -1, -24, -25, -256, -65_537, -4_294_967_297, Number.MIN_SAFE_INTEGER, 0.5, -2.25, 1e300, 2 ** 53, -0]

function generate (rand: () => number, depth: number): unknown {
  const pick = <T>(xs: T[]): T => xs[Math.floor(rand() * xs.length)]
  const kind = Math.floor(rand() * (depth > 4 ? 6 : 9))
  switch (kind) {
    case 0: return pick(STRINGS)
    case 1: return pick(NUMBERS)
    case 2: return rand() < 0.5
    case 3: return null
    case 4: return new Uint8Array(Math.floor(rand() * 40)).map(() => Math.floor(rand() * 256))
    case 5: return Date.now() + Math.floor(rand() * 1000)
    case 6: return Array.from({ length: Math.floor(rand() * 5) }, () => generate(rand, depth + 1))
    default: {
      const out: Record<string, unknown> = {}
      for (let i = Math.floor(rand() * 6); i > 0; i--) out[pick(KEYS)] = rand() < 0.15 ? undefined : generate(rand, depth + 1)
      return out
    }
  }
}

describe('journal record encoder', () => {
  it('writes step and run records as dag-cbor does', () => {
    const at = 1_764_650_000_000
    const step = {
      v: 1,
      id: 's12',
      state: 'completed',
      slots: 2,
      budget: 1.5,
      attempts: [
        { slot: 0, round: 0, provider: DID, skill: 'bench.work', taskId: 'run-1:s12:0:0', state: 'completed', at },
        { slot: 1, round: 1, provider: DID, skill: 'bench.work', taskId: 'h:' + 'A'.repeat(43), state: 'failed', error: { code: 'TIMEOUT', message: 'délai dépassé' }, at: at + 1 }
      ],
      result: { n: 13, list: [1, -2, 0.25, 'x'], nested: { ok: true, none: null, gone: undefined } },
      error: undefined,
      providers: [DID],
      startedAt: at,
      finishedAt: at + 30
    }
    expect([...encodeRecord(step)]).toEqual([...reference(step)])
    const pending = { v: 1, id: 'p', state: 'pending', attempts: [] }
    expect([...encodeRecord(pending)]).toEqual([...reference(pending)])
    const run = {
      v: 1,
      runId: 'run-1',
      agent: DID,
      plan: { id: 'p', goal: { intent: 'book', input: { city: 'Zürich' } }, steps: [{ id: 's', capability: 'x.y', input: { a: { $ref: 'r.a' } }, dependsOn: [] }] },
      proofs: [{ payload: { iss: DID, aud: DID, exp: at, cap: [{ skill: 'x.*' }] }, signature: new Uint8Array([1, 2, 3]) }],
      deadline: at + 60_000,
      budget: undefined,
      state: 'running',
      createdAt: at,
      updatedAt: at,
      link: CID.parse('bafyreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku')
    }
    expect([...encodeRecord(run)]).toEqual([...reference(run)])
    expect(dagCbor.decode(encodeRecord(run))).toEqual(dagCbor.decode(reference(run)))
  })

  it('matches dag-cbor on 2,000 generated values', () => {
    const rand = prng(15)
    for (let i = 0; i < 2_000; i++) {
      const value = generate(rand, 0)
      let expected: Uint8Array | Error
      try {
        expected = reference(value)
      } catch (err) {
        expected = err as Error
      }
      if (expected instanceof Error) {
        expect(() => encodeRecord(value)).toThrow()
      } else {
        expect([...encodeRecord(value)]).toEqual([...expected])
      }
    }
  })

  it('refuses what DAG-CBOR cannot hold, as dag-cbor does', () => {
    expect(() => encodeRecord({ a: [undefined] })).toThrow()
    expect(() => encodeRecord({ a: NaN })).toThrow()
    expect(() => encodeRecord({ a: Infinity })).toThrow()
    const cyclic: Record<string, unknown> = { a: 1 }
    cyclic.self = cyclic
    expect(() => encodeRecord(cyclic)).toThrow()
    // deeper than the hand-written part: the generic encoder takes over, same bytes
    let deep: unknown = { leaf: 'x' }
    for (let i = 0; i < 100; i++) deep = { d: deep, i }
    expect([...encodeRecord(deep)]).toEqual([...reference(deep)])
  })
})
