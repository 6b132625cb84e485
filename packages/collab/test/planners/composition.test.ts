/**
 * The composition planner: shortest typed chains of skills, wiring, type
 * checks, deterministic choices, discovery, and limits.
 */
import { describe, expect, it } from 'vitest'
import type { DiscoveredAgent, DiscoveryQuery, Skill } from '@ioa/interconnect'
import { compositionPlanner } from '../../src/planning/planners/index.js'
import { resolveInput, topologicalOrder } from '../../src/planning/plan.js'
import type { Goal, Plan } from '../../src/planning/plan.js'
import { CAR_CAPABILITIES, CAR_GOAL, plannerSuite } from './suite.js'
import { rejectionOf } from '../../../../test/util.js'

function skill (id: string, input: Record<string, string>, output: Record<string, string>, optional: Record<string, string> = {}): Skill {
  const props = (o: Record<string, string>): Record<string, unknown> => Object.fromEntries(Object.entries(o).map(([k, t]) => [k, { type: t }]))
  return {
    id,
    tags: [],
    inputSchema: { type: 'object', properties: { ...props(input), ...props(optional) }, required: Object.keys(input) },
    outputSchema: { type: 'object', properties: props(output), required: Object.keys(output) }
  }
}

/** The four skills of the car scenario */
const CAR_SKILLS: Skill[] = [
  skill('geo.route', { from: 'string', to: 'string' }, { stopArea: 'string', distanceKm: 'number' }),
  skill('travel.hotel.search', { stopArea: 'string', budget: 'number' }, { hotelId: 'string', price: 'number' }, { stars: 'integer' }),
  skill('travel.hotel.booking', { hotelId: 'string' }, { bookingId: 'string', amount: 'number', currency: 'string' }),
  skill('payment.pay', { bookingId: 'string', amount: 'number' }, { receipt: 'string' })
]

/** Skills that must not be chosen */
const DISTRACTORS: Skill[] = [
  // a longer way to the same receipt: geocode -> area -> search by area -> offer -> pay (5 steps)
  skill('geo.geocode', { to: 'string' }, { lat: 'number', lon: 'number' }),
  skill('geo.area', { lat: 'number', lon: 'number' }, { areaCode: 'string' }),
  skill('travel.hotel.search-by-area', { areaCode: 'string' }, { offerId: 'string' }),
  skill('travel.hotel.offer', { offerId: 'string' }, { bookingId: 'string', amount: 'number' }),
  // would be a 3-step chain if types were ignored: stopArea is a string, not a number
  skill('travel.hotel.quick-book', { stopArea: 'number' }, { bookingId: 'string', amount: 'number' }),
  // needs something nobody has
  skill('payment.crypto', { wallet: 'string', amount: 'number' }, { receipt: 'string' }),
  // gives the right property with the wrong type
  skill('payment.voucher', { from: 'string' }, { receipt: 'integer' }),
  // no schemas at all: never composable
  { id: 'misc.unknown', tags: [] }
]

const CATALOGUE = [...DISTRACTORS.slice(0, 3), ...CAR_SKILLS, ...DISTRACTORS.slice(3)]

plannerSuite('composition', () => compositionPlanner({ catalogue: CATALOGUE }))

