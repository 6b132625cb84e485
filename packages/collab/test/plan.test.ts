/**
 * Plans: the schema and its bounds, the DAG and reference rules of
 * validatePlan, resolveInput, subGoal, topologicalOrder and criticalPath.
 */
import { describe, expect, it } from 'vitest'
import { criticalPath, PLAN_LIMITS, resolveInput, subGoal, topologicalOrder, validatePlan } from '../src/planning/plan.js'
import { errorOf } from '../../../test/util.js'
import type { Plan, PlanStep } from '../src/planning/plan.js'

const GOAL = { intent: 'book a hotel for tonight', input: { from: 'Lyon', to: 'Amsterdam', budget: 150, card: { last4: '4242' } } }

function step (id: string, dependsOn: string[] = [], input: Record<string, unknown> = {}, extra: Partial<PlanStep> = {}): PlanStep {
  return { id, capability: 'test.step', input, dependsOn, ...extra }
}

function plan (steps: PlanStep[], extra: Partial<Plan> = {}): Plan {
  return { id: 'p1', goal: GOAL, steps, ...extra }
}

/** The car plan: route -> search -> book -> pay */
const CAR: Plan = plan([
  { id: 'route', capability: 'geo.route', input: { from: { $input: 'from' }, to: { $input: 'to' } }, dependsOn: [] },
  { id: 'search', capability: 'travel.hotel.search', input: { near: { $ref: 'route.stopArea' }, budget: { $input: 'budget' } }, dependsOn: ['route'] },
  { id: 'book', capability: 'travel.hotel.booking', input: { hotel: { $ref: 'search.hotels.0.id' } }, dependsOn: ['search'] },
  { id: 'pay', capability: 'payment.pay', input: { amount: { $ref: 'book.amount' }, card: { $input: 'card' }, note: ['for', { $ref: 'route' }] }, dependsOn: ['book'] }
], { output: 'pay' })

/** Expect an InvalidPlanError naming `field` (and matching `message` when given) */
function expectInvalid (value: unknown, field: string, message?: RegExp): void {
  const err = errorOf(() => validatePlan(value))
  expect(err.name).toBe('InvalidPlanError')
  expect(err.code).toBe('INVALID_PLAN')
  expect(err.field).toBe(field)
  expect(err.message).toContain(field)
  if (message != null) expect(err.message).toMatch(message)
}

