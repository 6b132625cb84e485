/**
 * Plans: what a goal becomes before it is carried out. A plan is a DAG of
 * steps; each step asks an agent with one capability to do one thing, with an
 * input whose values may be taken from the goal's input (`{ $input: 'a.b' }`)
 * or from the result of a step it depends on (`{ $ref: 'step.a.b' }`).
 *
 * Normative description: `spec/collab-plans.md`.
 *
 * This file is the schema, the references and the validation of a plan;
 * the graph of the steps (cycles, order, critical path) is graph.ts and
 * resolving a step's input is resolve.ts (both re-exported here), the helpers
 * the planners share are planners/shared.ts.
 */
import { encodeRecord } from '../orchestration/journal-codec.js'
import { assertCapability } from '@ioa/interconnect'
import type { DiscoveredAgent, DiscoveryQuery } from '@ioa/interconnect'
import type { ComponentLogger } from '@libp2p/interface'
import { z } from 'zod'
import { InvalidPlanError } from '../errors.js'
import { ancestors, findCycle, levels } from './graph.js'

/** What someone wants done */
export interface Goal {
  /** What is wanted, in words or as a well-known intent name ('book a hotel for tonight') */
  intent: string
  /** The values the goal's owner provides (the driver's position, destination, budget) */
  input: Record<string, unknown>
  /**
   * A JSON Schema of the result wanted (`{ type: 'object', properties, required }`);
   * used by planners that compose services by their schemas
   */
  want?: Record<string, unknown>
  /**
   * How many delegations lie above this goal: absent or 0 for a goal of the
   * goal's owner, 1 for a sub-goal delegated by a plan step, and so on, up to
   * {@link PLAN_LIMITS}.maxGoalDepth
   */
  depth?: number
}

/** How many agents a step asks at once and how their answers combine */
export interface Fanout {
  /** `all`: every answer (an array); `first`: the first success; `quorum`: `quorum` equal answers */
  mode: 'all' | 'first' | 'quorum'
  /** How many agents are asked, 1-32 */
  count: number
  /** With mode `quorum` (and only then): how many must agree, 1..count */
  quorum?: number
}

/** One step of a plan */
export interface PlanStep {
  /** Unique in the plan: a letter or digit, then up to 63 letters, digits, `_` or `-` */
  id: string
  /** The capability an agent must have to run the step (`travel.hotel.booking`) */
  capability: string
  /**
   * The step's input. Any value, at any depth, may be a reference:
   * `{ $ref: 'stepId' }` or `{ $ref: 'stepId.path.to.field' }` (the result of a
   * step among this step's transitive dependencies), `{ $input: 'path' }` (the
   * goal's input; `''` for all of it) or `{ $literal: value }` (the value as is)
   */
  input: Record<string, unknown>
  /** Steps that must complete before this one */
  dependsOn: string[]
  fanout?: Fanout
  /** Hierarchical: delegate this sub-goal to an agent with `capability`, which plans and orchestrates it */
  goal?: Goal
}

export interface Plan {
  id: string
  goal: Goal
  /** In a topological order once validated: every step comes after its dependencies */
  steps: PlanStep[]
  /** The step whose result is the plan's result */
  output?: string
}

/** What a planner may use */
export interface PlannerContext {
  /** Find agents (usually `Interconnect.discoverAll`) */
  discover?: (query: DiscoveryQuery) => Promise<DiscoveredAgent[]>
  /** Where the planner logs this call (`ioa:collab:planner:<name>`) @default the planner's own logger */
  logger?: ComponentLogger
  signal?: AbortSignal
}

/** Turns a goal into a plan */
export interface Planner {
  readonly name: string
  /** Resolves to a valid plan (see {@link validatePlan}); rejects with `PlannerFailedError`, or the signal's reason when aborted */
  plan(goal: Goal, ctx: PlannerContext): Promise<Plan>
}

/** Bounds on plans */
export const PLAN_LIMITS = Object.freeze({
  maxSteps: 256,
  maxGoalDepth: 4,
  maxFanout: 32,
  maxIntent: 1000,
  /** Longest `$ref` / `$input` path, in characters */
  maxRef: 512,
  /** Deepest nesting of input values */
  maxValueDepth: 32,
  /** Largest plan, as DAG-CBOR */
  maxPlanBytes: 1_048_576
})