describe('composition planner', () => {
  it('finds the shortest chain route -> search -> book -> pay and wires it', async () => {
    const plan = await compositionPlanner({ catalogue: CATALOGUE }).plan(CAR_GOAL, {})
    expect(plan.steps.map(s => s.capability)).toEqual(CAR_CAPABILITIES)
    expect(plan.steps).toEqual([
      { id: 'geo-route', capability: 'geo.route', input: { from: { $input: 'from' }, to: { $input: 'to' } }, dependsOn: [] },
      {
        id: 'travel-hotel-search',
        capability: 'travel.hotel.search',
        input: { stopArea: { $ref: 'geo-route.stopArea' }, budget: { $input: 'budget' } },
        dependsOn: ['geo-route']
      },
      { id: 'travel-hotel-booking', capability: 'travel.hotel.booking', input: { hotelId: { $ref: 'travel-hotel-search.hotelId' } }, dependsOn: ['travel-hotel-search'] },
      {
        id: 'payment-pay',
        capability: 'payment.pay',
        input: { bookingId: { $ref: 'travel-hotel-booking.bookingId' }, amount: { $ref: 'travel-hotel-booking.amount' } },
        dependsOn: ['travel-hotel-booking']
      }
    ])
    expect(plan.output).toBe('payment-pay')
  })

  it('produces a plan that runs: each step gets its inputs from the goal or earlier results', async () => {
    const plan = await compositionPlanner({ catalogue: CATALOGUE }).plan(CAR_GOAL, {})
    const fake: Record<string, (input: Record<string, unknown>) => unknown> = {
      'geo.route': i => ({ stopArea: `between ${String(i.from)} and ${String(i.to)}`, distanceKm: 700 }),
      'travel.hotel.search': i => ({ hotelId: `hotel near ${String(i.stopArea)} under ${String(i.budget)}`, price: 120 }),
      'travel.hotel.booking': i => ({ bookingId: `b:${String(i.hotelId)}`, amount: 120, currency: 'EUR' }),
      'payment.pay': i => ({ receipt: `paid ${String(i.amount)} for ${String(i.bookingId)}` })
    }
    const results = new Map<string, unknown>()
    for (const level of topologicalOrder(plan)) {
      for (const id of level) {
        const step = plan.steps.find(s => s.id === id) as Plan['steps'][number]
        results.set(id, fake[step.capability](resolveInput(step.input, results, plan.goal.input)))
      }
    }
    expect(results.get(plan.output as string)).toEqual({ receipt: 'paid 120 for b:hotel near between Lyon and Amsterdam under 150' })
  })

  it('passes optional inputs the goal has, without new dependencies', async () => {
    const plan = await compositionPlanner({ catalogue: CAR_SKILLS }).plan({ ...CAR_GOAL, input: { ...CAR_GOAL.input, stars: 3 } }, {})
    const search = plan.steps.find(s => s.capability === 'travel.hotel.search')
    expect(search?.input).toEqual({ stopArea: { $ref: 'geo-route.stopArea' }, budget: { $input: 'budget' }, stars: { $input: 'stars' } })
  })

  it('prefers the goal input over a step output, so fewer steps are needed', async () => {
    // with a hotel id in hand, routing and searching are not needed
    const plan = await compositionPlanner({ catalogue: CATALOGUE }).plan({ ...CAR_GOAL, input: { hotelId: 'h-7' } }, {})
    expect(plan.steps.map(s => s.capability)).toEqual(['travel.hotel.booking', 'payment.pay'])
    expect(plan.steps[0].input).toEqual({ hotelId: { $input: 'hotelId' } })
  })

  it('takes the longer chain when the short one is missing, within maxDepth', async () => {
    const withoutBooking = CATALOGUE.filter(s => s.id !== 'travel.hotel.booking')
    const plan = await compositionPlanner({ catalogue: withoutBooking }).plan(CAR_GOAL, {})
    expect(plan.steps.map(s => s.capability)).toEqual(['geo.geocode', 'geo.area', 'travel.hotel.search-by-area', 'travel.hotel.offer', 'payment.pay'])
    expect(topologicalOrder(plan)).toEqual([['geo-geocode'], ['geo-area'], ['travel-hotel-search-by-area'], ['travel-hotel-offer'], ['payment-pay']])

    const err = await rejectionOf(compositionPlanner({ catalogue: withoutBooking, maxDepth: 4 }).plan(CAR_GOAL, {}))
    expect(err.name).toBe('PlannerFailedError')
    expect(err.message).toMatch(/at most 4 skills/)
  })

  it('breaks ties deterministically (by capability name), whatever the catalogue order', async () => {
    const card = skill('payment.card', { bookingId: 'string', amount: 'number' }, { receipt: 'string' })
    const a = await compositionPlanner({ catalogue: [...CATALOGUE, card] }).plan(CAR_GOAL, {})
    const b = await compositionPlanner({ catalogue: [card, ...[...CATALOGUE].reverse()] }).plan(CAR_GOAL, {})
    expect(a.steps.map(s => s.capability)).toEqual(['geo.route', 'travel.hotel.search', 'travel.hotel.booking', 'payment.card'])
    expect(b.steps).toEqual(a.steps)
  })

  it('runs independent steps in parallel: each step depends only on the steps it takes values from', async () => {
    const catalogue = [
      skill('weather.forecast', { to: 'string' }, { forecast: 'string' }),
      skill('geo.route', { from: 'string', to: 'string' }, { route: 'string' }),
      skill('trip.brief', { forecast: 'string', route: 'string' }, { brief: 'string' })
    ]
    const plan = await compositionPlanner({ catalogue }).plan({
      intent: 'brief me', input: { from: 'a', to: 'b' }, want: { type: 'object', properties: { brief: { type: 'string' } } }
    }, {})
    expect(topologicalOrder(plan)).toEqual([['geo-route', 'weather-forecast'], ['trip-brief']])
  })

  it('fails without want, without skills, or when no chain exists', async () => {
    const planner = compositionPlanner({ catalogue: CATALOGUE })
    const noWant = await rejectionOf(planner.plan({ intent: 'x', input: {} }, {}))
    expect(noWant.name).toBe('PlannerFailedError')
    expect(noWant.message).toMatch(/goal\.want/)

    const noSkills = await rejectionOf(compositionPlanner().plan(CAR_GOAL, {}))
    expect(noSkills.name).toBe('PlannerFailedError')

    // the receipt exists only as an integer from payment.voucher, which the want refuses
    const noInput = await rejectionOf(planner.plan({ ...CAR_GOAL, input: {} }, {}))
    expect(noInput.name).toBe('PlannerFailedError')
  })

  it('accepts an integer where a number is wanted, not a number where an integer is', async () => {
    const catalogue = [skill('count.things', { n: 'integer' }, { total: 'integer' })]
    const want = { type: 'object', properties: { total: { type: 'number' } }, required: ['total'] }
    const ok = await compositionPlanner({ catalogue }).plan({ intent: 'count', input: { n: 3 }, want }, {})
    expect(ok.steps.map(s => s.capability)).toEqual(['count.things'])
    const err = await rejectionOf(compositionPlanner({ catalogue }).plan({ intent: 'count', input: { n: 3.5 }, want }, {}))
    expect(err.name).toBe('PlannerFailedError')
  })

  it('discovers skills with ctx.discover when it has no catalogue', async () => {
    const queries: string[] = []
    const discover = async (q: DiscoveryQuery): Promise<DiscoveredAgent[]> => {
      queries.push(q.capability)
      const skills = CATALOGUE.filter(s => s.id === q.capability || s.id.startsWith(q.capability + '.'))
      return skills.map(s => ({ skills: [s] }) as unknown as DiscoveredAgent)
    }
    const planner = compositionPlanner({ capabilities: ['geo', 'travel', 'payment'] })
    const plan = await planner.plan(CAR_GOAL, { discover })
    expect(queries).toEqual(['geo', 'travel', 'payment'])
    expect(plan.steps.map(s => s.capability)).toEqual(CAR_CAPABILITIES)

    const failing = await rejectionOf(planner.plan(CAR_GOAL, { discover: async () => { throw new Error('dht down') } }))
    expect(failing.name).toBe('PlannerFailedError')
    expect(failing.message).toMatch(/dht down/)
  })

  it('stops with the abort reason while discovery is under way', async () => {
    const controller = new AbortController()
    const reason = new Error('stop')
    const discover = async (): Promise<DiscoveredAgent[]> => await new Promise(() => {})
    const p = compositionPlanner({ capabilities: ['geo'] }).plan(CAR_GOAL, { discover, signal: controller.signal })
    setTimeout(() => { controller.abort(reason) }, 20)
    await expect(p).rejects.toBe(reason)
  })

  it('gives up on a search space larger than maxStates', async () => {
    // 12 independent skills, each adding one property: many sets of properties, no way to the receipt
    const catalogue = Array.from({ length: 12 }, (_, i) => skill(`gen.p${i}`, {}, { [`p${i}`]: 'string' }))
    const goal: Goal = { ...CAR_GOAL, want: { type: 'object', properties: { never: { type: 'string' } }, required: ['never'] } }
    const err = await rejectionOf(compositionPlanner({ catalogue, maxStates: 100 }).plan(goal, {}))
    expect(err.name).toBe('PlannerFailedError')
    expect(err.message).toMatch(/gave up after 100 states/)
  })
})