describe('validatePlan: structure', () => {
  it('accepts a valid plan and returns an equal clean copy', () => {
    const out = validatePlan(CAR)
    expect(out).toEqual(CAR)
    expect(out).not.toBe(CAR)
    expect(validatePlan(JSON.parse(JSON.stringify(CAR)))).toEqual(CAR)
  })

  it('accepts fan-out, hierarchical steps, want and depth', () => {
    const p = plan([
      step('a', [], {}, { fanout: { mode: 'quorum', count: 3, quorum: 2 } }),
      step('b', ['a'], {}, { fanout: { mode: 'first', count: 32 }, goal: { intent: 'sub', input: { x: { $ref: 'a.x' }, y: { $input: 'from' } }, want: { type: 'object' }, depth: 1 } })
    ], { goal: { ...GOAL, want: { type: 'object', required: ['receipt'] } } })
    expect(validatePlan(p)).toEqual(p)
  })

  it('treats want and the plan goal input as plain data (a JSON Schema $ref is no plan reference)', () => {
    const want = { $ref: '#/$defs/receipt', $defs: { receipt: { type: 'object', properties: { id: { $ref: '#/$defs/id', description: 'x' } } } } }
    const p = plan([step('a', [], {}, { goal: { intent: 'sub', input: {}, want } })], { goal: { ...GOAL, input: { v: { $ref: 'not a step' } }, want } })
    expect(validatePlan(p)).toEqual(p)
  })

  it('rejects what is not a plan', () => {
    expectInvalid(null, 'plan')
    expectInvalid('plan', 'plan')
    expectInvalid({ ...CAR, extra: 1 }, 'plan', /Unrecognized key/)
    expectInvalid({ ...CAR, id: undefined }, 'id')
    expectInvalid({ ...CAR, goal: { intent: '', input: {} } }, 'goal.intent')
    expectInvalid({ ...CAR, goal: { intent: 'x', input: [] } }, 'goal.input')
    expectInvalid({ ...CAR, goal: { ...GOAL, depth: 5 } }, 'goal.depth')
    expectInvalid(plan([]), 'steps')
  })

  it('bounds the number of steps at 256', () => {
    const many = (n: number): PlanStep[] => Array.from({ length: n }, (_, i) => step(`s${i}`))
    expect(validatePlan(plan(many(PLAN_LIMITS.maxSteps))).steps).toHaveLength(256)
    expectInvalid(plan(many(257)), 'steps')
  })

  it('checks step ids', () => {
    for (const id of ['', '-a', '_a', 'a.b', 'a b', 'x'.repeat(65), 'é']) {
      expectInvalid(plan([step('a'), { ...step('b'), id }]), 'steps[1].id')
    }
    for (const id of ['a', 'A-1', '0_x', 'x'.repeat(64)]) expect(validatePlan(plan([step(id)])).steps[0].id).toBe(id)
    expectInvalid(plan([step('a'), step('a')]), 'steps[1].id', /duplicate/)
  })

  it('checks capability names with the interconnect grammar', () => {
    for (const capability of ['', 'Travel', 'travel..hotel', 'travel.hotel!', '1travel', 'a.b.c.d.e.f.g.h.i']) {
      expectInvalid(plan([{ ...step('a'), capability }]), 'steps[0].capability')
    }
    expect(validatePlan(plan([{ ...step('a'), capability: 'a.b.c.d.e.f.g.h' }])).steps[0].capability).toBe('a.b.c.d.e.f.g.h')
  })

  it('checks step fields strictly', () => {
    expectInvalid(plan([{ ...step('a'), extra: true } as PlanStep]), 'steps[0]', /Unrecognized key/)
    expectInvalid(plan([{ ...step('a'), input: [] as unknown as Record<string, unknown> }]), 'steps[0].input')
    expectInvalid(plan([{ ...step('a'), dependsOn: undefined as unknown as string[] }]), 'steps[0].dependsOn')
  })

  it('checks fan-out: count 1..32, quorum with mode quorum only and ≤ count', () => {
    const f = (fanout: unknown): Plan => plan([{ ...step('a'), fanout: fanout as PlanStep['fanout'] }])
    expectInvalid(f({ mode: 'all', count: 0 }), 'steps[0].fanout.count')
    expectInvalid(f({ mode: 'all', count: 33 }), 'steps[0].fanout.count')
    expectInvalid(f({ mode: 'all', count: 1.5 }), 'steps[0].fanout.count')
    expectInvalid(f({ mode: 'some', count: 2 }), 'steps[0].fanout.mode')
    expectInvalid(f({ mode: 'quorum', count: 3 }), 'steps[0].fanout.quorum', /required/)
    expectInvalid(f({ mode: 'quorum', count: 3, quorum: 4 }), 'steps[0].fanout.quorum', /at most count/)
    expectInvalid(f({ mode: 'all', count: 3, quorum: 2 }), 'steps[0].fanout.quorum', /only with mode "quorum"/)
    expect(validatePlan(f({ mode: 'quorum', count: 3, quorum: 3 })).steps[0].fanout).toEqual({ mode: 'quorum', count: 3, quorum: 3 })
  })

  it('checks values: plain data, finite numbers, bounded depth and size', () => {
    expectInvalid(plan([step('a', [], { x: undefined })]), 'steps[0].input.x', /undefined/)
    expectInvalid(plan([step('a', [], { x: [1, Number.NaN] })]), 'steps[0].input.x[1]', /finite/)
    expectInvalid(plan([step('a', [], { at: new Date(0) })]), 'steps[0].input.at', /Date/)
    expectInvalid(plan([step('a', [], { f: () => 1 })]), 'steps[0].input.f')
    let deep: unknown = 1
    for (let i = 0; i < 40; i++) deep = { d: deep }
    expect(errorOf(() => validatePlan(plan([step('a', [], { deep })]))).message).toMatch(/nested deeper than 32/)
    expectInvalid(plan([step('a', [], { big: 'x'.repeat(PLAN_LIMITS.maxPlanBytes) })]), 'plan', /bytes/)
    expect(validatePlan(plan([step('a', [], { bytes: new Uint8Array([1, 2]), n: null, b: true })])).steps[0].input.bytes).toEqual(new Uint8Array([1, 2]))
  })
})