/** Grammar of step and plan ids */
export const STEP_ID = /^[a-z0-9][a-z0-9_-]{0,63}$/i

/** The field an `InvalidPlanError` names, and the reference that failed to resolve */
export interface InvalidPlanDetails {
  /** Path of the offending field, e.g. `steps[2].dependsOn[0]`; `plan` for the whole */
  field: string
  /** For unresolved references: the reference, e.g. `$ref:book.amount` */
  ref?: string
}

/** @internal */
export function invalid (field: string, message: string, extra: Partial<InvalidPlanDetails> = {}, cause?: unknown): Error {
  const err = new InvalidPlanError(`Invalid plan: ${field}: ${message}`, cause != null ? { cause } : undefined)
  Object.assign(err, { field, ...extra })
  return err
}

// ---------------------------------------------------------------------------
// Schema

const stepId = z.string().regex(STEP_ID, 'must be 1-64 letters, digits, "_" or "-", starting with a letter or digit')

const capability = z.string().max(128).superRefine((s, ctx) => {
  try {
    assertCapability(s)
  } catch (err) {
    ctx.addIssue({ code: 'custom', message: (err as Error).message })
  }
})

const record = z.record(z.string(), z.unknown())

const GoalSchema = z.strictObject({
  intent: z.string().min(1).max(PLAN_LIMITS.maxIntent),
  input: record,
  want: record.optional(),
  depth: z.number().int().min(0).max(PLAN_LIMITS.maxGoalDepth).optional()
})

const FanoutSchema = z.strictObject({
  mode: z.enum(['all', 'first', 'quorum']),
  count: z.number().int().min(1).max(PLAN_LIMITS.maxFanout),
  quorum: z.number().int().min(1).max(PLAN_LIMITS.maxFanout).optional()
}).superRefine((f, ctx) => {
  if (f.mode === 'quorum' && f.quorum == null) {
    ctx.addIssue({ code: 'custom', path: ['quorum'], message: 'required with mode "quorum"' })
  } else if (f.mode !== 'quorum' && f.quorum != null) {
    ctx.addIssue({ code: 'custom', path: ['quorum'], message: 'allowed only with mode "quorum"' })
  } else if (f.quorum != null && f.quorum > f.count) {
    ctx.addIssue({ code: 'custom', path: ['quorum'], message: `must be at most count (${f.count})` })
  }
})

const StepSchema = z.strictObject({
  id: stepId,
  capability,
  input: record,
  dependsOn: z.array(stepId).max(PLAN_LIMITS.maxSteps),
  fanout: FanoutSchema.optional(),
  goal: GoalSchema.optional()
})

/** The structural schema of a plan (zod 4); {@link validatePlan} adds the graph and reference rules */
export const PlanSchema = z.strictObject({
  id: stepId,
  goal: GoalSchema,
  steps: z.array(StepSchema).min(1).max(PLAN_LIMITS.maxSteps),
  output: stepId.optional()
})

function fieldOf (path: ReadonlyArray<PropertyKey>): string {
  let out = ''
  for (const p of path) {
    if (typeof p === 'number') out += `[${p}]`
    else out += out === '' ? String(p) : `.${String(p)}`
  }
  return out === '' ? 'plan' : out
}

// ---------------------------------------------------------------------------
// Values and references

type Reference = { kind: '$ref', step: string, path: string[], text: string } |
{ kind: '$input', path: string[], text: string }

/** @internal */
export function isPlainObject (v: unknown): v is Record<string, unknown> {
  if (v == null || typeof v !== 'object' || Array.isArray(v)) return false
  const proto = Object.getPrototypeOf(v)
  return proto === Object.prototype || proto === null
}

/** Split a reference path; `undefined` when malformed */
function splitPath (text: string, allowEmpty: boolean): string[] | undefined {
  if (text.length > PLAN_LIMITS.maxRef) return undefined
  if (text === '') return allowEmpty ? [] : undefined
  const segments = text.split('.')
  return segments.every(s => s.length > 0) ? segments : undefined
}

