/**
 * The task protocol against the normative spec: the test vectors of
 * `spec/collab-tasks.md` section 13 (request body, envelope, submit request
 * and frame, task events and their frames, approval) are read at run time and
 * checked against the code; then the same exchange runs over TCP between two
 * nodes, so that the vectors' shapes (the envelope as a nested map, the keys of
 * each snapshot) are what a real executor accepts and sends.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { createIdentity, identityFromPrivateKey } from '@ioa/interconnect'
import { decodeFrame, encodeFramePrefixed, FrameType } from '@ioa/transport'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { collect, ed25519KeyFromSeed, fromHex, readSpecBlock, rejectionOf, toHex } from '../../../test/util.js'
import { delegate, encodeToken } from '../src/auth/delegation.js'
import { ReplayCache, bodyCid, createEnvelope, envelopeSigningBytes, parseEnvelope, verifyEnvelope } from '../src/auth/envelope.js'
import { approvalPolicy, approvalSigningBytes, createApproval, parseApproval, verifyApproval } from '../src/auth/policy.js'
import { TASK_PROTOCOL, TASK_PROTOCOL_V2, createTaskService } from '../src/tasks/service.js'
import { transition } from '../src/tasks/model.js'
import { checkBody, checkSubmit, parseEvent, parseTaskRef } from '../src/tasks/wire.js'
import type { Capability, TokenPayload } from '../src/auth/delegation.js'
import type { TaskEvent, TaskService } from '../src/tasks/service.js'
import type { TaskSnapshot } from '../src/tasks/model.js'
import { resolvable, startTaskPair } from './task-pair.js'
import type { TaskPair } from './task-pair.js'
import type { HostedAgent, Identity, Interconnect } from '@ioa/interconnect'
import type { TransportNode } from '@ioa/transport'

interface Vectors {
  principals: Record<string, { seed: string, did: string }>
  proofs: string[]
  body: { value: Record<string, unknown>, hex: string, cid: string }
  envelope: { payload: Record<string, unknown>, signingBytes: string, signature: string, hex: string }
  submit: { request: string, frame: string }
  verify: { at: number, root: string, capability: Capability, bodyCid: string }
  refusals: Array<{ name: string, error: string, body?: Record<string, unknown>, envelope?: string, bodyCid58?: string }>
  events: Array<{ name: string, event: TaskEvent, frame: string }>
  control: { request: string, get: string, resubscribe: string, refused: { code: string, message: string, frame: string } }
  approval: {
    issuer: string
    payload: { v: 1, iss: string, task: string, action: string, exp: number }
    signingBytes: string
    signature: string
    hex: string
    verifyAt: number
    notRoot: { issuer: string, error: string }
    request: string
    frame: string
  }
}

interface DelegationVectors {
  chain: Array<{ name: string, token: string }>
}

const v = readSpecBlock<Vectors>('collab-tasks.md', 'vectors')
const chain = readSpecBlock<DelegationVectors>('collab-delegation.md', 'vectors').chain

/** The vector's JSON form of an envelope payload (DAG-JSON bytes) -> the in-memory payload */
function revivePayload (p: Record<string, unknown>): unknown {
  const bytes = (x: any): Uint8Array => new Uint8Array(Buffer.from(x['/'].bytes, 'base64'))
  return { ...p, proofs: (p.proofs as any[]).map(t => ({ payload: t.payload as TokenPayload, sig: bytes(t.sig) })) }
}

/** The length prefix of a frame (unsigned varint): the body's length and where the body starts; undefined while incomplete */
function prefixOf (bytes: Uint8Array): { length: number, offset: number } | undefined {
  let length = 0
  for (let i = 0; i < Math.min(bytes.byteLength, 9); i++) {
    length += (bytes[i] & 0x7f) * 2 ** (7 * i)
    if ((bytes[i] & 0x80) === 0) return { length, offset: i + 1 }
  }
  return undefined
}

/** Split a prefixed frame into its body, checking the length prefix */
function frameBody (bytes: Uint8Array): Uint8Array {
  const prefix = prefixOf(bytes)
  expect(bytes.byteLength - (prefix?.offset ?? 0)).toBe(prefix?.length)
  return bytes.subarray(prefix?.offset)
}

