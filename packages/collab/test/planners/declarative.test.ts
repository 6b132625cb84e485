/**
 * The declarative planner: exact and pattern intents, parameters, inline
 * expansion of sub-goals, delegated sub-goals, and template errors.
 */
import { describe, expect, it } from 'vitest'
import { declarativePlanner } from '../../src/planning/planners/index.js'
import type { Template } from '../../src/planning/planners/index.js'
import { resolveInput, subGoal, topologicalOrder } from '../../src/planning/plan.js'
import type { Goal, Plan } from '../../src/planning/plan.js'
import { CAR_GOAL, plannerSuite, transitiveDeps } from './suite.js'
import { rejectionOf } from '../../../../test/util.js'

/** The car scenario: a named group of the intent becomes the `night` parameter */
const CAR_TEMPLATE: Template = {
  steps: [
    { id: 'route', capability: 'geo.route', input: { from: { $input: 'from' }, to: { $input: 'to' } } },
    {
      id: 'search',
      capability: 'travel.hotel.search',
      input: { near: { $ref: 'route.stopArea' }, maxPrice: { $input: 'budget' }, night: { $param: 'when' } },
      dependsOn: ['route'],
      fanout: { mode: 'all', count: 3 }
    },
    { id: 'book', capability: 'travel.hotel.booking', input: { offer: { $ref: 'search.0.offerId' } }, dependsOn: ['search'] },
    {
      id: 'pay',
      capability: 'payment.pay',
      input: { amount: { $ref: 'book.amount' }, reference: { $ref: 'book.bookingId' }, limit: { $param: 'budget' } },
      dependsOn: ['book']
    }
  ],
  output: 'pay',
  requires: ['from', 'to', 'budget']
}

const templates = { '/^book (?:me )?a hotel for (?<when>.+)$/i': CAR_TEMPLATE }

plannerSuite('declarative', () => declarativePlanner({ templates }))