describe('validatePlan: graph', () => {
  it('rejects unknown, self and duplicate dependencies', () => {
    expectInvalid(plan([step('a', ['nope'])]), 'steps[0].dependsOn[0]', /unknown step "nope"/)
    expectInvalid(plan([step('a', ['a'])]), 'steps[0].dependsOn[0]', /itself/)
    expectInvalid(plan([step('a'), step('b', ['a', 'a'])]), 'steps[1].dependsOn[1]', /duplicate/)
  })

  it('rejects cycles and names them', () => {
    expectInvalid(plan([step('a', ['c']), step('b', ['a']), step('c', ['b'])]), 'steps[0].dependsOn', /cycle a -> c -> b -> a/)
    expectInvalid(plan([step('x'), step('a', ['x', 'b']), step('b', ['a'])]), 'steps[1].dependsOn', /cycle a -> b -> a/)
  })

  it('returns the steps in a stable topological order', () => {
    const p = validatePlan(plan([step('pay', ['book']), step('route'), step('book', ['search']), step('search', ['route']), step('log')]))
    expect(p.steps.map(s => s.id)).toEqual(['route', 'log', 'search', 'book', 'pay'])
    // an order that already is one is kept
    expect(validatePlan(plan([step('b'), step('a', ['b']), step('c')])).steps.map(s => s.id)).toEqual(['b', 'a', 'c'])
  })

  it('checks the output step', () => {
    expectInvalid({ ...CAR, output: 'nope' }, 'output', /unknown step/)
    expectInvalid({ ...CAR, output: 'bad id!' }, 'output')
  })
})

describe('validatePlan: references', () => {
  it('requires $ref targets among the transitive dependencies', () => {
    // transitive: pay -> book -> search -> route, so pay may read route
    expect(() => validatePlan(CAR)).not.toThrow()
    expectInvalid(plan([step('a'), step('b', [], { x: { $ref: 'a' } })]), 'steps[1].input.x.$ref', /not a dependency of step "b"/)
    expectInvalid(plan([step('a', [], { x: { $ref: 'nope.x' } })]), 'steps[0].input.x.$ref', /unknown step "nope"/)
    expectInvalid(plan([step('a', [], { x: { $ref: 'a' } })]), 'steps[0].input.x.$ref', /not a dependency/)
    // siblings are not dependencies
    expectInvalid(plan([step('r'), step('a', ['r']), step('b', ['r'], { v: [{ w: { $ref: 'a.v' } }] })]), 'steps[2].input.v[0].w.$ref')
    // references in a sub-goal's input too
    expectInvalid(plan([step('a'), step('b', [], {}, { goal: { intent: 'x', input: { v: { $ref: 'a' } } } })]), 'steps[1].goal.input.v.$ref')
  })

  it('gives the reference in the error', () => {
    const err = errorOf(() => validatePlan(plan([step('a'), step('b', [], { x: { $ref: 'a.b.c' } })])))
    expect(err.ref).toBe('$ref:a.b.c')
  })

  it('rejects malformed references', () => {
    expectInvalid(plan([step('a', [], { x: { $ref: 'a', extra: 1 } })]), 'steps[0].input.x', /no other key/)
    expectInvalid(plan([step('a', [], { x: { $ref: 3 } })]), 'steps[0].input.x', /must be a string/)
    expectInvalid(plan([step('a'), step('b', ['a'], { x: { $ref: 'a..b' } })]), 'steps[1].input.x', /malformed \$ref/)
    expectInvalid(plan([step('a'), step('b', ['a'], { x: { $ref: '' } })]), 'steps[1].input.x', /malformed \$ref/)
    expectInvalid(plan([step('a', [], { x: { $input: 'a.' } })]), 'steps[0].input.x', /malformed \$input/)
    expectInvalid(plan([step('a', [], { x: { $input: 'a'.repeat(600) } })]), 'steps[0].input.x', /malformed \$input/)
  })

  it('does not look into $literal values', () => {
    const p = plan([step('a', [], { x: { $literal: { $ref: 'nowhere' } } })])
    expect(validatePlan(p)).toEqual(p)
  })
})