describe('spec/collab-tasks.md test vectors', () => {
  const ids: Record<string, Identity> = {}

  beforeAll(async () => {
    for (const [name, p] of Object.entries(v.principals)) ids[name] = identityFromPrivateKey(await ed25519KeyFromSeed(p.seed))
  })

  it('principals and proofs are those of collab-delegation.md', () => {
    for (const [name, p] of Object.entries(v.principals)) expect(ids[name].did).toBe(p.did)
    const named = v.proofs.map(name => chain.find(t => t.name === name)?.token)
    const inEnvelope = (revivePayload(v.envelope.payload) as { proofs: any[] }).proofs.map(t => toHex(encodeToken(t)))
    expect(inEnvelope).toEqual(named)
  })

  it('body: canonical bytes and CID (base32, multibase prefix b)', async () => {
    expect(toHex(dagCbor.encode(v.body.value))).toBe(v.body.hex)
    expect(await bodyCid(dagCbor.decode(fromHex(v.body.hex)))).toBe(v.body.cid)
    expect(v.body.cid.startsWith('bafyrei')).toBe(true)
    // the receiver's check of a body keeps every field and its bytes
    const { body, bytes } = checkBody(dagCbor.decode(fromHex(v.body.hex)), 262_144)
    expect(body).toEqual(v.body.value)
    expect(toHex(bytes ?? new Uint8Array())).toBe(v.body.hex)
  })

  it('envelope: re-created from its fields, it has the vector bytes and signature', async () => {
    const p = revivePayload(v.envelope.payload) as any
    expect(p.from).toBe(ids.car.did)
    expect(p.to).toBe(ids.hotel.did)
    expect(p.body).toBe(v.body.cid)
    const env = await createEnvelope(ids.car, {
      to: p.to, skill: p.skill, task: p.task, body: v.body.value, proofs: p.proofs, nonce: p.nonce, issuedAt: p.iat, expiresAt: p.exp
    })
    expect(toHex(envelopeSigningBytes(env.payload))).toBe(v.envelope.signingBytes)
    expect(v.envelope.signingBytes.startsWith(toHex(new TextEncoder().encode('ioa:envelope:v1\n')))).toBe(true)
    expect(toHex(env.sig)).toBe(v.envelope.signature)
    expect(toHex(dagCbor.encode(env))).toBe(v.envelope.hex)
    // decoding the vector bytes gives back the payload
    const decoded = parseEnvelope(dagCbor.decode(fromHex(v.envelope.hex)))
    expect(dagCbor.encode(decoded.payload)).toEqual(dagCbor.encode(p))
  })

  it('submit: the request nests the envelope and the body as maps; the frame is a STREAM_REQUEST', () => {
    const request = dagCbor.decode<Record<string, unknown>>(fromHex(v.submit.request))
    expect(Object.keys(request).sort()).toEqual(['body', 'envelope'])
    expect(request.envelope).not.toBeInstanceOf(Uint8Array)
    expect(toHex(dagCbor.encode(request.envelope))).toBe(v.envelope.hex)
    expect(toHex(dagCbor.encode(request.body))).toBe(v.body.hex)
    const { checked, rawBody } = checkSubmit(request)
    expect(toHex(dagCbor.encode(checked.envelope))).toBe(v.envelope.hex)
    expect(rawBody).toEqual(v.body.value)

    const frame = decodeFrame(frameBody(fromHex(v.submit.frame))) as any
    expect(frame).toMatchObject({ type: FrameType.STREAM_REQUEST, id: 1, method: 'submit', timeout: 360_000, credit: 16 })
    expect(toHex(dagCbor.encode(frame.payload))).toBe(v.submit.request)
    expect(toHex(encodeFramePrefixed({ type: FrameType.STREAM_REQUEST, id: 1, method: 'submit', payload: request, timeout: 360_000, credit: 16 }))).toBe(v.submit.frame)
  })

  it('verify: the hotel agent accepts the envelope at the vector time, with the vector chain result', async () => {
    const request = dagCbor.decode<Record<string, unknown>>(fromHex(v.submit.request))
    const ok = await verifyEnvelope(request.envelope, request.body, { self: ids.hotel.did, replayCache: new ReplayCache(), now: v.verify.at })
    expect(ok.chain.root).toBe(v.verify.root)
    expect(ok.chain.root).toBe(ids.user.did)
    expect(ok.capability).toEqual(v.verify.capability)
    expect(ok.bodyCid).toBe(v.verify.bodyCid)
  })

  it('refusals: a changed body, and a body CID in another base, give the vector errors', async () => {
    const request = dagCbor.decode<Record<string, unknown>>(fromHex(v.submit.request))
    const opts = { self: ids.hotel.did, now: v.verify.at }
    for (const r of v.refusals) {
      let err: any
      if (r.body != null) {
        err = await rejectionOf(verifyEnvelope(request.envelope, r.body, { ...opts, replayCache: new ReplayCache() }))
      } else {
        const env = dagCbor.decode<any>(fromHex(r.envelope ?? ''))
        expect(env.payload.body).toBe(r.bodyCid58)
        // the same CID in base58btc: the signature is valid, the string is not the body CID's
        expect(toHex(await ids.car.sign(envelopeSigningBytes(env.payload)))).toBe(toHex(env.sig))
        err = await rejectionOf(verifyEnvelope(env, request.body, { ...opts, replayCache: new ReplayCache() }))
      }
      expect(err.code, r.name).toBe(r.error)
    }
  })

  it('events: each is accepted by the requester, re-encodes to its ITEM frame, and follows the state machine', () => {
    let previous: TaskSnapshot | undefined
    for (const e of v.events) {
      expect(parseEvent(e.event)).toBeDefined()
      expect(toHex(encodeFramePrefixed({ type: FrameType.ITEM, id: 1, payload: e.event })), e.name).toBe(e.frame)
      const frame = decodeFrame(frameBody(fromHex(e.frame))) as any
      expect(frame.payload).toEqual(e.event)
      if (e.event.type === 'status' && previous != null && previous.state !== e.event.task.state) {
        // the executor's own transition gives the vector snapshot's keys
        const { error, result, auth } = e.event.task
        const moved = transition(previous, e.event.task.state, { ...(error != null ? { error } : {}), ...(result !== undefined ? { result } : {}), ...(auth != null ? { auth } : {}) }, e.event.task.updatedAt)
        expect(Object.keys(moved).sort(), e.name).toEqual(Object.keys(e.event.task).sort())
      }
      if (e.event.type === 'status' || e.event.type === 'artifact') previous = e.event.task
    }
    const states = v.events.filter(e => e.event.type === 'status').map(e => (e.event as any).task.state)
    expect(states).toEqual(['submitted', 'auth-required', 'working', 'working', 'completed'])
    const auth = v.events.find(e => e.event.type === 'status' && e.event.task.state === 'auth-required')?.event as any
    expect(auth.task.auth).toEqual({ root: ids.user.did, action: v.body.cid, reason: auth.task.auth.reason })
  })

  it('control: the { agent, task } request, its get and resubscribe frames, and the ERROR frame of a refused submit', () => {
    const ref = dagCbor.decode(fromHex(v.control.request))
    expect(parseTaskRef(ref)).toEqual({ agent: ids.hotel.did, task: 'task-0001' })
    expect(toHex(encodeFramePrefixed({ type: FrameType.REQUEST, id: 3, method: 'get', payload: ref, timeout: 10_000 }))).toBe(v.control.get)
    expect(toHex(encodeFramePrefixed({ type: FrameType.STREAM_REQUEST, id: 4, method: 'resubscribe', payload: ref, timeout: 360_000, credit: 16 }))).toBe(v.control.resubscribe)
    const refused = decodeFrame(frameBody(fromHex(v.control.refused.frame))) as any
    expect(refused).toEqual({ type: FrameType.ERROR, id: 1, code: v.control.refused.code, message: v.control.refused.message })
    expect(toHex(encodeFramePrefixed(refused))).toBe(v.control.refused.frame)
  })

  it('approval: re-created from its fields, it has the vector bytes, verifies, and the request frame carries it', async () => {
    const a = v.approval
    expect(a.payload.iss).toBe(ids.user.did)
    expect(a.payload.action).toBe(v.body.cid)
    const made = await createApproval(ids[a.issuer], { task: a.payload.task, action: a.payload.action, expiresAt: a.payload.exp })
    expect(made.payload).toEqual(a.payload)
    expect(toHex(approvalSigningBytes(made.payload))).toBe(a.signingBytes)
    expect(a.signingBytes.startsWith(toHex(new TextEncoder().encode('ioa:approval:v1\n')))).toBe(true)
    expect(toHex(made.sig)).toBe(a.signature)
    expect(toHex(dagCbor.encode(made))).toBe(a.hex)
    const wire = dagCbor.decode(fromHex(a.hex))
    await verifyApproval(wire, { root: ids.user.did, task: a.payload.task, action: v.body.cid, now: a.verifyAt })
    const byCar = await createApproval(ids[a.notRoot.issuer], { task: a.payload.task, action: a.payload.action, expiresAt: a.payload.exp })
    expect((await rejectionOf(verifyApproval(byCar, { root: ids.user.did, task: a.payload.task, action: v.body.cid, now: a.verifyAt }))).code).toBe(a.notRoot.error)

    const request = dagCbor.decode<Record<string, unknown>>(fromHex(a.request))
    expect(parseTaskRef(request, true)).toEqual({ agent: ids.hotel.did, task: a.payload.task })
    expect(parseApproval(request.approval).payload).toEqual(a.payload)
    const frame = decodeFrame(frameBody(fromHex(a.frame))) as any
    expect(frame).toMatchObject({ type: FrameType.REQUEST, id: 2, method: 'approve', timeout: 10_000 })
    expect(toHex(dagCbor.encode(frame.payload))).toBe(a.request)
  })
})

