/**
 * Session mode (spec/collab-tasks.md 2.6) between separate nodes over TCP on
 * 127.0.0.1: a task without a per-request signature, a binding made once per
 * connection, bindings refused on another connection, from another peer or
 * after their expiry, skills that require envelope mode (and the requester's
 * retry, signed); the registry's bounds; the spec's vectors.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { createIdentity, identityFromPrivateKey } from '@ioa/interconnect'
import { createTransportNode } from '@ioa/transport'
import { EncodedPayload } from '@ioa/transport/internal'
import { defaultLogger } from '@libp2p/logger'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { collect, ed25519KeyFromSeed, fromHex, readSpecBlock, rejectionOf, toHex, until } from '../../../test/util.js'
import { delegate } from '../src/auth/delegation.js'
import { createEnvelope, createUnsignedEnvelope } from '../src/auth/envelope.js'
import { SESSION_PREFIX, bindingSigningBytes, createBinding, parseBinding, verifyBinding } from '../src/auth/session.js'
import { SessionClient } from '../src/auth/session-client.js'
import { SessionRegistry } from '../src/auth/session-registry.js'
import { VerificationCache } from '../src/auth/verification-cache.js'
import { fromRemote } from '../src/errors.js'
import { createTaskService, taskService } from '../src/tasks/service.js'
import { TASK_PROTOCOL as TASK_PROTOCOL_V1 } from '../src/tasks/wire.js'
import { TASK_PROTOCOL_V2 as TASK_PROTOCOL } from '../src/tasks/wire-v2.js'
import { checkSubmit } from '../src/tasks/wire.js'
import { fromJson } from './vectors-fixture.js'
import { resolvable, startTaskPair } from './task-pair.js'
import type { Token } from '../src/auth/delegation.js'
import type { TaskService, TaskServiceComponents } from '../src/tasks/service.js'
import type { TaskPair } from './task-pair.js'
import type { HostedAgent, Identity } from '@ioa/interconnect'
import type { TransportNode } from '@ioa/transport'

const SKEW = 1_000

interface Sent { method: string, payload: any }

/** A payload as it goes on the wire (a request encoded from its parts, decoded) */
function onWire (payload: unknown): unknown {
  return payload instanceof EncodedPayload ? dagCbor.decode(payload.bytes) : payload
}

/** The requester's messaging, recording every request it sends */
function recording (m: TaskServiceComponents['messaging'], sent: Sent[]): TaskServiceComponents['messaging'] {
  return {
    handle: async (...a) => m.handle(...a),
    handleStream: async (...a) => m.handleStream(...a),
    unhandle: async (...a) => m.unhandle(...a),
    request: async (peer, protocol, method, payload, options) => {
      sent.push({ method, payload: onWire(payload) })
      return await m.request(peer, protocol, method, payload, options)
    },
    stream: (peer, protocol, method, payload, options) => {
      sent.push({ method, payload: onWire(payload) })
      return m.stream(peer, protocol, method, payload, options)
    }
  } as TaskServiceComponents['messaging']
}

/** What the executor answered: the error, turned back into its class */
async function refusal (p: Promise<unknown>): Promise<any> {
  return fromRemote(await rejectionOf(p))
}