describe('validatePlan: sub-goals', () => {
  const withSub = (rootDepth: number | undefined, subDepth?: number): Plan => plan(
    [step('a', [], {}, { goal: { intent: 'sub', input: {}, ...(subDepth != null ? { depth: subDepth } : {}) } })],
    { goal: { ...GOAL, ...(rootDepth != null ? { depth: rootDepth } : {}) } }
  )

  it('allows sub-goals down to depth 4', () => {
    expect(() => validatePlan(withSub(undefined))).not.toThrow()
    expect(() => validatePlan(withSub(3, 4))).not.toThrow()
    expectInvalid(withSub(4), 'steps[0].goal', /deeper than 4/)
  })

  it('requires a sub-goal depth one more than the plan goal', () => {
    expectInvalid(withSub(1, 1), 'steps[0].goal.depth', /must be 2/)
    expectInvalid(withSub(0, 5), 'steps[0].goal.depth')
  })

  it('subGoal resolves the sub-goal input and sets its depth', () => {
    const p = validatePlan(plan([
      step('route'),
      step('stay', ['route'], {}, { goal: { intent: 'reserve a hotel', input: { near: { $ref: 'route.stop' }, max: { $input: 'budget' } }, want: { type: 'object' } } })
    ], { goal: { ...GOAL, depth: 2 } }))
    expect(subGoal(p, p.steps[1], new Map([['route', { stop: 'Dijon' }]]))).toEqual({
      intent: 'reserve a hotel', input: { near: 'Dijon', max: 150 }, want: { type: 'object' }, depth: 3
    })
    expect(() => subGoal(p, p.steps[0], new Map())).toThrow(/no sub-goal/)
  })
})