describe('the vector exchange between two nodes over TCP', () => {
  const closers: Array<() => Promise<unknown>> = []
  let executor: TransportNode
  let requester: TransportNode
  let ts: TaskService
  let user: Identity
  let car: Identity
  let hotelDid: string
  let sender: HostedAgent
  let tsR: TaskService
  const streamRequests: Array<{ method: string, timeout?: number }> = []
  let pair: TaskPair

  beforeAll(async () => {
    pair = await startTaskPair(closers)
    executor = pair.executor
    requester = pair.requester
    const ic: Interconnect = pair.icE
    const hotel = await ic.host({ key: 'hotel', name: 'Hotel', skills: [{ id: 'travel.hotel.book' }] })
    hotelDid = hotel.did
    ts = createTaskService(ic, { leaseInterval: 1_000 })
    closers.push(async () => ts.stop())
    await ts.serve(hotel.did, 'travel.hotel.book', async (input: any, ctx) => {
      ctx.progress({ text: 'checking availability' })
      ctx.artifact({ name: 'offer', hotel: 'Hotel du Parc', price: input.amount, currency: input.currency })
      return { booking: 'LYO-7731', price: input.amount, currency: input.currency }
    }, { policy: approvalPolicy(c => (c.input as { amount: number }).amount > 200, 'amount above 200 needs the principal') })
    user = await createIdentity()
    car = await createIdentity()
    // the requester's side: a hosted sender and its task service
    sender = await pair.icR.host({ key: 'car', name: 'Car', skills: [{ id: 'vehicle.car.assistant' }] })
    tsR = createTaskService(pair.icR, {})
    closers.push(async () => tsR.stop())
    // every STREAM_REQUEST the executor receives, read beside its handler
    for (const protocol of [TASK_PROTOCOL, TASK_PROTOCOL_V2]) {
      executor.use(protocol, (stream, connection, next) => {
        let bytes = new Uint8Array(0)
        stream.addEventListener('message', (e: any) => {
          bytes = Buffer.concat([bytes, e.data instanceof Uint8Array ? e.data : e.data.subarray()])
          for (let prefix = prefixOf(bytes); prefix != null && bytes.byteLength >= prefix.offset + prefix.length; prefix = prefixOf(bytes)) {
            const frame = decodeFrame(bytes.subarray(prefix.offset, prefix.offset + prefix.length)) as any
            if (frame.type === FrameType.STREAM_REQUEST) streamRequests.push({ method: frame.method, timeout: frame.timeout })
            bytes = bytes.subarray(prefix.offset + prefix.length)
          }
        })
        next(stream, connection)
      })
    }
  }, 60_000)

  afterAll(async () => {
    for (const close of closers.reverse()) await close()
  })

  /** A fresh submit like the vector's: the vector's body, a user -> car token of today */
  async function submitRequest (task: string): Promise<{ envelope: unknown, body: unknown, cid: string }> {
    const token = await delegate(user, {
      audience: car.did,
      capabilities: [{ skill: 'travel.*', constraints: { maxAmount: 500, currency: ['EUR', 'USD'] } }],
      expiresAt: Date.now() + 3_600_000
    })
    const body = { ...v.body.value, deadline: Date.now() + 600_000, idempotencyKey: `key-${task}` }
    const envelope = await createEnvelope(car, { to: hotelDid as any, skill: 'travel.hotel.book', task, body, proofs: [token] })
    return { envelope, body, cid: envelope.payload.body }
  }

  it('the executor takes the envelope as a nested map, and its snapshots have the vector keys in every state', async () => {
    const { envelope, body, cid } = await submitRequest('tcp-0001')
    const stream = requester.services.messaging.stream<TaskEvent>(executor.peerId, TASK_PROTOCOL, 'submit', { envelope, body }, { timeout: 360_000 })
    const events: TaskEvent[] = []
    let approved = false
    for await (const e of stream) {
      events.push(parseEvent(e))
      if (e.type === 'status' && e.task.state === 'auth-required' && !approved) {
        approved = true
        expect(e.task.auth?.action).toBe(cid)
        const approval = await createApproval(user, { task: 'tcp-0001', action: cid })
        const after = await requester.services.messaging.request<TaskSnapshot>(executor.peerId, TASK_PROTOCOL, 'approve', { agent: hotelDid, task: 'tcp-0001', approval })
        expect(after.state).toBe('working')
      }
      if (e.type === 'status' && e.task.state === 'completed') break
    }
    const keysOf = (name: string): string[] => {
      const e = v.events.find(x => x.name === name)?.event as any
      return Object.keys(e.task).sort()
    }
    const statuses = events.filter((e): e is Extract<TaskEvent, { type: 'status' }> => e.type === 'status')
    const first = (state: string): TaskSnapshot | undefined => statuses.find(e => e.task.state === state)?.task
    expect(Object.keys(first('submitted') ?? {}).sort()).toEqual(keysOf('status: submitted'))
    expect(Object.keys(first('auth-required') ?? {}).sort()).toEqual(keysOf('status: auth-required'))
    expect(Object.keys(first('working') ?? {}).sort()).toEqual(keysOf('status: working'))
    expect(Object.keys(first('completed') ?? {}).sort()).toEqual(keysOf('status: completed'))
    const done = first('completed')
    expect(done?.messages).toEqual([{ text: 'checking availability' }])
    expect(done?.artifacts).toEqual([{ name: 'offer', hotel: 'Hotel du Parc', price: 240, currency: 'EUR' }])
    expect(done?.result).toEqual({ booking: 'LYO-7731', price: 240, currency: 'EUR' })
    const artifact = events.find(e => e.type === 'artifact') as any
    expect(Object.keys(artifact).sort()).toEqual(Object.keys(v.events.find(x => x.name === 'artifact')?.event ?? {}).sort())
  }, 60_000)

  it('an envelope sent as a byte string (its encoding) is refused with INVALID_ENVELOPE', async () => {
    const { envelope, body } = await submitRequest('tcp-0002')
    const stream = requester.services.messaging.stream(executor.peerId, TASK_PROTOCOL, 'submit', { envelope: dagCbor.encode(envelope), body })
    const err = await rejectionOf(collect(stream))
    expect(err.code).toBe('INVALID_ENVELOPE')
  }, 60_000)

  it('the reference requester opens a task stream with d = 360,000, above the watchdog of the longest lease (7.1)', async () => {
    await resolvable(pair.icR, hotelDid as any)
    const token = await delegate(user, { audience: sender.did, capabilities: [{ skill: 'travel.*' }], expiresAt: Date.now() + 3_600_000 })
    streamRequests.length = 0
    const done = await tsR.submitAndWait(sender.identity, hotelDid as any, { skill: 'travel.hotel.book', input: { ...v.body.value.input as object, amount: 100 }, proofs: [token] })
    expect(done.state).toBe('completed')
    const submits = streamRequests.filter(r => r.method === 'submit')
    expect(submits.length).toBeGreaterThan(0)
    for (const r of submits) {
      expect(r.timeout).toBe(360_000)
      expect(r.timeout).toBeGreaterThanOrEqual(3 * 60_000)
    }
  }, 60_000)

  it('an envelope for an agent not on the peer is refused with NO_PROVIDER (check 2 of 2.4)', async () => {
    const other = await createIdentity()
    const token = await delegate(user, { audience: car.did, capabilities: [{ skill: 'travel.*' }], expiresAt: Date.now() + 3_600_000 })
    const body = { input: null }
    const envelope = await createEnvelope(car, { to: other.did, skill: 'travel.hotel.book', task: 'tcp-0003', body, proofs: [token] })
    const err = await rejectionOf(collect(requester.services.messaging.stream(executor.peerId, TASK_PROTOCOL, 'submit', { envelope, body })))
    expect(err.code).toBe('NO_PROVIDER')
    expect(err.code).toBe(v.control.refused.code)
  }, 60_000)
})
