/**
 * The graph of a plan's steps (spec/collab-plans.md): the index by id, cycle
 * detection, transitive dependencies, levels, the topological order and the
 * critical path. `validatePlan` (plan.ts) uses the first four; the last two
 * are re-exported by plan.ts.
 */
import { invalid } from './plan.js'
import type { Plan, PlanStep } from './plan.js'


function stepIndex (steps: readonly PlanStep[]): Map<string, PlanStep> {
  const byId = new Map<string, PlanStep>()
  for (const s of steps) byId.set(s.id, s)
  return byId
}

/** Find a cycle: the ids along it (first repeated at the end), or undefined */
export function findCycle (steps: readonly PlanStep[], byId: Map<string, PlanStep>): string[] | undefined {
  const state = new Map<string, 1 | 2>() // 1: on the stack, 2: done
  for (const root of steps) {
    if (state.has(root.id)) continue
    // iterative DFS: the stack holds [step, index of the next dependency]
    const stack: Array<[PlanStep, number]> = [[root, 0]]
    state.set(root.id, 1)
    while (stack.length > 0) {
      const top = stack[stack.length - 1]
      const [step, i] = top
      if (i >= step.dependsOn.length) {
        state.set(step.id, 2)
        stack.pop()
        continue
      }
      top[1]++
      const dep = byId.get(step.dependsOn[i])
      if (dep == null) continue
      const s = state.get(dep.id)
      if (s === 1) {
        const ids = stack.map(([x]) => x.id)
        return [...ids.slice(ids.indexOf(dep.id)), dep.id]
      }
      if (s == null) {
        state.set(dep.id, 1)
        stack.push([dep, 0])
      }
    }
  }
  return undefined
}

/** The transitive dependencies of every step (the graph must be acyclic) */
export function ancestors (steps: readonly PlanStep[], byId: Map<string, PlanStep>): Map<string, Set<string>> {
  const out = new Map<string, Set<string>>()
  const visit = (step: PlanStep): Set<string> => {
    let set = out.get(step.id)
    if (set != null) return set
    set = new Set()
    for (const d of step.dependsOn) {
      const dep = byId.get(d)
      if (dep == null) continue
      set.add(d)
      for (const a of visit(dep)) set.add(a)
    }
    out.set(step.id, set)
    return set
  }
  for (const s of steps) visit(s)
  return out
}

/** Longest-path level of each step: 0 without dependencies, else 1 + the highest level of its dependencies */
export function levels (plan: Pick<Plan, 'steps'>): Map<string, number> {
  const byId = stepIndex(plan.steps)
  for (const s of plan.steps) {
    for (const d of s.dependsOn) {
      if (!byId.has(d)) throw invalid('steps', `step "${s.id}" depends on unknown step "${d}"`)
    }
  }
  const cycle = findCycle(plan.steps, byId)
  if (cycle != null) throw invalid('steps', `cycle ${cycle.join(' -> ')}`)
  const level = new Map<string, number>()
  const visit = (step: PlanStep): number => {
    const known = level.get(step.id)
    if (known != null) return known
    let l = 0
    for (const d of step.dependsOn) l = Math.max(l, visit(byId.get(d) as PlanStep) + 1)
    level.set(step.id, l)
    return l
  }
  for (const s of plan.steps) visit(s)
  return level
}

/**
 * The steps in levels that can run in parallel: level 0 has no dependencies,
 * a step of level n depends on at least one step of level n - 1 and on none of
 * a level ≥ n. Within a level, steps keep the plan's order.
 */
export function topologicalOrder (plan: Pick<Plan, 'steps'>): string[][] {
  const level = levels(plan)
  const out: string[][] = []
  for (const s of plan.steps) {
    const l = level.get(s.id) as number
    while (out.length <= l) out.push([])
    out[l].push(s.id)
  }
  return out
}

/**
 * The longest chain of dependent steps, weighting each step by its expected
 * duration (missing: 0). Ties go to the step earlier in the plan.
 */
export function criticalPath (plan: Pick<Plan, 'steps'>, durations: ReadonlyMap<string, number> | Readonly<Record<string, number>>): { steps: string[], duration: number } {
  const get = (id: string): number => {
    const d = durations instanceof Map ? durations.get(id) : Object.hasOwn(durations, id) ? (durations as Record<string, number>)[id] : undefined
    if (d == null) return 0
    if (typeof d !== 'number' || !Number.isFinite(d) || d < 0) throw new RangeError(`Duration of step "${id}" must be a finite number ≥ 0`)
    return d
  }
  const order = topologicalOrder(plan).flat()
  const byId = stepIndex(plan.steps)
  const position = new Map(plan.steps.map((s, i) => [s.id, i]))
  const finish = new Map<string, number>()
  const prev = new Map<string, string | undefined>()
  for (const id of order) {
    const step = byId.get(id) as PlanStep
    let best: string | undefined
    for (const d of [...step.dependsOn].sort((a, b) => (position.get(a) as number) - (position.get(b) as number))) {
      if (best == null || (finish.get(d) as number) > (finish.get(best) as number)) best = d
    }
    finish.set(id, (best == null ? 0 : finish.get(best) as number) + get(id))
    prev.set(id, best)
  }
  let end: string | undefined
  for (const s of plan.steps) {
    if (end == null || (finish.get(s.id) as number) > (finish.get(end) as number)) end = s.id
  }
  const steps: string[] = []
  for (let at = end; at != null; at = prev.get(at)) steps.unshift(at)
  return { steps, duration: end == null ? 0 : finish.get(end) as number }
}