describe('session mode over TCP', () => {
  const closers: Array<() => Promise<unknown>> = []
  const sent: Sent[] = []
  let pair: TaskPair
  let other: TransportNode
  let hotel: HostedAgent
  let car: HostedAgent
  let driver: Identity
  let carToken: Token
  let tsE: TaskService
  let tsR: TaskService

  /** A fresh agent (not hosted anywhere) with a token from the driver */
  async function freshAgent (): Promise<{ id: Identity, token: Token }> {
    const id = await createIdentity()
    const token = await delegate(driver, { audience: id.did, capabilities: [{ skill: 'travel.*' }, { skill: 'payment.*' }], expiresAt: Date.now() + 3_600_000 })
    return { id, token }
  }

  /** A submit sent by `node` as `id` through the bare messaging: signed, or unsigned (session mode) */
  async function rawSubmit (node: TransportNode, id: Identity, token: Token, skill: string, signed = false): Promise<any[]> {
    const body = { input: { city: 'Lyon' } }
    const init = { to: hotel.did, skill, task: globalThis.crypto.randomUUID(), body, proofs: [token] }
    const envelope = signed ? await createEnvelope(id, init) : await createUnsignedEnvelope(id.did, init)
    return await collect(node.services.messaging.stream(pair.executor.peerId, TASK_PROTOCOL, 'submit', { envelope, body }))
  }

  async function challengeOf (node: TransportNode): Promise<Uint8Array> {
    const answer: any = await node.services.messaging.request(pair.executor.peerId, TASK_PROTOCOL, 'challenge', {})
    expect(answer.challenge).toBeInstanceOf(Uint8Array)
    expect(answer.maxTtl).toBe(3_600_000)
    return answer.challenge
  }

  async function bind (node: TransportNode, binding: unknown): Promise<any> {
    return await node.services.messaging.request(pair.executor.peerId, TASK_PROTOCOL, 'bind', { binding })
  }

  const requesterPeer = (): string => pair.requester.peerId.toString()
  const executorPeer = (): string => pair.executor.peerId.toString()

  beforeAll(async () => {
    pair = await startTaskPair(closers)
    other = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'] })
    closers.push(async () => other.stop())
    await other.dial(pair.executor.getMultiaddrs())

    hotel = await pair.icE.host({ key: 'hotel', name: 'Hotel', skills: [{ id: 'travel.hotel.book' }, { id: 'travel.audit' }, { id: 'payment.pay' }] })
    car = await pair.icR.host({ key: 'car', name: 'Car', skills: [{ id: 'vehicle.car.assistant' }] })
    driver = await createIdentity()
    carToken = await delegate(driver, { audience: car.did, capabilities: [{ skill: 'travel.*' }, { skill: 'payment.*' }], expiresAt: Date.now() + 3_600_000 })

    tsE = createTaskService(pair.icE, { leaseInterval: 200, clockSkew: SKEW, session: { requireEnvelope: ['payment.*'] } })
    closers.push(async () => tsE.stop())
    const echo = (input: unknown, ctx: { caller: string }): unknown => ({ input, caller: ctx.caller })
    await tsE.serve(hotel.did, 'travel.hotel.book', echo)
    await tsE.serve(hotel.did, 'travel.audit', echo, { requireEnvelope: true })
    await tsE.serve(hotel.did, 'payment.pay', echo)

    tsR = taskService({ leaseInterval: 200 })({
      peerId: pair.requester.peerId,
      logger: pair.requester.logger,
      messaging: recording(pair.requester.services.messaging, sent),
      interconnect: pair.icR
    })
    closers.push(async () => tsR.stop())
    await resolvable(pair.icR, hotel.did)
  }, 60_000)

  afterAll(async () => {
    for (const close of closers.reverse()) await close().catch(() => {})
  })

  it('a session-mode task completes without a per-request signature; the agent binds once per connection, beside its first request', async () => {
    sent.length = 0
    const submit = async (i: number): Promise<void> => {
      const done = await tsR.submitAndWait(car.did, hotel.did, { skill: 'travel.hotel.book', input: { n: i }, proofs: [carToken] })
      expect(done.state).toBe('completed')
      expect(done.result).toEqual({ input: { n: i }, caller: car.did })
    }
    // the first request goes signed at once, the binding exchange beside it (not two round trips before it)
    await submit(0)
    expect(sent.map(s => s.method).slice(0, 2).sort()).toEqual(['challenge', 'submit'])
    expect(sent.find(s => s.method === 'submit')?.payload.envelope.sig).toBeInstanceOf(Uint8Array)
    // once bound, requests go unsigned
    let n = 1
    while (sent.filter(s => s.method === 'submit').at(-1)?.payload.envelope.sig != null) {
      if (n > 50) throw new Error('no unsigned submit after 50 tasks')
      await submit(n++)
    }
    for (let i = 0; i < 2; i++) await submit(n++)
    const unsigned = sent.filter(s => s.method === 'submit').filter(s => s.payload.envelope.sig == null)
    expect(unsigned.length).toBeGreaterThanOrEqual(3)
    for (const s of unsigned) {
      // the envelope went without `sig`: nothing was signed per request
      expect(Object.keys(s.payload.envelope)).toEqual(['payload'])
      expect(s.payload.envelope.payload.from).toBe(car.did)
    }
    // signed ones only before the binding was answered
    const submits = sent.filter(s => s.method === 'submit')
    const firstUnsigned = submits.findIndex(s => s.payload.envelope.sig == null)
    expect(submits.slice(firstUnsigned).every(s => s.payload.envelope.sig == null)).toBe(true)
    expect(sent.filter(s => s.method === 'challenge')).toHaveLength(1)
    const binds = sent.filter(s => s.method === 'bind')
    expect(binds).toHaveLength(1)
    const b = parseBinding(binds[0].payload.binding).payload
    expect(b).toMatchObject({ agent: car.did, requester: requesterPeer(), executor: executorPeer() })

    // envelope mode when asked: signed, and no binding exchange
    sent.length = 0
    const signed = await tsR.submitAndWait(car.did, hotel.did, { skill: 'travel.hotel.book', input: 'signed', proofs: [carToken] }, { auth: 'envelope' })
    expect(signed.state).toBe('completed')
    expect(sent.map(s => s.method)).toEqual(['submit'])
    expect(sent[0].payload.envelope.sig).toBeInstanceOf(Uint8Array)
  })

  it('session mode is a part of 2.0.0 only: 1.0.0 has no challenge or bind, and refuses an unsigned envelope even under a binding', async () => {
    const { id, token } = await freshAgent()
    const challenge = await challengeOf(pair.requester)
    await bind(pair.requester, await createBinding(id, { requester: requesterPeer(), executor: executorPeer(), challenge }))
    // bound on this connection: 2.0.0 takes the unsigned submit
    expect((await rawSubmit(pair.requester, id, token, 'travel.hotel.book')).at(-1)?.task?.state).toBe('completed')
    await expect(pair.requester.services.messaging.request(pair.executor.peerId, TASK_PROTOCOL_V1, 'challenge', {})).rejects.toMatchObject({ code: 'UNKNOWN_METHOD' })
    const body = { input: { city: 'Lyon' } }
    const envelope = await createUnsignedEnvelope(id.did, { to: hotel.did, skill: 'travel.hotel.book', task: globalThis.crypto.randomUUID(), body, proofs: [token] })
    await expect(collect(pair.requester.services.messaging.stream(pair.executor.peerId, TASK_PROTOCOL_V1, 'submit', { envelope, body }))).rejects.toMatchObject({ code: 'INVALID_ENVELOPE' })
  })

  it('a binding is refused on another connection between the same two peers, and dies with its connection', async () => {
    const { id, token } = await freshAgent()
    const challenge = await challengeOf(pair.requester)
    // one challenge per connection: asked again, the same
    expect(toHex(await challengeOf(pair.requester))).toBe(toHex(challenge))
    const binding = await createBinding(id, { requester: requesterPeer(), executor: executorPeer(), challenge })
    expect(await bind(pair.requester, binding)).toEqual({ agent: id.did, exp: binding.payload.exp })
    const ok = await rawSubmit(pair.requester, id, token, 'travel.hotel.book')
    expect(ok[ok.length - 1].task.state).toBe('completed')

    // a new connection between the same peers; the executor forgets the closed one's session state
    const sessions = (tsE as unknown as { executor: { sessions: SessionRegistry } }).executor.sessions
    expect(sessions.stats().connections).toBeGreaterThan(0)
    await pair.requester.hangUp(pair.executor.peerId)
    await until(() => sessions.stats().connections === 0 ? true : undefined, { interval: 20, timeout: 10_000, what: 'the closed connection forgotten' })
    await pair.requester.dial(pair.executor.getMultiaddrs())
    // the binding did not survive its connection
    let err = await refusal(rawSubmit(pair.requester, id, token, 'travel.hotel.book'))
    expect(err.name).toBe('SessionRequiredError')
    expect(err.code).toBe('SESSION_REQUIRED')
    // replayed on the new connection: no challenge issued there yet, then another challenge
    err = await refusal(bind(pair.requester, binding))
    expect(err.code).toBe('INVALID_SESSION')
    const fresh = await challengeOf(pair.requester)
    expect(toHex(fresh)).not.toBe(toHex(challenge))
    err = await refusal(bind(pair.requester, binding))
    expect(err.name).toBe('InvalidSessionError')
    expect(err.code).toBe('INVALID_SESSION')
    expect(err.message).toMatch(/another connection/)
    err = await refusal(rawSubmit(pair.requester, id, token, 'travel.hotel.book'))
    expect(err.code).toBe('SESSION_REQUIRED')

    // the requester service notices (SESSION_REQUIRED), binds again on the new connection and completes
    sent.length = 0
    const done = await tsR.submitAndWait(car.did, hotel.did, { skill: 'travel.hotel.book', input: 'again', proofs: [carToken] })
    expect(done.state).toBe('completed')
    expect(sent.map(s => s.method)).toEqual(['submit', 'challenge', 'bind', 'submit'])
    expect(sent.filter(s => s.method === 'submit').every(s => s.payload.envelope.sig === undefined)).toBe(true)
  })

  it('a binding from another peer is refused, and one peer\'s binding does not serve another', async () => {
    const { id, token } = await freshAgent()
    const mine = await challengeOf(pair.requester)
    expect(await bind(pair.requester, await createBinding(id, { requester: requesterPeer(), executor: executorPeer(), challenge: mine }))).toMatchObject({ agent: id.did })
    const theirs = await challengeOf(other)
    // the other peer sends a binding naming the requester's peer
    let err = await refusal(bind(other, await createBinding(id, { requester: requesterPeer(), executor: executorPeer(), challenge: theirs })))
    expect(err.code).toBe('INVALID_SESSION')
    expect(err.message).toMatch(/requester peer/)
    // or naming itself, with the requester's connection's challenge
    err = await refusal(bind(other, await createBinding(id, { requester: other.peerId.toString(), executor: executorPeer(), challenge: mine })))
    expect(err.code).toBe('INVALID_SESSION')
    expect(err.message).toMatch(/another connection/)
    // or for another executor
    err = await refusal(bind(other, await createBinding(id, { requester: other.peerId.toString(), executor: requesterPeer(), challenge: theirs })))
    expect(err.code).toBe('INVALID_SESSION')
    // a binding signed by another key than its agent's
    const forged = await createBinding(id, { requester: other.peerId.toString(), executor: executorPeer(), challenge: theirs })
    forged.sig = (await createBinding(car.identity, { requester: other.peerId.toString(), executor: executorPeer(), challenge: theirs })).sig
    err = await refusal(bind(other, forged))
    expect(err.name).toBe('InvalidSignatureError')
    // the agent is bound on the requester's connection, not on the other peer's
    err = await refusal(rawSubmit(other, id, token, 'travel.hotel.book'))
    expect(err.code).toBe('SESSION_REQUIRED')
    const ok = await rawSubmit(pair.requester, id, token, 'travel.hotel.book')
    expect(ok[ok.length - 1].task.state).toBe('completed')
  })

  it('an expired binding is refused, at bind and at a later request', async () => {
    const { id, token } = await freshAgent()
    const challenge = await challengeOf(pair.requester)
    const now = Date.now()
    let err = await refusal(bind(pair.requester, await createBinding(id, { requester: requesterPeer(), executor: executorPeer(), challenge, issuedAt: now - 10_000, expiresAt: now - 5_000 })))
    expect(err.name).toBe('SessionExpiredError')
    expect(err.code).toBe('SESSION_EXPIRED')
    // longer than the executor accepts
    err = await refusal(bind(pair.requester, await createBinding(id, { requester: requesterPeer(), executor: executorPeer(), challenge, issuedAt: now, expiresAt: now + 3_600_001 })))
    expect(err.code).toBe('INVALID_SESSION')
    // a short binding is accepted, then expires
    const short = await createBinding(id, { requester: requesterPeer(), executor: executorPeer(), challenge, expiresAt: Date.now() + 300 })
    await bind(pair.requester, short)
    await until(() => Date.now() > short.payload.exp + SKEW + 50 ? true : undefined, { interval: 50, timeout: 10_000, what: 'the binding expires' })
    err = await refusal(rawSubmit(pair.requester, id, token, 'travel.hotel.book'))
    expect(err.name).toBe('SessionExpiredError')
    expect(err.code).toBe('SESSION_EXPIRED')
    // a renewal makes it live again
    await bind(pair.requester, await createBinding(id, { requester: requesterPeer(), executor: executorPeer(), challenge }))
    const ok = await rawSubmit(pair.requester, id, token, 'travel.hotel.book')
    expect(ok[ok.length - 1].task.state).toBe('completed')
  })

  it('a skill that requires envelope mode refuses a session-mode request; the requester sends it again signed', async () => {
    const { id, token } = await freshAgent()
    const challenge = await challengeOf(pair.requester)
    await bind(pair.requester, await createBinding(id, { requester: requesterPeer(), executor: executorPeer(), challenge }))
    // by the executor's pattern list (payment.*) and by the skill's own option
    for (const skill of ['payment.pay', 'travel.audit']) {
      const err = await refusal(rawSubmit(pair.requester, id, token, skill))
      expect(err.name).toBe('EnvelopeRequiredError')
      expect(err.code).toBe('ENVELOPE_REQUIRED')
      const signed = await rawSubmit(pair.requester, id, token, skill, true)
      expect(signed[signed.length - 1].task.state).toBe('completed')
    }
    // even without a binding, the answer says what to do
    const stranger = await freshAgent()
    expect((await refusal(rawSubmit(pair.requester, stranger.id, stranger.token, 'payment.pay'))).code).toBe('ENVELOPE_REQUIRED')

    // the requester service: refused unsigned, sent again signed, once; signed from then on
    sent.length = 0
    const done = await tsR.submitAndWait(car.did, hotel.did, { skill: 'payment.pay', input: { amount: 5 }, proofs: [carToken] })
    expect(done.state).toBe('completed')
    let submits = sent.filter(s => s.method === 'submit')
    expect(submits.map(s => s.payload.envelope.sig instanceof Uint8Array)).toEqual([false, true])
    sent.length = 0
    expect((await tsR.submitAndWait(car.did, hotel.did, { skill: 'payment.pay', input: { amount: 6 }, proofs: [carToken] })).state).toBe('completed')
    submits = sent.filter(s => s.method === 'submit')
    expect(submits.map(s => s.payload.envelope.sig instanceof Uint8Array)).toEqual([true])
    // other skills stay in session mode
    sent.length = 0
    expect((await tsR.submitAndWait(car.did, hotel.did, { skill: 'travel.hotel.book', input: 7, proofs: [carToken] })).state).toBe('completed')
    expect(sent.filter(s => s.method === 'submit').map(s => s.payload.envelope.sig)).toEqual([undefined])
  })

  it('an executor without session mode is sent signed envelopes', async () => {
    const plain = await startTaskPair(closers)
    const agent = await plain.icE.host({ key: 'plain', name: 'Plain', skills: [{ id: 'travel.hotel.book' }] })
    const asker = await plain.icR.host({ key: 'asker', name: 'Asker', skills: [{ id: 'vehicle.car.assistant' }] })
    const token = await delegate(driver, { audience: asker.did, capabilities: [{ skill: 'travel.*' }], expiresAt: Date.now() + 3_600_000 })
    const ts = createTaskService(plain.icE, { session: { enabled: false } })
    closers.push(async () => ts.stop())
    await ts.serve(agent.did, 'travel.hotel.book', () => 'ok')
    const log: Sent[] = []
    const tr = taskService({})({ peerId: plain.requester.peerId, logger: plain.requester.logger, messaging: recording(plain.requester.services.messaging, log), interconnect: plain.icR })
    closers.push(async () => tr.stop())
    await resolvable(plain.icR, agent.did)
    for (let i = 0; i < 2; i++) expect((await tr.submitAndWait(asker.did, agent.did, { skill: 'travel.hotel.book', input: i, proofs: [token] })).state).toBe('completed')
    // asked once (UNKNOWN_METHOD), then remembered
    expect(log.map(s => s.method)).toEqual(['challenge', 'submit', 'submit'])
    expect(log.filter(s => s.method === 'submit').every(s => s.payload.envelope.sig instanceof Uint8Array)).toBe(true)
  }, 60_000)
})

