/**
 * The vectors of task protocol 2.0.0 (`spec/collab-tasks.md` 13.1, block
 * `vectors-v2`) against the code: the submit request with a trace, the delta
 * events between the snapshots of section 13 and their ITEM frames, the
 * non-canonical submit frame and its refusal, valid and invalid traces.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { decodeFrame, encodeFramePrefixed, FrameType } from '@ioa/transport'
import { describe, expect, it } from 'vitest'
import { errorOf, fromHex, readSpecBlock, toHex } from '../../../test/util.js'
import { applyDelta, checkSubmitV2, checkTrace, diffSnapshots, parseDelta, readTrace } from '../src/tasks/wire-v2.js'
import { frameBody } from './task-pair.js'
import type { DeltaEvent } from '../src/tasks/wire-v2.js'
import type { TaskSnapshot } from '../src/tasks/model.js'

interface V1 {
  envelope: { hex: string }
  submit: { request: string, frame: string }
  events: Array<{ name: string, event: { type: string, task: TaskSnapshot }, frame: string }>
}

interface V2 {
  submit: { trace: Record<string, string>, request: string, frame: string }
  deltas: Array<{ name: string, base?: string, delta: DeltaEvent, frame: string }>
  nonCanonical: { name: string, frame: string, refused: { code: string, message: string, frame: string } }
  traces: {
    valid: unknown[]
    ignored: Array<{ name: string, trace: unknown }>
    dropped: Array<{ name: string, trace: unknown, read: unknown }>
    invalid: Array<{ name: string, trace: unknown, error: string }>
  }
}

const v1 = readSpecBlock<V1>('collab-tasks.md', 'vectors')
const v2 = readSpecBlock<V2>('collab-tasks.md', 'vectors-v2')

/** The body of a length-prefixed frame */
function unprefixed (hex: string): Uint8Array {
  return frameBody(fromHex(hex))
}

const snapshot = (name: string): TaskSnapshot => {
  const e = v1.events.find(x => x.name === name)
  if (e == null) throw new Error(`no event ${name} in the vectors`)
  return e.event.task
}

describe('task protocol 2.0.0 vectors (spec/collab-tasks.md 13.1)', () => {
  it('a submit request with a trace: the envelope of 13, unsigned trace beside it', () => {
    const request = dagCbor.decode<Record<string, unknown>>(fromHex(v2.submit.request))
    expect(toHex(dagCbor.encode(request.envelope))).toBe(v1.envelope.hex)
    const { trace, ...rest } = request
    expect(trace).toEqual(v2.submit.trace)
    expect(toHex(dagCbor.encode(rest))).toBe(v1.submit.request)
    const checked = checkSubmitV2(request)
    expect(checked.trace).toEqual(v2.submit.trace)
    expect(toHex(encodeFramePrefixed({ type: FrameType.STREAM_REQUEST, id: 1, method: 'submit', payload: request, timeout: 360_000, credit: 16 }))).toBe(v2.submit.frame)
    expect(decodeFrame(unprefixed(v2.submit.frame))).toMatchObject({ type: FrameType.STREAM_REQUEST, method: 'submit', payload: request })
  })

  it('the deltas between the snapshots of 13, their frames, and the snapshots they rebuild', () => {
    const chain = [snapshot('status: working'), snapshot('status: progress message'), snapshot('artifact'), snapshot('status: completed')]
    for (let i = 1; i < chain.length; i++) {
      const { delta, frame } = v2.deltas[i - 1]
      const prev = chain[i - 1]
      const cur = chain[i]
      expect(diffSnapshots(prev, prev.messages.length, cur, cur.messages.length)).toEqual(delta)
      expect(toHex(encodeFramePrefixed({ type: FrameType.ITEM, id: 1, payload: delta }))).toBe(frame)
      const received = decodeFrame(unprefixed(frame)) as { payload: Record<string, unknown> }
      expect(applyDelta(prev, parseDelta(received.payload))).toEqual(cur)
    }
    // the 33rd message: the oldest of 32 dropped
    const last = v2.deltas[3]
    const base = { ...snapshot('status: progress message'), messages: Array.from({ length: 32 }, (_, i) => ({ text: `m${i}` })) }
    const next = applyDelta(base, parseDelta((decodeFrame(unprefixed(last.frame)) as { payload: Record<string, unknown> }).payload))
    expect(next.messages).toEqual(Array.from({ length: 32 }, (_, i) => ({ text: `m${i + 1}` })))
    expect(diffSnapshots(base, 32, next, 33)).toEqual(last.delta)
    expect(last.delta).toMatchObject({ messages: [{ text: 'm32' }], dropped: 1 })
  })

  it('the submit frame with an integral float is flagged not canonical; its refusal frame', () => {
    const frame = decodeFrame(unprefixed(v2.nonCanonical.frame)) as { nonCanonical?: boolean, payload: any }
    expect(frame.nonCanonical).toBe(true)
    // decoded, it is the request of 13 (which is canonical)
    expect(toHex(dagCbor.encode(frame.payload))).toBe(v1.submit.request)
    expect((decodeFrame(unprefixed(v1.submit.frame)) as { nonCanonical?: boolean }).nonCanonical).toBeUndefined()
    const { code, message } = v2.nonCanonical.refused
    expect(toHex(encodeFramePrefixed({ type: FrameType.ERROR, id: 1, code, message }))).toBe(v2.nonCanonical.refused.frame)
  })

  it('trace fields: valid, ignored (not a W3C traceparent), with a tracestate dropped, and refused', () => {
    for (const t of v2.traces.valid) {
      expect(readTrace(t)).toEqual(t)
      expect(checkTrace(t)).toEqual(t)
    }
    for (const { name, trace } of v2.traces.ignored) {
      expect(readTrace(trace), name).toBeUndefined()
      // a caller's own trace is checked strictly
      expect(errorOf(() => checkTrace(trace)), name).toMatchObject({ code: 'INVALID_TRACE' })
    }
    for (const { name, trace, read } of v2.traces.dropped) expect(readTrace(trace), name).toEqual(read)
    for (const { name, trace, error } of v2.traces.invalid) {
      expect(errorOf(() => readTrace(trace)), name).toMatchObject({ name: 'InvalidTraceError', code: error })
    }
  })
})