/**
 * Is `value` a reference object? Returns the reference, `undefined` for other
 * values; throws (via `bad`) for malformed reference objects
 */
/** @internal */
export function asReference (value: unknown, bad: (msg: string) => never): Reference | '$literal' | undefined {
  if (!isPlainObject(value)) return undefined
  const keys = Object.keys(value)
  const special = keys.filter(k => k === '$ref' || k === '$input' || k === '$literal')
  if (special.length === 0) return undefined
  if (keys.length !== 1) bad(`a ${special[0]} object must have no other key`)
  const key = special[0]
  if (key === '$literal') return '$literal'
  const text = value[key]
  if (typeof text !== 'string') bad(`${key} must be a string`)
  const t = text as string
  if (key === '$ref') {
    const segments = splitPath(t, false)
    if (segments == null || !STEP_ID.test(segments[0])) bad(`malformed $ref "${t.slice(0, 80)}"`)
    const [step, ...path] = segments as string[]
    return { kind: '$ref', step, path, text: t }
  }
  const segments = splitPath(t, true)
  if (segments == null) bad(`malformed $input "${t.slice(0, 80)}"`)
  return { kind: '$input', path: segments as string[], text: t }
}

/**
 * Walk a plan value: check that it is plain data (null, booleans, finite
 * numbers, strings, bytes, arrays, plain objects) no deeper than the limit,
 * and report each reference in it
 */
function walkValue (value: unknown, field: string, depth: number, onRef?: (ref: Reference, field: string) => void): void {
  if (depth > PLAN_LIMITS.maxValueDepth) throw invalid(field, `nested deeper than ${PLAN_LIMITS.maxValueDepth}`)
  if (value === null || typeof value === 'string' || typeof value === 'boolean' || value instanceof Uint8Array) return
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw invalid(field, 'numbers must be finite')
    return
  }
  if (Array.isArray(value)) {
    value.forEach((v, i) => { walkValue(v, `${field}[${i}]`, depth + 1, onRef) })
    return
  }
  if (isPlainObject(value)) {
    // without onRef the value is plain data: `$ref` and the like mean nothing (JSON Schema has its own `$ref`)
    const ref = onRef == null ? undefined : asReference(value, msg => { throw invalid(field, msg) })
    if (ref === '$literal') {
      walkValue(value.$literal, `${field}.$literal`, depth + 1)
      return
    }
    if (ref != null && onRef != null) {
      onRef(ref, `${field}.${ref.kind}`)
      return
    }
    for (const [k, v] of Object.entries(value)) walkValue(v, `${field}.${k}`, depth + 1, onRef)
    return
  }
  throw invalid(field, `unsupported value of type ${value === undefined ? 'undefined' : typeof value === 'object' ? (value.constructor?.name ?? 'object') : typeof value}`)
}

// ---------------------------------------------------------------------------
// Validation

function cleanGoal (g: z.output<typeof GoalSchema>): Goal {
  const out: Goal = { intent: g.intent, input: g.input }
  if (g.want != null) out.want = g.want
  if (g.depth != null) out.depth = g.depth
  return out
}

/**
 * Check a plan: its structure and bounds (zod), unique step ids, dependencies
 * that exist and form no cycle, references that are well formed and point to
 * a step among the referring step's transitive dependencies, an `output` that
 * names a step, sub-goals no deeper than the limit, plain data values, and the
 * encoded size. Returns a clean copy whose steps are in a topological order
 * (the original order when it already is one). Throws `InvalidPlanError`,
 * whose message and `field` name the first offending field.
 */
