/**
 * Tasks through a domain gateway, over TCP on 127.0.0.1 between separate
 * nodes: a domain (`hotels.example`) of a host node and a gateway's inner node
 * on their own DHT behind a connection gater, and a public network of three
 * outside peers and the gateway's outer node, which runs the task relay.
 * Outside requesters (their own task services, and an orchestrator) submit
 * tasks to the inner agent; the executor sees the caller's DID and chain; the
 * relay applies the gateway's export policy and keeps control calls to the
 * submitting peer.
 */
import { membersOnlyGater } from '@ioa/transport'
import { createGateway, createIdentity, createInterconnect, fromRemote as interconnectError } from '@ioa/interconnect'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startNetwork } from '../../../test/harness/index.js'
import { delay, rejectionOf, until } from '../../../test/util.js'
import { delegate } from '../src/auth/delegation.js'
import { createOrchestrator } from '../src/orchestration/orchestrator.js'
import { createTaskGateway } from '../src/tasks/gateway.js'
import { createTaskService } from '../src/tasks/service.js'
import type { Network } from '../../../test/harness/index.js'
import type { Token } from '../src/auth/delegation.js'
import type { Orchestrator } from '../src/orchestration/orchestrator.js'
import type { RelayEvent, TaskGateway } from '../src/tasks/gateway.js'
import type { SkillContext, TaskEvent, TaskService } from '../src/tasks/service.js'
import type { IoaSpanParent, IoaTracer } from '../src/tracing.js'
import type { Gateway, HostedAgent, Identity, Interconnect } from '@ioa/interconnect'
import type { PrivateKey } from '@libp2p/interface'

const DOMAIN = 'hotels.example'
const INNER_DHT = '/ioa/kad-domain/1.0.0'
const LEASE = 200
const POLL = { timeout: 20_000, interval: 200 }

