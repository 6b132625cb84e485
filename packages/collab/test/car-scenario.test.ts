/**
 * The car scenario of ARCHITECTURE.md as an integration test over TCP on six
 * nodes in a ring (so discovery and revocations cross the DHT and several
 * hops): a driver delegates to the car agent; the car agent's orchestrator
 * plans "book a hotel for tonight" (route -> hotel search -> booking ->
 * payment), discovers a map agent, two hotel agents (one of which fails) and
 * a payment agent, and pays within the amount the driver allowed. The
 * payment agent trusts only chains rooted at the driver, checks revocations
 * and enforces the cap by policy.
 */
import { createIdentity, createInterconnect } from '@ioa/interconnect'
import { MemoryDatastore } from 'datastore-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { rejectionOf, until as poll } from '../../../test/util.js'
import { startNetwork } from '../../../test/harness/index.js'
import { delegate, tokenCid } from '../src/auth/delegation.js'
import { createOrchestrator } from '../src/orchestration/orchestrator.js'
import { declarativePlanner } from '../src/planning/planners/index.js'
import { constraintPolicy } from '../src/auth/policy.js'
import { RevocationStore, createRevocation, createRevocationService } from '../src/auth/revocation.js'
import { createTaskService } from '../src/tasks/service.js'
import type { Network } from '../../../test/harness/index.js'
import type { Capability, Token } from '../src/auth/delegation.js'
import type { Orchestrator, OrchestratorEvent } from '../src/orchestration/orchestrator.js'
import type { Goal } from '../src/planning/plan.js'
import type { RevocationService } from '../src/auth/revocation.js'
import type { TaskService } from '../src/tasks/service.js'
import type { HostedAgent, Identity, Interconnect, Ranker } from '@ioa/interconnect'

const LEASE = 200

/** Poll every 100 ms, for up to 30 s unless told otherwise */
async function until<T> (fn: () => Promise<T | undefined> | T | undefined, timeout = 30_000, what = 'condition'): Promise<T> {
  return poll(fn, { timeout, interval: 100, what })
}


function ofType<T extends OrchestratorEvent['type']> (events: OrchestratorEvent[], type: T): Array<Extract<OrchestratorEvent, { type: T }>> {
  return events.filter((e): e is Extract<OrchestratorEvent, { type: T }> => e.type === type)
}

const TONIGHT = 'book a hotel for tonight'

const goal = (extra: Record<string, unknown> = {}): Goal => ({
  intent: TONIGHT,
  input: { position: { lat: 48.85, lon: 2.35 }, destination: 'Marseille', nights: 1, luxury: false, ...extra }
})