describe('session registry bounds', () => {
  class FakeConnection {
    status = 'open'
    private readonly listeners: Array<() => void> = []
    constructor (readonly id: string) {}
    addEventListener (_: 'close', l: () => void): void { this.listeners.push(l) }
    close (): void { this.status = 'closed'; for (const l of this.listeners) l() }
  }

  it('bounds connections per peer and in total, agents per connection, and forgets a closed connection', async () => {
    const reg = new SessionRegistry({ maxConnections: 3, maxConnectionsPerPeer: 2, maxAgentsPerConnection: 2 }, {
      verificationCache: new VerificationCache(), log: defaultLogger().forComponent('test')
    })
    const a1 = new FakeConnection('a1')
    const a2 = new FakeConnection('a2')
    reg.challenge(a1, 'peerA')
    reg.challenge(a2, 'peerA')
    expect(() => reg.challenge(new FakeConnection('a3'), 'peerA')).toThrow(expect.objectContaining({ code: 'TOO_MANY_REQUESTS' }))
    reg.challenge(new FakeConnection('b1'), 'peerB')
    expect(() => reg.challenge(new FakeConnection('c1'), 'peerC')).toThrow(expect.objectContaining({ code: 'TOO_MANY_REQUESTS' }))
    a1.close()
    expect(reg.stats()).toEqual({ connections: 2, peers: 2, bindings: 0 })
    reg.challenge(new FakeConnection('a3'), 'peerA')

    // agents per connection (the peer ids must be real: they are checked for shape)
    const P = peerIdFromPrivateKey(await ed25519KeyFromSeed('04'.repeat(32))).toString()
    const Q = peerIdFromPrivateKey(await ed25519KeyFromSeed('05'.repeat(32))).toString()
    const conn = new FakeConnection('p')
    const reg2 = new SessionRegistry({ maxAgentsPerConnection: 2 }, { verificationCache: new VerificationCache(), log: defaultLogger().forComponent('test') })
    const challenge = reg2.challenge(conn, P)
    for (let i = 0; i < 2; i++) await reg2.bind(conn, P, Q, await createBinding(await createIdentity(), { requester: P, executor: Q, challenge }))
    const third = await createIdentity()
    await expect(reg2.bind(conn, P, Q, await createBinding(third, { requester: P, executor: Q, challenge }))).rejects.toMatchObject({ code: 'TOO_MANY_REQUESTS' })
    expect(() => { reg2.check('p', third.did) }).toThrow(expect.objectContaining({ code: 'SESSION_REQUIRED' }))
    conn.close()
    expect(reg2.stats()).toEqual({ connections: 0, peers: 0, bindings: 0 })
  })

  it('refuses an unsigned submit where session mode is off, and parses one where it is on', async () => {
    const id = await createIdentity()
    const envelope = await createUnsignedEnvelope(id.did, { to: id.did, skill: 'travel.hotel.book', task: 't-1', body: { input: null }, proofs: [] })
    expect(() => checkSubmit({ envelope, body: { input: null } })).toThrow(expect.objectContaining({ code: 'INVALID_ENVELOPE' }))
    expect(checkSubmit({ envelope, body: { input: null } }, { unsigned: true }).checked.envelope.sig).toBeUndefined()
    // a `sig` that is present must still be 64 bytes
    expect(() => checkSubmit({ envelope: { ...envelope, sig: new Uint8Array(3) }, body: { input: null } }, { unsigned: true })).toThrow(expect.objectContaining({ code: 'INVALID_ENVELOPE' }))
  })
})