describe('declarative planner', () => {
  it('substitutes parameters at planning time and keeps references for run time', async () => {
    const plan = await declarativePlanner({ templates }).plan({ ...CAR_GOAL, intent: 'Book me a hotel for Friday night' }, {})
    const search = plan.steps.find(s => s.id === 'search')
    expect(search?.input).toEqual({ near: { $ref: 'route.stopArea' }, maxPrice: { $input: 'budget' }, night: 'Friday night' })
    expect(search?.fanout).toEqual({ mode: 'all', count: 3 })
    const pay = plan.steps.find(s => s.id === 'pay')
    expect(pay?.input.limit).toBe(150)
    expect(plan.output).toBe('pay')
    expect(topologicalOrder(plan)).toEqual([['route'], ['search'], ['book'], ['pay']])
  })

  it('matches exact intents ignoring case and spacing, before patterns', async () => {
    const planner = declarativePlanner({
      templates: {
        '/^book .*$/': [{ id: 'generic', capability: 'travel.booking' }],
        'Book a hotel  for tonight': [{ id: 'exact', capability: 'travel.hotel.booking' }]
      }
    })
    const plan = await planner.plan({ intent: '  book a HOTEL for tonight ', input: {} }, {})
    expect(plan.steps.map(s => s.id)).toEqual(['exact'])
    const other = await planner.plan({ intent: 'book a flight', input: {} }, {})
    expect(other.steps.map(s => s.id)).toEqual(['generic'])
    // a pattern must match the whole intent
    const err = await rejectionOf(planner.plan({ intent: 'please book a flight', input: {} }, {}))
    expect(err.name).toBe('PlannerFailedError')
  })

  it('fails on an unknown intent, a missing required input or a missing parameter', async () => {
    const planner = declarativePlanner({ templates })
    const unknown = await rejectionOf(planner.plan({ intent: 'order a pizza', input: {} }, {}))
    expect(unknown.name).toBe('PlannerFailedError')
    expect(unknown.message).toMatch(/No template/)

    const missing = await rejectionOf(planner.plan({ intent: 'book a hotel for tonight', input: { from: 'a', to: 'b' } }, {}))
    expect(missing.name).toBe('PlannerFailedError')
    expect(missing.message).toMatch(/budget/)

    const noParam = declarativePlanner({ templates: { x: [{ id: 'a', capability: 'x.y', input: { v: { $param: 'nope' } } }] } })
    const err = await rejectionOf(noParam.plan({ intent: 'x', input: {} }, {}))
    expect(err.name).toBe('PlannerFailedError')
    expect(err.message).toMatch(/nope/)
  })

  it('fails (never returns an invalid plan) when a template gives one', async () => {
    const bad = declarativePlanner({
      templates: {
        'bad capability': [{ id: 'a', capability: 'Not A Capability' }],
        'bad ref': [{ id: 'a', capability: 'x.a' }, { id: 'b', capability: 'x.b', input: { v: { $ref: 'c' } } }],
        cycle: [{ id: 'a', capability: 'x.a', dependsOn: ['b'] }, { id: 'b', capability: 'x.b', dependsOn: ['a'] }],
        'ref not a dependency': [{ id: 'a', capability: 'x.a' }, { id: 'b', capability: 'x.b', input: { v: { $ref: 'a' } } }]
      }
    })
    for (const intent of ['bad capability', 'bad ref', 'cycle', 'ref not a dependency']) {
      const err = await rejectionOf(bad.plan({ intent, input: {} }, {}))
      expect(err.name, intent).toBe('PlannerFailedError')
    }
    const err = await rejectionOf(bad.plan({ intent: 'ref not a dependency', input: {} }, {}))
    expect(err.message).toMatch(/not a dependency/)
    expect(err.cause?.name).toBe('InvalidPlanError')
  })

  it('refuses invalid patterns and empty templates when built', () => {
    expect(() => declarativePlanner({ templates: { '/(/': [{ id: 'a', capability: 'x.a' }] } })).toThrow(/invalid pattern/)
    expect(() => declarativePlanner({ templates: { x: [] } })).toThrow(/no steps/)
  })

  describe('hierarchical templates', () => {
    /** The car goal, with the hotel part as a sub-goal */
    const hierarchical: Record<string, Template> = {
      'book a hotel for tonight': {
        steps: [
          { id: 'route', capability: 'geo.route', input: { from: { $input: 'from' }, to: { $input: 'to' } } },
          {
            id: 'stay',
            capability: 'travel.hotel',
            goal: { intent: 'reserve and pay a hotel', input: { area: { $ref: 'route.stopArea' }, money: { max: { $input: 'budget' } } } },
            dependsOn: ['route']
          },
          { id: 'notify', capability: 'messaging.notify', input: { text: { $ref: 'stay.receipt' } }, dependsOn: ['stay'] }
        ],
        output: 'notify'
      },
      'reserve and pay a hotel': {
        steps: [
          { id: 'search', capability: 'travel.hotel.search', input: { near: { $input: 'area' }, maxPrice: { $input: 'money.max' } } },
          { id: 'book', capability: 'travel.hotel.booking', input: { offer: { $ref: 'search.offerId' } }, dependsOn: ['search'] },
          { id: 'pay', capability: 'payment.pay', input: { amount: { $ref: 'book.amount' }, cap: { $param: 'money' } }, dependsOn: ['book'] },
          { id: 'log', capability: 'audit.log', input: { what: { $ref: 'search' } }, dependsOn: ['search'] }
        ],
        output: 'pay'
      }
    }

    it('expands a sub-goal inline: ids prefixed, its $input mapped onto the parent, refs and dependencies rewired', async () => {
      const plan = await declarativePlanner({ templates: hierarchical }).plan(CAR_GOAL, {})
      expect(plan.steps.map(s => s.id)).toEqual(['route', 'stay_search', 'stay_book', 'stay_pay', 'stay_log', 'notify'])
      const byId = new Map(plan.steps.map(s => [s.id, s]))
      expect(byId.get('stay_search')).toEqual({
        id: 'stay_search',
        capability: 'travel.hotel.search',
        input: { near: { $ref: 'route.stopArea' }, maxPrice: { $input: 'budget' } },
        dependsOn: ['route']
      })
      expect(byId.get('stay_book')?.input).toEqual({ offer: { $ref: 'stay_search.offerId' } })
      expect(byId.get('stay_pay')?.input).toEqual({ amount: { $ref: 'stay_book.amount' }, cap: { max: { $input: 'budget' } } })
      // a step after the sub-goal waits for all of it, and reads its output step
      expect(byId.get('notify')?.dependsOn.sort()).toEqual(['stay_log', 'stay_pay'])
      expect(byId.get('notify')?.input).toEqual({ text: { $ref: 'stay_pay.receipt' } })
      expect(plan.output).toBe('notify')
      expect(plan.steps.some(s => s.goal != null)).toBe(false)
      expect(transitiveDeps(plan, 'stay_pay').has('route')).toBe(true)

      // the wiring resolves as the orchestrator would resolve it
      const results = new Map<string, unknown>([
        ['route', { stopArea: 'Dijon' }], ['stay_search', { offerId: 'h1' }], ['stay_book', { amount: 99 }], ['stay_pay', { receipt: 'r-1' }]
      ])
      expect(resolveInput(byId.get('stay_pay')?.input ?? {}, results, CAR_GOAL.input)).toEqual({ amount: 99, cap: { max: 150 } })
      expect(resolveInput(byId.get('notify')?.input ?? {}, results, CAR_GOAL.input)).toEqual({ text: 'r-1' })
    })

    it('leaves a sub-goal without a template as a goal step for a remote agent', async () => {
      const { 'reserve and pay a hotel': _, ...parentOnly } = hierarchical
      const plan = await declarativePlanner({ templates: parentOnly }).plan(CAR_GOAL, {})
      expect(plan.steps.map(s => s.id)).toEqual(['route', 'stay', 'notify'])
      const stay = plan.steps[1]
      expect(stay.capability).toBe('travel.hotel')
      expect(stay.goal).toEqual({
        intent: 'reserve and pay a hotel',
        input: { area: { $ref: 'route.stopArea' }, money: { max: { $input: 'budget' } } },
        depth: 1
      })
      // the goal handed to the remote agent, once the route is known
      expect(subGoal(plan, stay, new Map([['route', { stopArea: 'Dijon' }]]))).toEqual({
        intent: 'reserve and pay a hotel', input: { area: 'Dijon', money: { max: 150 } }, depth: 1
      })
      // with expansion switched off the same happens even with a template
      const delegated = await declarativePlanner({ templates: hierarchical, expand: false }).plan(CAR_GOAL, {})
      expect(delegated.steps.map(s => s.id)).toEqual(['route', 'stay', 'notify'])
    })

    it('expands nested sub-goals recursively and stops recursive templates at the depth limit', async () => {
      const nested: Record<string, Template> = {
        a: { steps: [{ id: 's', capability: 'x.start' }, { id: 'g', goal: { intent: 'b', input: { v: { $ref: 's.v' } } }, dependsOn: ['s'] }] },
        b: { steps: [{ id: 'g', goal: { intent: 'c', input: { w: { $input: 'v' } } } }] },
        c: { steps: [{ id: 'leaf', capability: 'x.leaf', input: { z: { $input: 'w' } } }] }
      }
      const plan = await declarativePlanner({ templates: nested }).plan({ intent: 'a', input: {} }, {})
      expect(plan.steps).toEqual([
        { id: 's', capability: 'x.start', input: {}, dependsOn: [] },
        { id: 'g_g_leaf', capability: 'x.leaf', input: { z: { $ref: 's.v' } }, dependsOn: ['s'] }
      ])
      expect(plan.output).toBe('g_g_leaf')

      const recursive = declarativePlanner({ templates: { loop: [{ id: 'g', capability: 'x.loop', goal: { intent: 'loop' } }] } })
      const err = await rejectionOf(recursive.plan({ intent: 'loop', input: {} }, {}))
      expect(err.name).toBe('PlannerFailedError')
      expect(err.message).toMatch(/deeper than 4/)
      // a lower limit stops earlier: a -> b is allowed, b -> c is not
      const shallow = await rejectionOf(declarativePlanner({ templates: nested, maxDepth: 1 }).plan({ intent: 'a', input: {} }, {}))
      expect(shallow.message).toMatch(/deeper than 1/)
    })

    it('fails when a sub-goal has neither a template nor a capability, or is nested too deep', async () => {
      const planner = declarativePlanner({ templates: { a: [{ id: 'g', goal: { intent: 'unknown' } }] } })
      const err = await rejectionOf(planner.plan({ intent: 'a', input: {} }, {}))
      expect(err.name).toBe('PlannerFailedError')
      expect(err.message).toMatch(/no template for sub-goal/)

      // a delegated sub-goal of a goal already at depth 4 is one too many
      const deep: Goal = { intent: 'book a hotel for tonight', input: CAR_GOAL.input, depth: 4 }
      const { 'reserve and pay a hotel': _, ...parentOnly } = hierarchical
      const tooDeep = await rejectionOf(declarativePlanner({ templates: parentOnly }).plan(deep, {}))
      expect(tooDeep.name).toBe('PlannerFailedError')
      expect(tooDeep.message).toMatch(/deeper than 4/)
    })
  })

  it('plans are plain data', async () => {
    const plan: Plan = await declarativePlanner({ templates }).plan(CAR_GOAL, {})
    expect(JSON.parse(JSON.stringify(plan))).toEqual(plan)
  })
})