describe('car scenario: "book me a hotel for tonight" across six TCP nodes', () => {
  let net: Network
  const ics: Interconnect[] = []
  const services: TaskService[] = []
  const revocationServices: RevocationService[] = []
  let driver: Identity
  let car: HostedAgent
  let map: HostedAgent
  let hotelA: HostedAgent
  let hotelB: HostedAgent
  let payment: HostedAgent
  let carToken: Token
  let paymentStore: RevocationStore
  let orchestrator: Orchestrator
  /** bookings made, per run (the run id is the tasks' context id) */
  const bookings = new Map<string, number>()
  const hotelAFailures: string[] = []
  const payments: Array<{ amount: number, currency: string, root: string, depth: number, caller: string, capability: Capability, issuers: string[] }> = []

  beforeAll(async () => {
    // node 0: the car; 1: map; 2: hotel A; 3: hotel B; 4: payment; 5: the driver's phone
    net = await startNetwork({ size: 6, transport: 'tcp', topology: 'ring' })
    await net.waitForRoutingTables(2)
    for (const node of net.nodes) ics.push(await createInterconnect(node, { requestTimeout: 3_000 }))
    for (const node of net.nodes) {
      revocationServices.push(await createRevocationService(node, await RevocationStore.open(new MemoryDatastore())))
    }
    paymentStore = revocationServices[4].store

    driver = await createIdentity()
    car = await ics[0].host({ key: 'car', name: 'Car assistant', skills: [{ id: 'vehicle.car.assistant' }] })
    map = await ics[1].host({ key: 'map', name: 'Maps', skills: [{ id: 'geo.route' }] })
    hotelA = await ics[2].host({ key: 'hotel-a', name: 'Budget Hotels', skills: [{ id: 'travel.hotel.search' }, { id: 'travel.hotel.book' }] })
    hotelB = await ics[3].host({ key: 'hotel-b', name: 'Riviera Hotels', skills: [{ id: 'travel.hotel.search' }, { id: 'travel.hotel.book' }] })
    payment = await ics[4].host({ key: 'payment', name: 'Pay', skills: [{ id: 'payment.pay' }] })

    // the driver's consent: routes and hotels, and payments of at most 300 EUR
    carToken = await delegate(driver, {
      audience: car.did,
      capabilities: [
        { skill: 'geo.*' },
        { skill: 'travel.*' },
        { skill: 'payment.pay', constraints: { maxAmount: 300, currency: 'EUR' } }
      ],
      expiresAt: Date.now() + 3_600_000
    })

    const tsCar = createTaskService(ics[0], { leaseInterval: LEASE })
    const tsMap = createTaskService(ics[1], { leaseInterval: LEASE })
    const tsHotelA = createTaskService(ics[2], { leaseInterval: LEASE })
    const tsHotelB = createTaskService(ics[3], { leaseInterval: LEASE })
    const tsPay = createTaskService(ics[4], {
      leaseInterval: LEASE,
      policy: constraintPolicy(),
      roots: [driver.did],
      revocations: paymentStore
    })
    services.push(tsCar, tsMap, tsHotelA, tsHotelB, tsPay)

    await tsMap.serve(map.did, 'geo.route', (input: any) => ({
      from: input.from, to: input.to, distanceKm: 775, stop: { city: 'Lyon', lat: 45.76, lon: 4.84 }, arrival: 'tonight 21:40'
    }))
    // hotel A's backend is down
    const down = (what: string) => () => {
      hotelAFailures.push(what)
      throw Object.assign(new Error('Budget Hotels backend unavailable'), { code: 'BACKEND_DOWN' })
    }
    await tsHotelA.serve(hotelA.did, 'travel.hotel.search', down('search'))
    await tsHotelA.serve(hotelA.did, 'travel.hotel.book', down('book'))
    await tsHotelB.serve(hotelB.did, 'travel.hotel.search', (input: any) => {
      const offers = [
        { id: 'rh-lyon-1', name: 'Riviera Lyon Centre', city: input.near.city, price: 180, currency: 'EUR' },
        { id: 'rh-lyon-2', name: 'Riviera Lyon Palace', city: input.near.city, price: 450, currency: 'EUR' }
      ]
      const fitting = offers.filter(o => input.luxury === true ? o.price > 300 : o.price <= 300)
      return { best: fitting[0], count: fitting.length }
    })
    await tsHotelB.serve(hotelB.did, 'travel.hotel.book', (input: any, ctx) => {
      const run = ctx.task.contextId
      bookings.set(run, (bookings.get(run) ?? 0) + 1)
      return { reservation: `R-${ctx.task.id.slice(-8)}`, hotel: input.offer.id, amount: input.offer.price, currency: input.offer.currency, payee: hotelB.did }
    })
    await tsPay.serve(payment.did, 'payment.pay', (input: any, ctx) => {
      payments.push({
        amount: input.amount,
        currency: input.currency,
        root: ctx.chain.root,
        depth: ctx.chain.path.length,
        caller: ctx.caller,
        capability: ctx.capability,
        issuers: ctx.chain.path.map(t => t.payload.iss)
      })
      return { paid: input.amount, currency: input.currency, receipt: `P-${ctx.task.id.slice(-8)}`, reference: input.reference }
    })

    const planner = declarativePlanner({
      templates: {
        [TONIGHT]: {
          requires: ['position', 'destination'],
          output: 'pay',
          steps: [
            { id: 'route', capability: 'geo.route', input: { from: { $input: 'position' }, to: { $input: 'destination' } } },
            { id: 'search', capability: 'travel.hotel.search', input: { near: { $ref: 'route.stop' }, nights: { $input: 'nights' }, luxury: { $input: 'luxury' } }, dependsOn: ['route'] },
            { id: 'book', capability: 'travel.hotel.book', input: { offer: { $ref: 'search.best' }, nights: { $input: 'nights' } }, dependsOn: ['search'] },
            { id: 'pay', capability: 'payment.pay', input: { amount: { $ref: 'book.amount' }, currency: { $ref: 'book.currency' }, payee: { $ref: 'book.payee' }, reference: { $ref: 'book.reservation' } }, dependsOn: ['book'] }
          ]
        }
      }
    })
    // prefer the budget chain (so that its failure is met first)
    const ranker: Ranker = { score: (c) => c.card.name.startsWith('Budget') ? 1 : 0.5 }
    orchestrator = createOrchestrator({
      ic: ics[0],
      tasks: tsCar,
      agent: car,
      planner,
      ranker,
      backoff: { initial: 100, max: 500 },
      // each link narrower: the payment agent may take no more than the booking costs
      attenuate: ({ skill, proposed, input }) => {
        if (skill !== 'payment.pay') return proposed
        const cap = Number(proposed.constraints?.maxAmount ?? Infinity)
        const amount = Number((input as { amount?: unknown }).amount)
        return { ...proposed, constraints: { ...proposed.constraints, maxAmount: Math.min(cap, Number.isFinite(amount) ? amount : cap) } }
      }
    })

    // every capability can be found from the car's node through the DHT
    for (const [capability, n] of [['geo.route', 1], ['travel.hotel.search', 2], ['travel.hotel.book', 2], ['payment.pay', 1]] as const) {
      await until(async () => {
        const found = await ics[0].discoverAll({ capability }, { cache: false, timeout: 3_000 }).catch(() => [])
        return found.length >= n ? true : undefined
      }, 30_000, `discover ${capability}`)
    }
  })

  afterAll(async () => {
    await orchestrator?.stop()
    for (const r of revocationServices) await r.stop().catch(() => {})
    for (const s of services) await s.stop().catch(() => {})
    for (const ic of ics) await ic.stop().catch(() => {})
    await net?.stop()
  })

  it('books once, fails over from the failing hotel agent, and pays within the cap under a chain rooted at the driver', async () => {
    payments.length = 0
    const events: OrchestratorEvent[] = []
    const out = await orchestrator.runToCompletion(goal(), { proofs: [carToken], deadline: Date.now() + 30_000, onEvent: e => events.push(e) })
    const plan = ofType(events, 'plan')[0].plan
    expect(plan.steps.map(s => s.id)).toEqual(['route', 'search', 'book', 'pay'])
    expect(out.state).toBe('completed')
    expect(out.steps.route.result).toMatchObject({ stop: { city: 'Lyon' } })
    expect(out.steps.search.providers).toEqual([hotelB.did])
    expect(out.steps.book.providers).toEqual([hotelB.did])
    expect(out.steps.pay.providers).toEqual([payment.did])
    expect(out.result).toMatchObject({ paid: 180, currency: 'EUR' })

    // the failing hotel agent was tried first, then the other took over
    expect(hotelAFailures).toEqual(expect.arrayContaining(['search', 'book']))
    const failovers = ofType(events, 'failover')
    expect(failovers.map(f => f.stepId).sort()).toEqual(['book', 'search'])
    for (const f of failovers) expect(f).toMatchObject({ from: hotelA.did, to: hotelB.did, error: { code: 'BACKEND_DOWN' }, previous: 'failed' })

    // booked exactly once
    expect(bookings.get(out.runId)).toBe(1)
    // paid once, at most 300 EUR, under driver -> car -> payment
    expect(payments).toHaveLength(1)
    const p = payments[0]
    expect(p.amount).toBeLessThanOrEqual(300)
    expect(p.currency).toBe('EUR')
    expect(p.root).toBe(driver.did)
    expect(p.depth).toBe(2)
    expect(p.issuers).toEqual([car.did, driver.did])
    expect(p.caller).toBe(car.did)
    // the link to the payment agent is narrower than the driver's: exactly the booking's amount
    expect(p.capability).toEqual({ skill: 'payment.pay', constraints: { maxAmount: 180, currency: 'EUR' } })
    const delegated = ofType(events, 'delegated').find(d => d.stepId === 'pay')
    expect(delegated?.capabilities).toEqual([{ skill: 'payment.pay', constraints: { maxAmount: 180, currency: 'EUR' } }])
  })

  it('refuses a payment above the driver\'s cap: POLICY_DENIED', async () => {
    payments.length = 0
    const err = await rejectionOf(orchestrator.runToCompletion(goal({ luxury: true }), { proofs: [carToken] }))
    expect(err.code).toBe('POLICY_DENIED')
    expect(err.stepId).toBe('pay')
    expect(err.run.steps.book.result).toMatchObject({ amount: 450 })
    expect(payments).toHaveLength(0)
  })

  it('refuses an escalating delegation (the car grants the payment agent 500): ESCALATION', async () => {
    payments.length = 0
    const greedy = createOrchestrator({
      ic: ics[0],
      tasks: services[0],
      agent: car,
      attenuate: ({ proposed }) => ({ ...proposed, constraints: { ...proposed.constraints, maxAmount: 500 } })
    })
    const events: OrchestratorEvent[] = []
    const err = await rejectionOf(greedy.runToCompletion({
      id: 'greedy',
      goal: { intent: 'pay', input: {} },
      steps: [{ id: 'pay', capability: 'payment.pay', input: { amount: 250, currency: 'EUR' }, dependsOn: [] }]
    }, { proofs: [carToken], onEvent: e => events.push(e) }))
    expect(err.name).toBe('EscalationError')
    expect(err.code).toBe('ESCALATION')
    // refused when the car signs it (issue 11 item 8), naming the constraint and both values (item 14)
    expect(err.message).toMatch(/maxAmount is 500, the proof allows at most 300/)
    expect(ofType(events, 'delegated')).toHaveLength(0)
    // fatal: not retried, not failed over
    expect(ofType(events, 'step-retry')).toHaveLength(0)
    expect(payments).toHaveLength(0)
  })

  it('an invocation token works only for its issuer: another agent replaying it is UNAUTHORIZED', async () => {
    payments.length = 0
    // the car's grant to the payment agent, as the orchestrator makes it
    const invocation = await delegate(car.identity, {
      audience: payment.did,
      capabilities: [{ skill: 'payment.pay', constraints: { maxAmount: 100, currency: 'EUR' } }],
      expiresAt: carToken.payload.exp,
      proofs: [carToken]
    })
    // hotel B got hold of it and presents it in its own request
    const err = await rejectionOf(services[3].submitAndWait(hotelB.did, payment.did, {
      skill: 'payment.pay', input: { amount: 90, currency: 'EUR', reference: 'manual' }, proofs: [invocation, carToken]
    }))
    expect(err.code).toBe('UNAUTHORIZED')
    // the car itself may use it
    const ok = await services[0].submitAndWait(car.did, payment.did, {
      skill: 'payment.pay', input: { amount: 90, currency: 'EUR', reference: 'manual' }, proofs: [invocation, carToken]
    })
    expect(ok.result).toMatchObject({ paid: 90 })
    expect(payments).toMatchObject([{ depth: 2, root: driver.did, capability: { constraints: { maxAmount: 100 } } }])
  })

  it('after the driver revokes the car\'s token (published to the network), the next privileged step fails with REVOKED', async () => {
    payments.length = 0
    const revocation = await createRevocation(driver, carToken)
    // the driver's phone (node 5) announces it; it floods along the ring
    const published = await revocationServices[5].publish(revocation)
    expect(published.new).toBe(true)
    const cid = (await tokenCid(carToken)).toString()
    await until(() => paymentStore.isRevoked(cid, [driver.did]) ? true : undefined, 10_000, 'revocation reached the payment agent')

    const events: OrchestratorEvent[] = []
    const err = await rejectionOf(orchestrator.runToCompletion(goal(), { proofs: [carToken], onEvent: e => events.push(e) }))
    expect(err.name).toBe('RevokedError')
    expect(err.code).toBe('REVOKED')
    expect(err.stepId).toBe('pay')
    expect(ofType(events, 'step-failed')).toMatchObject([{ stepId: 'pay', error: { code: 'REVOKED' } }])
    expect(payments).toHaveLength(0)
  })
})