export function validatePlan (plan: unknown): Plan {
  const parsed = PlanSchema.safeParse(plan)
  if (!parsed.success) {
    const issue = parsed.error.issues[0]
    throw invalid(fieldOf(issue.path), issue.message, {}, parsed.error)
  }
  const p = parsed.data

  const steps: PlanStep[] = p.steps.map(s => {
    const step: PlanStep = { id: s.id, capability: s.capability, input: s.input, dependsOn: [...s.dependsOn] }
    if (s.fanout != null) {
      step.fanout = { mode: s.fanout.mode, count: s.fanout.count }
      if (s.fanout.quorum != null) step.fanout.quorum = s.fanout.quorum
    }
    if (s.goal != null) step.goal = cleanGoal(s.goal)
    return step
  })
  const goal = cleanGoal(p.goal)

  // ids and dependencies
  const byId = new Map<string, PlanStep>()
  const position = new Map<string, number>()
  steps.forEach((s, i) => {
    if (byId.has(s.id)) throw invalid(`steps[${i}].id`, `duplicate step id "${s.id}"`)
    byId.set(s.id, s)
    position.set(s.id, i)
  })
  steps.forEach((s, i) => {
    const seen = new Set<string>()
    s.dependsOn.forEach((d, j) => {
      if (d === s.id) throw invalid(`steps[${i}].dependsOn[${j}]`, `step "${s.id}" depends on itself`)
      if (!byId.has(d)) throw invalid(`steps[${i}].dependsOn[${j}]`, `unknown step "${d}"`)
      if (seen.has(d)) throw invalid(`steps[${i}].dependsOn[${j}]`, `duplicate dependency "${d}"`)
      seen.add(d)
    })
  })
  const cycle = findCycle(steps, byId)
  if (cycle != null) {
    throw invalid(`steps[${position.get(cycle[0]) as number}].dependsOn`, `cycle ${cycle.join(' -> ')}`)
  }

  // values and references
  const deps = ancestors(steps, byId)
  walkValue(goal.input, 'goal.input', 1)
  if (goal.want != null) walkValue(goal.want, 'goal.want', 1)
  const rootDepth = goal.depth ?? 0
  steps.forEach((s, i) => {
    const mine = deps.get(s.id) as Set<string>
    const onRef = (ref: Reference, field: string): void => {
      if (ref.kind !== '$ref') return
      if (!byId.has(ref.step)) throw invalid(field, `unknown step "${ref.step}"`, { ref: `$ref:${ref.text}` })
      if (!mine.has(ref.step)) {
        throw invalid(field, `step "${ref.step}" is not a dependency of step "${s.id}"`, { ref: `$ref:${ref.text}` })
      }
    }
    walkValue(s.input, `steps[${i}].input`, 1, onRef)
    if (s.goal != null) {
      if (rootDepth + 1 > PLAN_LIMITS.maxGoalDepth) {
        throw invalid(`steps[${i}].goal`, `sub-goals nest deeper than ${PLAN_LIMITS.maxGoalDepth}`)
      }
      if (s.goal.depth != null && s.goal.depth !== rootDepth + 1) {
        throw invalid(`steps[${i}].goal.depth`, `must be ${rootDepth + 1} (one more than the plan goal's)`)
      }
      walkValue(s.goal.input, `steps[${i}].goal.input`, 1, onRef)
      if (s.goal.want != null) walkValue(s.goal.want, `steps[${i}].goal.want`, 1)
    }
  })
  if (p.output != null && !byId.has(p.output)) throw invalid('output', `unknown step "${p.output}"`)

  // a stable topological order
  const level = levels({ steps })
  const ordered = [...steps].sort((a, b) => {
    const d = (level.get(a.id) as number) - (level.get(b.id) as number)
    return d !== 0 ? d : (position.get(a.id) as number) - (position.get(b.id) as number)
  })
  const isSorted = steps.every(s => s.dependsOn.every(d => (position.get(d) as number) < (position.get(s.id) as number)))

  const out: Plan = { id: p.id, goal, steps: isSorted ? steps : ordered }
  if (p.output != null) out.output = p.output

  let size: number
  try {
    // (the bytes the journal writes, spec/collab-orchestration.md 6)
    size = encodeRecord(out).byteLength
  } catch (err) {
    throw invalid('plan', `not encodable as DAG-CBOR: ${(err as Error).message}`, {}, err)
  }
  if (size > PLAN_LIMITS.maxPlanBytes) throw invalid('plan', `encodes to ${size} bytes, more than ${PLAN_LIMITS.maxPlanBytes}`)
  return out
}

export { resolveInput, subGoal } from './resolve.js'
export { criticalPath, topologicalOrder } from './graph.js'
