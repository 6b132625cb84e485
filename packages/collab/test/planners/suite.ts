/**
 * A suite of cases that every planner must pass, whatever its strategy. Run it
 * from a test file: `plannerSuite('my planner', () => myPlanner(...))`.
 *
 * The planner under test must know (from its templates, its catalogue or its
 * model) how to book a hotel for tonight with the capabilities `geo.route`,
 * `travel.hotel.search`, `travel.hotel.booking` and `payment.pay`, and must
 * find no way to teleport anyone.
 */
import { beforeAll, describe, expect, it } from 'vitest'
import { topologicalOrder, validatePlan } from '../../src/planning/plan.js'
import type { Goal, Plan, Planner, PlannerContext } from '../../src/planning/plan.js'

/** The car scenario of ARCHITECTURE.md */
export const CAR_GOAL: Goal = {
  intent: 'book a hotel for tonight',
  input: { from: 'Lyon', to: 'Amsterdam', budget: 150 },
  want: { type: 'object', properties: { receipt: { type: 'string' } }, required: ['receipt'] }
}

/** A goal no planner should find a way to */
export const IMPOSSIBLE_GOAL: Goal = {
  intent: 'teleport me to the moon',
  input: { from: 'Lyon', to: 'the moon', budget: 150 },
  want: { type: 'object', properties: { teleportTicket: { type: 'string' } }, required: ['teleportTicket'] }
}

/** The capabilities of the car scenario, in the order they must run */
export const CAR_CAPABILITIES = ['geo.route', 'travel.hotel.search', 'travel.hotel.booking', 'payment.pay']

export interface PlannerSuiteOptions {
  /** The context for each call (without `signal`, which the suite sets where it needs one) */
  context?: () => PlannerContext
}

/** Every step that `id` depends on, directly or not */
export function transitiveDeps (plan: Plan, id: string): Set<string> {
  const byId = new Map(plan.steps.map(s => [s.id, s]))
  const out = new Set<string>()
  const todo = [...(byId.get(id)?.dependsOn ?? [])]
  while (todo.length > 0) {
    const d = todo.pop() as string
    if (out.has(d)) continue
    out.add(d)
    todo.push(...(byId.get(d)?.dependsOn ?? []))
  }
  return out
}

export function plannerSuite (name: string, factory: () => Planner | Promise<Planner>, options: PlannerSuiteOptions = {}): void {
  describe(`planner suite: ${name}`, () => {
    let planner: Planner
    const ctx = (): PlannerContext => options.context?.() ?? {}

    beforeAll(async () => {
      planner = await factory()
    })

    it('has a name', () => {
      expect(typeof planner.name).toBe('string')
      expect(planner.name.length).toBeGreaterThan(0)
    })

    it('plans the car goal: route -> hotel search -> booking -> payment, in dependency order', async () => {
      const plan = await planner.plan(CAR_GOAL, ctx())

      // valid as returned, and unchanged by validation
      expect(validatePlan(plan)).toEqual(plan)
      expect(plan.goal.intent).toBe(CAR_GOAL.intent)
      expect(plan.goal.input).toEqual(CAR_GOAL.input)

      // one step for each capability of the scenario
      const stepOf = (capability: string): string => {
        const steps = plan.steps.filter(s => s.capability === capability)
        expect(steps, `steps with capability ${capability}`).toHaveLength(1)
        return steps[0].id
      }
      const ids = CAR_CAPABILITIES.map(stepOf)

      // each depends (directly or not) on the one before; the flattened levels keep that order
      for (let i = 1; i < ids.length; i++) {
        expect(transitiveDeps(plan, ids[i]).has(ids[i - 1]), `${ids[i]} after ${ids[i - 1]}`).toBe(true)
      }
      const flat = topologicalOrder(plan).flat()
      expect(ids.map(id => flat.indexOf(id))).toEqual([...ids.map(id => flat.indexOf(id))].sort((a, b) => a - b))
      const position = new Map(plan.steps.map((s, i) => [s.id, i]))
      for (const s of plan.steps) {
        for (const d of s.dependsOn) expect(position.get(d) as number).toBeLessThan(position.get(s.id) as number)
      }

      // the payment depends on the booking itself
      const pay = plan.steps.find(s => s.id === ids[3])
      expect(pay?.dependsOn).toContain(ids[2])

      // the plan's result is the payment's, when the plan names one
      if (plan.output != null) expect(plan.output).toBe(ids[3])
    })

    it('gives a fresh plan id each time and the same steps for the same goal', async () => {
      const a = await planner.plan(CAR_GOAL, ctx())
      const b = await planner.plan(CAR_GOAL, ctx())
      expect(a.id).not.toBe(b.id)
      expect(b.steps).toEqual(a.steps)
    })

    it('rejects with the abort reason when the signal is already aborted', async () => {
      const controller = new AbortController()
      const reason = new Error('aborted by the test')
      controller.abort(reason)
      await expect(planner.plan(CAR_GOAL, { ...ctx(), signal: controller.signal })).rejects.toBe(reason)
    })

    it('rejects an impossible goal with PlannerFailedError', async () => {
      const err = await planner.plan(IMPOSSIBLE_GOAL, ctx()).then(() => undefined, (e: unknown) => e)
      expect(err).toBeInstanceOf(Error)
      expect((err as Error).name).toBe('PlannerFailedError')
      expect((err as { code?: string }).code).toBe('PLANNER_FAILED')
    })
  })
}