interface SessionVectors {
  agent: { seed: string, did: string }
  requester: { seed: string, peer: string }
  executor: { seed: string, peer: string }
  payload: Record<string, unknown>
  signingBytes: string
  signature: string
  hex: string
  verifyAt: number
  refusals: Array<{ name: string, error: string, challenge?: unknown, remotePeer?: string, selfPeer?: string, at?: number, flipSignatureByte?: number }>
  unsigned: { hex: string }
}

describe('spec/collab-tasks.md 2.6.7 session vectors', () => {
  const v = readSpecBlock<SessionVectors>('collab-tasks.md', 'session-vectors')
  const tasks = readSpecBlock<{ envelope: { hex: string } }>('collab-tasks.md', 'vectors')

  it('the binding: principals, signing bytes, signature, encoding; it verifies; each refusal gives its error', async () => {
    const agent = identityFromPrivateKey(await ed25519KeyFromSeed(v.agent.seed))
    expect(agent.did).toBe(v.agent.did)
    expect(peerIdFromPrivateKey(await ed25519KeyFromSeed(v.requester.seed)).toString()).toBe(v.requester.peer)
    expect(peerIdFromPrivateKey(await ed25519KeyFromSeed(v.executor.seed)).toString()).toBe(v.executor.peer)
    const payload = fromJson(v.payload)
    expect(toHex(bindingSigningBytes(payload))).toBe(v.signingBytes)
    expect(v.signingBytes.startsWith(toHex(new TextEncoder().encode(SESSION_PREFIX)))).toBe(true)
    const made = await createBinding(agent, {
      requester: payload.requester, executor: payload.executor, challenge: payload.challenge, issuedAt: payload.iat, expiresAt: payload.exp
    })
    expect(toHex(made.sig)).toBe(v.signature)
    expect(toHex(dagCbor.encode(made))).toBe(v.hex)
    const decoded = dagCbor.decode(fromHex(v.hex))
    const base = { remotePeer: v.requester.peer, selfPeer: v.executor.peer, challenge: payload.challenge, now: v.verifyAt }
    expect((await verifyBinding(decoded, base)).payload).toEqual(payload)
    for (const r of v.refusals) {
      const raw = dagCbor.decode(fromHex(v.hex)) as { sig: Uint8Array }
      if (r.flipSignatureByte != null) raw.sig[r.flipSignatureByte] ^= 0x01
      const err = await rejectionOf(verifyBinding(raw, {
        ...base,
        ...(r.challenge != null ? { challenge: fromJson(r.challenge) } : {}),
        ...(r.remotePeer != null ? { remotePeer: r.remotePeer } : {}),
        ...(r.selfPeer != null ? { selfPeer: r.selfPeer } : {}),
        ...(r.at != null ? { now: r.at } : {})
      }))
      expect(err.code, r.name).toBe(r.error)
    }
  })

  it('the session-mode envelope is section 13\'s envelope without sig', () => {
    const signed = dagCbor.decode(fromHex(tasks.envelope.hex)) as { payload: unknown }
    expect(toHex(dagCbor.encode({ payload: signed.payload }))).toBe(v.unsigned.hex)
    const { checked } = checkSubmit({ envelope: dagCbor.decode(fromHex(v.unsigned.hex)), body: { input: null } }, { unsigned: true })
    expect(checked.envelope.sig).toBeUndefined()
    expect(checked.envelope.payload).toEqual(signed.payload)
  })
})