describe('resolveInput', () => {
  const results = new Map<string, unknown>([
    ['route', { stopArea: 'Dijon', legs: [{ km: 190 }, { km: 510 }] }],
    ['search', { hotels: [{ id: 'h1', price: 99 }] }],
    ['flag', false],
    ['nothing', null]
  ])

  it('resolves $ref to a whole result or a path into it, and $input, at any depth', () => {
    const input = {
      near: { $ref: 'route.stopArea' },
      first: { $ref: 'route.legs.1.km' },
      route: { $ref: 'route' },
      hotel: { $ref: 'search.hotels.0' },
      flag: { $ref: 'flag' },
      nothing: { $ref: 'nothing' },
      who: { card: { $input: 'card.last4' }, trip: [{ $input: 'from' }, { $input: 'to' }] },
      all: { $input: '' },
      literal: { $literal: { $ref: 'route' } },
      plain: [1, 'two', null, { three: 3 }]
    }
    expect(resolveInput(input, results, GOAL.input)).toEqual({
      near: 'Dijon',
      first: 510,
      route: results.get('route'),
      hotel: { id: 'h1', price: 99 },
      flag: false,
      nothing: null,
      who: { card: '4242', trip: ['Lyon', 'Amsterdam'] },
      all: GOAL.input,
      literal: { $ref: 'route' },
      plain: [1, 'two', null, { three: 3 }]
    })
  })

  it('does not change its input', () => {
    const input = { near: { $ref: 'route.stopArea' } }
    resolveInput(input, results, GOAL.input)
    expect(input).toEqual({ near: { $ref: 'route.stopArea' } })
  })

  it('throws a typed error for a reference that cannot be resolved', () => {
    const cases: Array<[Record<string, unknown>, string, string]> = [
      [{ x: { $ref: 'book.amount' } }, 'input.x.$ref', '$ref:book.amount'],
      [{ x: { $ref: 'route.nope' } }, 'input.x.$ref', '$ref:route.nope'],
      [{ x: [{ $ref: 'route.legs.2.km' }] }, 'input.x[0].$ref', '$ref:route.legs.2.km'],
      [{ x: { $ref: 'route.legs.first' } }, 'input.x.$ref', '$ref:route.legs.first'],
      [{ x: { $ref: 'route.stopArea.length' } }, 'input.x.$ref', '$ref:route.stopArea.length'],
      [{ x: { $ref: 'route.constructor' } }, 'input.x.$ref', '$ref:route.constructor'],
      [{ x: { $ref: 'nothing.x' } }, 'input.x.$ref', '$ref:nothing.x'],
      [{ x: { $input: 'card.number' } }, 'input.x.$input', '$input:card.number']
    ]
    for (const [input, field, ref] of cases) {
      let err: any
      try {
        resolveInput(input, results, GOAL.input)
      } catch (e) {
        err = e
      }
      expect(err?.name, ref).toBe('InvalidPlanError')
      expect(err.field).toBe(field)
      expect(err.ref).toBe(ref)
      expect(err.message).toMatch(/unresolved reference/)
    }
  })

  it('keeps a key named __proto__ as data', () => {
    const input = JSON.parse('{"__proto__": {"$input": "from"}}') as Record<string, unknown>
    const out = resolveInput(input, results, GOAL.input)
    expect(Object.getPrototypeOf(out)).toBe(Object.prototype)
    expect(Object.hasOwn(out, '__proto__')).toBe(true)
    expect(out.__proto__).toBe('Lyon')
  })
})

describe('topologicalOrder', () => {
  it('groups steps in levels that can run in parallel', () => {
    expect(topologicalOrder(CAR)).toEqual([['route'], ['search'], ['book'], ['pay']])
    const diamond = plan([step('d', ['b', 'c']), step('a'), step('b', ['a']), step('c', ['a']), step('e'), step('f', ['a', 'd'])])
    expect(topologicalOrder(diamond)).toEqual([['a', 'e'], ['b', 'c'], ['d'], ['f']])
  })

  it('throws on cycles and unknown dependencies', () => {
    expect(() => topologicalOrder(plan([step('a', ['b']), step('b', ['a'])]))).toThrow(/cycle/)
    expect(() => topologicalOrder(plan([step('a', ['x'])]))).toThrow(/unknown step "x"/)
  })
})

describe('criticalPath', () => {
  const diamond = plan([step('a'), step('b', ['a']), step('c', ['a']), step('d', ['b', 'c']), step('e')])

  it('finds the longest weighted chain', () => {
    expect(criticalPath(diamond, { a: 1, b: 5, c: 2, d: 1, e: 3 })).toEqual({ steps: ['a', 'b', 'd'], duration: 7 })
    expect(criticalPath(diamond, new Map([['a', 1], ['b', 1], ['c', 4], ['d', 1], ['e', 3]]))).toEqual({ steps: ['a', 'c', 'd'], duration: 6 })
    expect(criticalPath(diamond, { e: 10 })).toEqual({ steps: ['e'], duration: 10 })
  })

  it('counts missing durations as 0 and breaks ties by plan order', () => {
    expect(criticalPath(diamond, {})).toEqual({ steps: ['a'], duration: 0 })
    expect(criticalPath(diamond, { b: 1, c: 1 })).toEqual({ steps: ['a', 'b'], duration: 1 })
  })

  it('refuses negative or non-finite durations', () => {
    expect(() => criticalPath(diamond, { a: -1 })).toThrow(RangeError)
    expect(() => criticalPath(diamond, { a: Number.POSITIVE_INFINITY })).toThrow(RangeError)
  })
})