/** Refuses every peer that is not a member of the domain, in both directions */
describe('tasks through a gateway (TCP)', () => {
  // inner: 0 hosts the hotel agent, 1 is the gateway's inner node
  let inner: Network
  // outer: 0 requester, 1 another outside peer, 2 a partner's peer, 3 the gateway's outer node
  let outer: Network
  let innerIcs: Interconnect[]
  let outerIcs: Interconnect[]
  let executor: TaskService
  let requester: TaskService
  let stranger: TaskService
  let partnerTs: TaskService
  let gateway: Gateway
  let relay: TaskGateway
  const relayEvents: RelayEvent[] = []
  let orchestrator: Orchestrator
  let hotel: HostedAgent
  let traveller: HostedAgent
  let partner: HostedAgent
  let user: Identity
  let travellerToken: Token
  let partnerToken: Token
  const seen: Array<{ skill: string, caller: string, root: string, depth: number, task: string }> = []
  /** the trace context each task's handler saw */
  const traces = new Map<string, unknown>()
  const holds: AbortSignal[] = []

  const record = (skill: string, ctx: SkillContext): void => {
    seen.push({ skill, caller: ctx.caller, root: ctx.chain.root, depth: ctx.chain.path.length, task: ctx.task.id })
    traces.set(ctx.task.id, ctx.trace)
  }

  beforeAll(async () => {
    const keys: PrivateKey[] = await Promise.all([0, 1].map(async () => generateKeyPair('Ed25519')))
    const members = new Set(keys.map(k => peerIdFromPrivateKey(k).toString()))
    inner = await startNetwork({
      size: 2,
      topology: 'full',
      nodeInit: i => ({ privateKey: keys[i], dhtProtocol: INNER_DHT, connectionGater: membersOnlyGater(members) })
    })
    outer = await startNetwork({ size: 4, topology: 'full' })
    await Promise.all([inner.waitForRoutingTables(1, { timeout: 20_000 }), outer.waitForRoutingTables(3, { timeout: 20_000 })])
    const gatewayInner = inner.nodes[1].peerId.toString()
    const gatewayOuter = outer.nodes[3].peerId.toString()

    innerIcs = [
      await createInterconnect(inner.nodes[0], { domain: DOMAIN, gateways: [gatewayOuter], private: true, trustedGateways: [gatewayInner] }),
      await createInterconnect(inner.nodes[1], { domain: DOMAIN })
    ]
    outerIcs = await Promise.all(outer.nodes.map(async (n, i) => createInterconnect(n, { domain: i === 2 ? 'partner.example' : i === 3 ? DOMAIN : 'travel-app.example' })))

    hotel = await innerIcs[0].host({
      key: 'hotel',
      name: 'Hotel desk',
      skills: [{ id: 'travel.hotel.booking' }, { id: 'travel.hotel.hold' }, { id: 'travel.hotel.internal-pricing' }, { id: 'travel.partner.rates' }]
    })
    traveller = await outerIcs[0].host({ key: 'traveller', name: 'Traveller', skills: [{ id: 'assistant.travel' }] })
    partner = await outerIcs[2].host({ key: 'partner', name: 'Partner', skills: [{ id: 'assistant.partner' }] })
    user = await createIdentity()
    travellerToken = await delegate(user, { audience: traveller.did, capabilities: [{ skill: 'travel.*' }], expiresAt: Date.now() + 3_600_000 })
    partnerToken = await delegate(user, { audience: partner.did, capabilities: [{ skill: 'travel.*' }], expiresAt: Date.now() + 3_600_000 })

    // no hold-back (2.0.0): every state of a relayed task streams back, as deltas
    executor = createTaskService(innerIcs[0], { leaseInterval: LEASE, holdBack: 0 })
    await executor.serve(hotel.did, 'travel.hotel.booking', async (input: any, ctx) => {
      record('travel.hotel.booking', ctx)
      ctx.progress({ step: 'searching' })
      await delay(50, ctx.signal)
      ctx.artifact({ offer: 'room 12' })
      return { booked: true, nights: input?.nights ?? null }
    })
    await executor.serve(hotel.did, 'travel.hotel.hold', async (_input, ctx) => {
      record('travel.hotel.hold', ctx)
      try {
        await delay(30_000, ctx.signal)
      } catch (err) {
        holds.push(ctx.signal)
        throw err
      }
      return 'held'
    })
    await executor.serve(hotel.did, 'travel.hotel.internal-pricing', () => ({ price: 1 }))
    await executor.serve(hotel.did, 'travel.partner.rates', (_input, ctx) => {
      record('travel.partner.rates', ctx)
      return { rate: 42 }
    })
    requester = createTaskService(outerIcs[0], { leaseInterval: LEASE })
    stranger = createTaskService(outerIcs[1], { leaseInterval: LEASE })
    partnerTs = createTaskService(outerIcs[2], { leaseInterval: LEASE })

    await until(async () => (await innerIcs[1].discoverAll({ capability: 'travel' }, { cache: false, timeout: 3_000 })).length === 1 || undefined, { ...POLL, what: 'inner agent announced' })
    gateway = await createGateway({
      inner: innerIcs[1],
      outer: outerIcs[3],
      domain: DOMAIN,
      exports: [
        { skill: 'travel.hotel.booking' },
        { skill: 'travel.hotel.hold' },
        { skill: 'travel.partner', domains: ['partner.example'] }
      ],
      innerLookupTimeout: 3_000
    })
    await until(async () => {
      if (gateway.exported().length < 1) await gateway.refresh()
      return gateway.exported().length === 1 || undefined
    }, { ...POLL, what: 'gateway exports' })
    relay = await createTaskGateway({ gateway, inner: innerIcs[1], outer: outerIcs[3], requestTimeout: 5_000, onRelay: e => { relayEvents.push(e) } })

    orchestrator = createOrchestrator({ ic: outerIcs[0], tasks: requester, agent: traveller, backoff: { initial: 100, max: 500 } })

    // outside, the agent is found through the gateway; the gateway finds the callers' cards
    await until(async () => (await outerIcs[0].discoverAll({ capability: 'travel.hotel.booking' }, { cache: false, timeout: 3_000 })).length === 1 || undefined, { ...POLL, what: 'outside discovery' })
    for (const did of [traveller.did, partner.did]) {
      await until(async () => (await outerIcs[3].resolve(did, { timeout: 3_000 }).catch(() => undefined)) ?? undefined, { ...POLL, what: 'caller cards' })
    }
  })

  afterAll(async () => {
    await orchestrator?.stop().catch(() => {})
    await relay?.stop().catch(() => {})
    await gateway?.stop().catch(() => {})
    for (const ts of [requester, stranger, partnerTs, executor]) await ts?.stop().catch(() => {})
    for (const ic of [...(innerIcs ?? []), ...(outerIcs ?? [])]) await ic.stop().catch(() => {})
    await Promise.allSettled([inner?.stop(), outer?.stop()])
  })

  it('refuses a node that already serves the task protocol, and bad options', async () => {
    // the host runs a task service: it may not also be a gateway's outer node
    const err = await rejectionOf(createTaskGateway({ gateway, inner: innerIcs[1], outer: innerIcs[0] }))
    expect(err.name).toBe('TaskProtocolInUseError')
    expect(err.code).toBe('PROTOCOL_IN_USE')
    await expect(createTaskGateway({ gateway, inner: innerIcs[1], outer: innerIcs[1] })).rejects.toThrow(TypeError)
    await expect(createTaskGateway({ gateway, inner: innerIcs[1], outer: outerIcs[1], maxRelayed: 0 })).rejects.toThrow(RangeError)
  })

  it('an outside requester runs a task on the inner agent; the executor sees its DID and chain; events stream back', async () => {
    const events: TaskEvent[] = []
    const before = relay.stats().relayed
    const done = await requester.submitAndWait(traveller.did, hotel.did, {
      skill: 'travel.hotel.booking', input: { nights: 2 }, proofs: [travellerToken], taskId: 'via-gateway-1'
    }, { onEvent: e => { events.push(e) } })
    expect(done).toMatchObject({ id: 'via-gateway-1', state: 'completed', result: { booked: true, nights: 2 } })
    expect(done.messages).toEqual([{ step: 'searching' }])
    expect(done.artifacts).toEqual([{ offer: 'room 12' }])
    const states = events.flatMap(e => e.type === 'status' ? [e.task.state] : [])
    expect(states[0]).toBe('submitted')
    expect(states).toContain('working')
    expect(events.some(e => e.type === 'status' && e.task.messages.length === 1 && e.task.state === 'working')).toBe(true)
    expect(events.some(e => e.type === 'artifact')).toBe(true)
    expect(seen.find(s => s.task === 'via-gateway-1')).toEqual({ skill: 'travel.hotel.booking', caller: traveller.did, root: user.did, depth: 1, task: 'via-gateway-1' })
    expect(relay.ownerOf(hotel.did, 'via-gateway-1')).toBe(outer.nodes[0].peerId.toString())
    expect(relay.stats().relayed).toBe(before + 1)
    expect(relayEvents.find(e => e.taskId === 'via-gateway-1')).toMatchObject({ type: 'relayed', agent: hotel.did, skill: 'travel.hotel.booking', from: traveller.did, peer: outer.nodes[0].peerId.toString() })
    // the owner reads it again through the relay
    expect(await requester.get(hotel.did, 'via-gateway-1')).toMatchObject({ state: 'completed', result: { booked: true } })
  })

  it('strips the trace field of a relayed submit (keepTrace is off by default); the task runs on 2.0.0 end to end', async () => {
    const trace = { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' }
    const done = await requester.submitAndWait(traveller.did, hotel.did, {
      skill: 'travel.hotel.booking', input: { nights: 3 }, proofs: [travellerToken], taskId: 'via-gateway-trace'
    }, { trace })
    expect(done).toMatchObject({ state: 'completed', result: { booked: true, nights: 3 }, messages: [{ step: 'searching' }], artifacts: [{ offer: 'room 12' }] })
    expect(traces.has('via-gateway-trace')).toBe(true)
    expect(traces.get('via-gateway-trace')).toBeUndefined()
    // both hops spoke 2.0.0
    const protocols = (node: { getConnections: () => Array<{ streams: Array<{ protocol?: string }> }> }): Array<string | undefined> =>
      node.getConnections().flatMap(c => c.streams.map(st => st.protocol))
    expect(protocols(outer.nodes[0])).toContain('/ioa/task/2.0.0')
    expect(protocols(inner.nodes[1])).toContain('/ioa/task/2.0.0')
    expect(await requester.get(hotel.did, 'via-gateway-trace')).toEqual(done)
  })

  it('an idempotent repeat through the gateway follows the earlier task, under its id', async () => {
    const request = { skill: 'travel.hotel.booking', input: { nights: 1 }, proofs: [travellerToken], idempotencyKey: 'key-1' }
    const first = await requester.submitAndWait(traveller.did, hotel.did, { ...request, taskId: 'idem-1' })
    const again = await requester.submitAndWait(traveller.did, hotel.did, { ...request, taskId: 'idem-2' })
    expect(again).toMatchObject({ id: 'idem-1', state: 'completed', result: first.result })
    expect(seen.filter(s => s.task === 'idem-1' || s.task === 'idem-2')).toHaveLength(1)
    expect(relay.ownerOf(hotel.did, 'idem-1')).toBe(outer.nodes[0].peerId.toString())
  })

  it('a skill of the agent that is not exported is refused with NOT_EXPORTED', async () => {
    const refused = gateway.stats().notExported
    const err = await rejectionOf(requester.submitAndWait(traveller.did, hotel.did, { skill: 'travel.hotel.internal-pricing', input: null, proofs: [travellerToken] }))
    expect(err.code).toBe('NOT_EXPORTED')
    expect((interconnectError(err) as Error).name).toBe('NotExportedError')
    expect(err.name).toBe('NotExportedError')
    expect(gateway.stats().notExported).toBe(refused + 1)
    expect(relayEvents.some(e => e.type === 'refused' && e.skill === 'travel.hotel.internal-pricing' && e.code === 'NOT_EXPORTED')).toBe(true)
    expect(seen.some(s => s.skill === 'travel.hotel.internal-pricing')).toBe(false)
  })

  it('a skill exported to one domain is refused to callers of other domains, and to a caller that is not the card\'s peer', async () => {
    const err = await rejectionOf(requester.submitAndWait(traveller.did, hotel.did, { skill: 'travel.partner.rates', input: null, proofs: [travellerToken] }))
    expect(err.code).toBe('NOT_EXPORTED')
    // the partner's key used from another peer: its card is not served by that peer, so no domain
    const stolen = await rejectionOf(stranger.submitAndWait(partner.identity, hotel.did, { skill: 'travel.partner.rates', input: null, proofs: [partnerToken] }))
    expect(stolen.code).toBe('NOT_EXPORTED')
    expect(seen.some(s => s.skill === 'travel.partner.rates')).toBe(false)
    // from the partner's own peer, its domain is allowed
    const done = await partnerTs.submitAndWait(partner.did, hotel.did, { skill: 'travel.partner.rates', input: null, proofs: [partnerToken] })
    expect(done.result).toEqual({ rate: 42 })
    expect(seen.find(s => s.skill === 'travel.partner.rates')?.caller).toBe(partner.did)
  })

  it('get and cancel work for the submitting peer and are refused for another outside peer', async () => {
    const taskId = 'hold-1'
    const stream = requester.submit(traveller.did, hotel.did, { skill: 'travel.hotel.hold', input: null, proofs: [travellerToken], taskId })
    const states: string[] = []
    for await (const e of stream) {
      if (e.type === 'status') states.push(e.task.state)
      if (states.includes('working')) break
    }
    expect(await requester.get(hotel.did, taskId)).toMatchObject({ id: taskId, state: 'working' })

    const refusedBefore = relay.stats().refused
    const refusedGet = await rejectionOf(stranger.get(hotel.did, taskId))
    expect(refusedGet.name).toBe('UnauthorizedError')
    expect(refusedGet.code).toBe('UNAUTHORIZED')
    const refusedCancel = await rejectionOf(stranger.cancel(hotel.did, taskId))
    expect(refusedCancel.name).toBe('UnauthorizedError')
    const refusedFollow = await rejectionOf(stranger.resubscribe(hotel.did, taskId).next())
    expect(refusedFollow.code).toBe('UNAUTHORIZED')
    expect(relay.stats().refused).toBe(refusedBefore + 3)
    expect((await requester.get(hotel.did, taskId)).state).toBe('working')
    // a task the relay never saw
    expect((await rejectionOf(requester.get(hotel.did, 'never-submitted'))).name).toBe('UnknownTaskError')

    const canceled = await requester.cancel(hotel.did, taskId)
    expect(canceled).toMatchObject({ state: 'canceled', error: { code: 'CANCELED' } })
    await until(() => holds.length === 1 || undefined, { timeout: 5_000, what: 'handler aborted' })
    expect(holds[0].aborted).toBe(true)
    // following it again gives the final state
    const again: TaskEvent[] = []
    for await (const e of requester.resubscribe(hotel.did, taskId)) again.push(e)
    expect(again.map(e => e.type === 'status' ? e.task.state : e.type)).toEqual(['canceled'])
  })

  it('closing the requester\'s stream closes the relayed stream', async () => {
    const stream = requester.submit(traveller.did, hotel.did, { skill: 'travel.hotel.hold', input: null, proofs: [travellerToken], taskId: 'hold-2' })
    for await (const e of stream) {
      if (e.type === 'status' && e.task.state === 'working') break
    }
    await until(() => relay.stats().streams === 0 || undefined, { timeout: 5_000, what: 'relayed stream closed' })
    // the task itself goes on; its owner cancels it
    expect((await requester.get(hotel.did, 'hold-2')).state).toBe('working')
    expect((await requester.cancel(hotel.did, 'hold-2')).state).toBe('canceled')
  })

  it('the orchestrator runs a one-step plan whose provider is behind the gateway', async () => {
    const result = await orchestrator.runToCompletion({
      id: 'book-through-gateway',
      goal: { intent: 'book', input: { nights: 3 } },
      steps: [{ id: 'book', capability: 'travel.hotel.booking', input: { nights: { $input: 'nights' } }, dependsOn: [] }],
      output: 'book'
    }, { proofs: [travellerToken] })
    expect(result.state).toBe('completed')
    expect(result.result).toEqual({ booked: true, nights: 3 })
    expect(result.steps.book.providers).toEqual([hotel.did])
    const task = result.steps.book.taskIds[0]
    // the executor got a chain from the user through the traveller to the hotel agent
    expect(seen.find(s => s.task === task)).toMatchObject({ caller: traveller.did, root: user.did, depth: 2 })
  })

  // (last: it replaces the relay)
  it('a relay with keepTrace forwards the trace field to the executor', async () => {
    await relay.stop()
    relay = await createTaskGateway({ gateway, inner: innerIcs[1], outer: outerIcs[3], requestTimeout: 5_000, keepTrace: true })
    const trace = { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' }
    const done = await requester.submitAndWait(traveller.did, hotel.did, {
      skill: 'travel.hotel.booking', input: { nights: 2 }, proofs: [travellerToken], taskId: 'via-gateway-kept-trace'
    }, { trace })
    expect(done.state).toBe('completed')
    expect(traces.get('via-gateway-kept-trace')).toEqual(trace)
  })

  // (last: it replaces the relay)
  it('a relay with keepTrace and a tracer makes a relay span under the caller\'s span, which the executor continues', async () => {
    await relay.stop()
    const spans: Array<{ name: string, kind: string, parent: IoaSpanParent, id: string, attributes: Record<string, unknown>, error?: string, ended: boolean }> = []
    // a tracer of the layer's facade that keeps what it is given (the OpenTelemetry one is tested in @ioa/management)
    const tracer: IoaTracer = {
      startSpan (name, kind, parent, attributes) {
        const id = (spans.length + 1).toString(16).padStart(16, 'a')
        const traceId = typeof parent === 'object' && 'trace' in parent ? parent.trace.traceparent.slice(3, 35) : 'f'.repeat(32)
        const rec: (typeof spans)[number] = { name, kind, parent, id, attributes: attributes(), ended: false }
        spans.push(rec)
        return {
          isRecording: () => true,
          setAttribute: (k, v) => { rec.attributes[k] = v },
          setAttributes: (a) => { Object.assign(rec.attributes, a) },
          setError: (type) => { rec.error = type },
          traceContext: () => ({ traceparent: `00-${traceId}-${id}-01` }),
          end: () => { rec.ended = true }
        }
      }
    }
    relay = await createTaskGateway({ gateway, inner: innerIcs[1], outer: outerIcs[3], requestTimeout: 5_000, keepTrace: true, tracer })
    const trace = { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' }
    const done = await requester.submitAndWait(traveller.did, hotel.did, {
      skill: 'travel.hotel.booking', input: { nights: 1 }, proofs: [travellerToken], taskId: 'via-gateway-relay-span'
    }, { trace })
    expect(done.state).toBe('completed')
    const span = await until(() => spans.find(s => s.attributes['ioa.task.id'] === 'via-gateway-relay-span' && s.ended), { ...POLL, what: 'the ended relay span' })
    expect(span).toMatchObject({ name: 'relay travel.hotel.booking', kind: 'server', parent: { trace } })
    expect(span.attributes).toMatchObject({ 'gen_ai.agent.id': hotel.did, 'ioa.skill': 'travel.hotel.booking', 'ioa.caller': traveller.did, 'ioa.gateway.domain': DOMAIN, 'ioa.task.state': 'completed' })
    expect(span.error).toBeUndefined()
    // the executor's parent is the relay span, in the caller's trace
    expect(traces.get('via-gateway-relay-span')).toEqual({ traceparent: `00-4bf92f3577b34da6a3ce929d0e0e4736-${span.id}-01` })
    // a submit without a trace makes no relay span
    await requester.submitAndWait(traveller.did, hotel.did, { skill: 'travel.hotel.booking', input: { nights: 1 }, proofs: [travellerToken], taskId: 'via-gateway-no-trace' })
    expect(spans.some(s => s.attributes['ioa.task.id'] === 'via-gateway-no-trace')).toBe(false)
  })
})