describe('session client (requester side)', () => {
  const log = defaultLogger().forComponent('test')
  const P = '12D3KooWPT98FXMfDQYavZm66EeVjTqP9Nnehn1gyaydqV8L8BQw'
  const Q = '12D3KooWHFd1gyNYFqxt7ke9FY2VoVVWY2XSPhvL9vg2pB6wQGfa'

  it('binds once for concurrent requests, renews a binding near its expiry, and remembers executors without session mode', async () => {
    const agent = await createIdentity()
    const calls: string[] = []
    let ttl = 0
    const client = new SessionClient({ bindingTtl: 10_000, renewBefore: 2_000 }, async (peer, method, payload) => {
      calls.push(`${peer} ${method}`)
      if (peer === 'old') throw Object.assign(new Error('no such method'), { code: 'UNKNOWN_METHOD' })
      if (method === 'challenge') return { challenge: new Uint8Array(16).fill(1), maxTtl: 60_000 }
      const b = parseBinding((payload as { binding: unknown }).binding).payload
      ttl = b.exp - b.iat
      return { agent: b.agent, exp: b.exp - 8_500 }
    }, P, log)
    expect(await Promise.all([client.ensure(Q, agent), client.ensure(Q, agent), client.ensure(Q, agent)])).toEqual([true, true, true])
    expect(calls).toEqual([`${Q} challenge`, `${Q} bind`])
    expect(ttl).toBe(10_000)
    // the executor granted 1.5 s: less than renewBefore left, so the next request binds again
    expect(await client.ensure(Q, agent)).toBe(true)
    expect(calls).toHaveLength(4)
    client.forget(Q, agent.did)
    expect(await client.ensure(Q, agent)).toBe(true)
    expect(calls).toHaveLength(6)
    // a peer without session mode: asked once, then signed
    expect(await client.ensure('old', agent)).toBe(false)
    expect(await client.ensure('old', agent)).toBe(false)
    expect(calls.filter(c => c.startsWith('old'))).toEqual(['old challenge'])
    expect(client.stats()).toMatchObject({ unsupported: 1 })
    expect(() => new SessionClient({ bindingTtl: 86_400_001 }, async () => ({}), P, log)).toThrow(RangeError)
  })

  it('learns a peer of 1.0.0 only once for the version and for session mode, and looks again after 30 s', async () => {
    const agent = await createIdentity()
    const calls: string[] = []
    const client = new SessionClient({}, async (peer, method) => {
      calls.push(`${peer} ${method}`)
      throw Object.assign(new Error('not served'), { code: 'PROTOCOL_NOT_SUPPORTED' })
    }, P, log)
    expect(await client.ensure('v1', agent)).toBe(false)
    // the requester's choice of version reads the same memo: 1.0.0 at once, no 2.0.0 attempt first
    expect(client.versions.version('v1')).toBe(1)
    expect(await client.ensure('v1', agent)).toBe(false)
    expect(calls).toEqual(['v1 challenge'])
    // after the recheck both look again (it may have been upgraded): not ten minutes later
    const later = Date.now() + 30_001
    expect(client.versions.version('v1', later)).toBeUndefined()
    expect(client.versions.sessionless('v1', later)).toBe(false)
    // a 2.0.0 peer without session mode stays signed for unsupportedFor, its version still to be looked up
    client.versions.setSessionless('old')
    expect(client.versions.sessionless('old', later)).toBe(true)
    expect(client.versions.version('old')).toBeUndefined()
    expect(client.versions.sessionless('old', Date.now() + 600_001)).toBe(false)
  })
})
