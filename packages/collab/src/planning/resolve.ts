/**
 * Resolving a step's input when it runs: `{ $input: 'a.b' }` from the goal's
 * input, `{ $ref: 'step.a.b' }` from the results of earlier steps; and the
 * sub-goal a hierarchical step hands on (spec/collab-plans.md)
 */
import { asReference, invalid, isPlainObject } from './plan.js'
import type { Goal, Plan, PlanStep } from './plan.js'

const MISSING = Symbol('missing')

function walkPath (value: unknown, path: readonly string[]): unknown {
  let at = value
  for (const seg of path) {
    if (Array.isArray(at)) {
      if (!/^(0|[1-9][0-9]*)$/.test(seg)) return MISSING
      const i = Number(seg)
      if (i >= at.length) return MISSING
      at = at[i]
    } else if (at != null && typeof at === 'object' && !(at instanceof Uint8Array) && Object.hasOwn(at, seg)) {
      at = (at as Record<string, unknown>)[seg]
    } else {
      return MISSING
    }
  }
  return at
}

function resolveValue (value: unknown, results: ReadonlyMap<string, unknown>, goalInput: unknown, field: string): unknown {
  if (Array.isArray(value)) return value.map((v, i) => resolveValue(v, results, goalInput, `${field}[${i}]`))
  if (!isPlainObject(value)) return value
  const ref = asReference(value, msg => { throw invalid(field, msg) })
  if (ref === '$literal') return value.$literal
  if (ref != null) {
    const refText = `${ref.kind}:${ref.text}`
    if (ref.kind === '$ref') {
      if (!results.has(ref.step)) {
        throw invalid(`${field}.$ref`, `unresolved reference "${ref.text}": no result of step "${ref.step}"`, { ref: refText })
      }
      const v = walkPath(results.get(ref.step), ref.path)
      if (v === MISSING) {
        throw invalid(`${field}.$ref`, `unresolved reference "${ref.text}": the result of step "${ref.step}" has no "${ref.path.join('.')}"`, { ref: refText })
      }
      return v
    }
    const v = walkPath(goalInput, ref.path)
    if (v === MISSING) throw invalid(`${field}.$input`, `unresolved reference "$input:${ref.text}": the goal input has no "${ref.text}"`, { ref: refText })
    return v
  }
  // Object.fromEntries defines own properties, so a key `__proto__` stays data
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, resolveValue(v, results, goalInput, `${field}.${k}`)]))
}

/**
 * Replace every reference in a step input by its value: `{ $ref: 'step.a.b' }`
 * by field `a.b` of the result of `step` in `results`, `{ $input: 'a.b' }` by
 * field `a.b` of `goalInput`, `{ $literal: v }` by `v` (not resolved further).
 * Returns a new value; throws `InvalidPlanError` (with `field` and `ref`) for
 * a reference that cannot be resolved.
 */
export function resolveInput (input: Record<string, unknown>, results: ReadonlyMap<string, unknown>, goalInput: unknown): Record<string, unknown>
export function resolveInput (input: unknown, results: ReadonlyMap<string, unknown>, goalInput: unknown): unknown
export function resolveInput (input: unknown, results: ReadonlyMap<string, unknown>, goalInput: unknown): unknown {
  return resolveValue(input, results, goalInput, 'input')
}

/**
 * The goal to hand to the agent that runs a hierarchical step: the step's
 * sub-goal with its input resolved and its depth one more than the plan's
 */
export function subGoal (plan: Plan, step: PlanStep, results: ReadonlyMap<string, unknown>): Goal {
  if (step.goal == null) throw invalid('goal', `step "${step.id}" has no sub-goal`)
  const out: Goal = {
    intent: step.goal.intent,
    input: resolveValue(step.goal.input, results, plan.goal.input, 'goal.input') as Record<string, unknown>,
    depth: (plan.goal.depth ?? 0) + 1
  }
  if (step.goal.want != null) out.want = step.goal.want
  return out
}
