/**
 * The declarative planner: plans from templates written in advance. A
 * template maps an intent (an exact string, or a pattern written `/source/flags`)
 * to steps. Template values may name parameters (`{ $param: 'name' }`: a named
 * group of the intent pattern, else a field of the goal input, substituted at
 * planning time) besides the plan references (`$input`, `$ref`, `$literal`).
 *
 * Hierarchical: a template step with a `goal` names a sub-intent. When the
 * planner has a template for it, it expands it inline (recursively, up to a
 * depth limit), its step ids prefixed with the goal step's id; otherwise it
 * leaves a goal step for an agent with the step's capability to plan and
 * orchestrate.
 */
import { InvalidPlanError, PlannerFailedError } from '../../errors.js'
import { PLAN_LIMITS, STEP_ID, validatePlan } from '../plan.js'
import { loggedPlan, newPlanId, plannerLogger } from './shared.js'
import type { Fanout, Goal, Plan, Planner, PlannerContext, PlanStep } from '../plan.js'
import type { ComponentLogger, Logger } from '@libp2p/interface'

/** One step of a template */
export interface TemplateStep {
  /** Unique in the template */
  id: string
  /** Required, unless the step has a `goal` that the planner expands inline */
  capability?: string
  /** May hold `{ $param }`, `{ $input }`, `{ $ref }` (to template steps) and `{ $literal }` */
  input?: Record<string, unknown>
  dependsOn?: string[]
  fanout?: Fanout
  /** A sub-goal: expanded inline when a template matches its intent, else delegated */
  goal?: { intent: string, input?: Record<string, unknown>, want?: Record<string, unknown> }
}

export interface Template {
  steps: TemplateStep[]
  /** The step whose result is the result (default: the last step) */
  output?: string
  /** Fields the goal input must have */
  requires?: string[]
}

export interface DeclarativePlannerInit {
  /**
   * Intent -> template (or just its steps). A key written `/source/flags` is a
   * regular expression matched against the whole intent (its named groups are
   * parameters); any other key matches the intent exactly, ignoring case and
   * surrounding or repeated white space. Exact keys are tried first, then
   * patterns in order.
   */
  templates: Record<string, Template | TemplateStep[]>
  /** Deepest inline expansion of sub-goals @default 4 */
  maxDepth?: number
  /** Expand sub-goals inline when a template matches @default true */
  expand?: boolean
  /** Where the planner logs (`ioa:collab:planner:declarative`), unless a plan call's context has a logger @default libp2p's default logger (`DEBUG=ioa:collab:planner:*`) */
  logger?: ComponentLogger
}

interface Compiled {
  key: string
  template: Template
  pattern?: RegExp
}

interface Match {
  template: Template
  groups: Record<string, string>
  key: string
}

const PATTERN = /^\/(.+)\/([a-z]*)$/s

function normalize (intent: string): string {
  return intent.trim().replace(/\s+/g, ' ').toLowerCase()
}

function fail (message: string, cause?: unknown): never {
  throw new PlannerFailedError(message, cause != null ? { cause } : undefined)
}

function isPlainObject (v: unknown): v is Record<string, unknown> {
  if (v == null || typeof v !== 'object' || Array.isArray(v)) return false
  const proto = Object.getPrototypeOf(v)
  return proto === Object.prototype || proto === null
}

/** Is `v` an object with `key` as its only key? */
function oneKey (v: unknown, key: string): boolean {
  return isPlainObject(v) && Object.hasOwn(v, key) && Object.keys(v).length === 1
}

/** Follow `path` into a plan value; references are extended rather than entered */
function project (value: unknown, path: readonly string[], describe: string): unknown {
  if (path.length === 0) return value
  const v = value as Record<string, unknown>
  if (oneKey(value, '$ref') && typeof v.$ref === 'string') return { $ref: [v.$ref, ...path].join('.') }
  if (oneKey(value, '$input') && typeof v.$input === 'string') {
    return { $input: v.$input === '' ? path.join('.') : [v.$input, ...path].join('.') }
  }
  if (oneKey(value, '$literal')) return { $literal: project(v.$literal, path, describe) }
  const [head, ...rest] = path
  if (Array.isArray(value) && /^(0|[1-9][0-9]*)$/.test(head) && Number(head) < value.length) {
    return project(value[Number(head)], rest, describe)
  }
  if (isPlainObject(value) && Object.hasOwn(value, head)) return project(value[head], rest, describe)
  return fail(`${describe} has no "${path.join('.')}"`)
}

/** Where template values get their parameters and goal input from */
interface Scope {
  groups: Record<string, string>
  /** The value of `$input: path` in this scope (a reference in plan terms) */
  input: (path: string[]) => unknown
  /** The value of `$param: path` */
  param: (path: string[]) => unknown
  /** Local step id -> what it became: the ids to depend on and the id to refer to */
  steps: Map<string, { deps: string[], ref: string }>
}

function splitPath (text: string): string[] {
  return text === '' ? [] : text.split('.')
}

/** Rewrite a template value into a plan value in `scope` */
function substitute (value: unknown, scope: Scope, where: string, depth = 0): unknown {
  if (depth > PLAN_LIMITS.maxValueDepth) fail(`${where}: nested too deep`)
  if (Array.isArray(value)) return value.map(v => substitute(v, scope, where, depth + 1))
  if (!isPlainObject(value)) return value
  if (oneKey(value, '$literal')) return value
  if (oneKey(value, '$param')) {
    if (typeof value.$param !== 'string' || value.$param === '') fail(`${where}: $param must be a non-empty string`)
    return scope.param(splitPath(value.$param as string))
  }
  if (oneKey(value, '$input')) {
    if (typeof value.$input !== 'string') fail(`${where}: $input must be a string`)
    return scope.input(splitPath(value.$input as string))
  }
  if (oneKey(value, '$ref')) {
    if (typeof value.$ref !== 'string') fail(`${where}: $ref must be a string`)
    const [step, ...path] = (value.$ref as string).split('.')
    const target = scope.steps.get(step)
    if (target == null) fail(`${where}: $ref to "${step}", not an earlier step of the template`)
    return { $ref: [target.ref, ...path].join('.') }
  }
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, substitute(v, scope, where, depth + 1)]))
}

/** The template steps in a stable dependency order */
function order (key: string, steps: readonly TemplateStep[]): TemplateStep[] {
  const byId = new Map<string, TemplateStep>()
  for (const s of steps) {
    if (typeof s.id !== 'string' || !STEP_ID.test(s.id)) fail(`template "${key}": invalid step id "${String(s.id)}"`)
    if (byId.has(s.id)) fail(`template "${key}": duplicate step id "${s.id}"`)
    byId.set(s.id, s)
  }
  const out: TemplateStep[] = []
  const state = new Map<string, 1 | 2>()
  const visit = (s: TemplateStep): void => {
    const st = state.get(s.id)
    if (st === 2) return
    if (st === 1) fail(`template "${key}": dependency cycle through step "${s.id}"`)
    state.set(s.id, 1)
    for (const d of s.dependsOn ?? []) {
      const dep = byId.get(d)
      if (dep == null) fail(`template "${key}": step "${s.id}" depends on unknown step "${d}"`)
      visit(dep)
    }
    state.set(s.id, 2)
    out.push(s)
  }
  for (const s of steps) visit(s)
  return out
}

class DeclarativePlanner implements Planner {
  readonly name = 'declarative'
  private readonly log: Logger
  private readonly exact = new Map<string, Compiled>()
  private readonly patterns: Compiled[] = []
  private readonly maxDepth: number
  private readonly expandInline: boolean

  constructor (init: DeclarativePlannerInit) {
    this.maxDepth = init.maxDepth ?? PLAN_LIMITS.maxGoalDepth
    this.expandInline = init.expand ?? true
    this.log = plannerLogger('declarative', init.logger)
    for (const [key, value] of Object.entries(init.templates)) {
      const template: Template = Array.isArray(value) ? { steps: value } : value
      if (!Array.isArray(template?.steps) || template.steps.length === 0) {
        throw new InvalidPlanError(`Template "${key}" has no steps`)
      }
      const m = PATTERN.exec(key)
      if (m != null) {
        let pattern: RegExp
        try {
          pattern = new RegExp(m[1], m[2].replace(/[gy]/g, ''))
        } catch (err) {
          throw new InvalidPlanError(`Template "${key}": invalid pattern: ${(err as Error).message}`, { cause: err })
        }
        this.patterns.push({ key, template, pattern })
      } else {
        this.exact.set(normalize(key), { key, template })
      }
    }
  }

  private match (intent: string): Match | undefined {
    const exact = this.exact.get(normalize(intent))
    if (exact != null) return { template: exact.template, groups: {}, key: exact.key }
    const text = intent.trim()
    for (const c of this.patterns) {
      const m = (c.pattern as RegExp).exec(text)
      if (m != null && m.index === 0 && m[0].length === text.length) {
        const groups: Record<string, string> = {}
        for (const [k, v] of Object.entries(m.groups ?? {})) if (v != null) groups[k] = v
        return { template: c.template, groups, key: c.key }
      }
    }
    return undefined
  }

  async plan (goal: Goal, ctx: PlannerContext = {}): Promise<Plan> {
    return await loggedPlan(this.name, this.log, goal, ctx, async () => this.draw(goal, ctx))
  }

  private async draw (goal: Goal, ctx: PlannerContext): Promise<Plan> {
    ctx.signal?.throwIfAborted()
    if (goal == null || typeof goal.intent !== 'string') fail('Goal must have an intent')
    const m = this.match(goal.intent)
    if (m == null) fail(`No template for intent "${goal.intent.slice(0, 200)}"`)
    const input = isPlainObject(goal.input) ? goal.input : {}
    for (const r of m.template.requires ?? []) {
      if (!Object.hasOwn(input, r)) fail(`Intent "${m.key}" requires goal input "${r}"`)
    }

    const root: Scope = {
      groups: m.groups,
      input: path => ({ $input: path.join('.') }),
      param: path => {
        if (path.length === 1 && Object.hasOwn(m.groups, path[0])) return m.groups[path[0]]
        return project(input, path, 'The goal input')
      },
      steps: new Map()
    }
    const steps: PlanStep[] = []
    const expanded = this.expand(m, root, '', [], steps, goal.depth ?? 0, 0)
    ctx.signal?.throwIfAborted()

    const plan: Plan = { id: newPlanId(), goal, steps, output: expanded.ref }
    try {
      return validatePlan(plan)
    } catch (err) {
      return fail(`Template for "${m.key}" gives an invalid plan: ${(err as Error).message}`, err)
    }
  }

  /**
   * Append the steps of a template to `out`; returns the ids a dependent must
   * wait for and the id to refer to for the template's result
   */
  private expand (m: Match, scope: Scope, prefix: string, entryDeps: string[], out: PlanStep[], goalDepth: number, depth: number): { deps: string[], ref: string } {
    const { template, key } = m
    const steps = order(key, template.steps)
    const outputId = template.output ?? template.steps[template.steps.length - 1].id
    if (!steps.some(s => s.id === outputId)) fail(`template "${key}": output "${outputId}" is not one of its steps`)
    const dependents = new Set(steps.flatMap(s => s.dependsOn ?? []))

    for (const s of steps) {
      const id = prefix + s.id
      if (id.length > 64) fail(`template "${key}": step id "${id.slice(0, 80)}…" longer than 64 characters after prefixing`)
      const where = `template "${key}", step "${s.id}"`
      const local = s.dependsOn ?? []
      const deps = local.length === 0
        ? [...entryDeps]
        : [...new Set(local.flatMap(d => (scope.steps.get(d) as { deps: string[] }).deps))]

      const sub = s.goal != null ? (this.expandInline ? this.match(s.goal.intent) : undefined) : undefined
      if (s.goal != null && sub != null) {
        // inline: the sub-template's $input and $param read the sub-goal's input
        if (depth + 1 > this.maxDepth) fail(`Sub-goals of "${key}" nest deeper than ${this.maxDepth} (a recursive template?)`)
        const subInput = substitute(s.goal.input ?? {}, scope, where) as Record<string, unknown>
        for (const r of sub.template.requires ?? []) {
          if (!Object.hasOwn(subInput, r)) fail(`${where}: intent "${sub.key}" requires goal input "${r}"`)
        }
        const describe = `The input of sub-goal "${s.goal.intent.slice(0, 100)}"`
        const inner: Scope = {
          groups: sub.groups,
          input: path => project(subInput, path, describe),
          param: path => {
            if (path.length === 1 && Object.hasOwn(sub.groups, path[0])) return sub.groups[path[0]]
            return project(subInput, path, describe)
          },
          steps: new Map()
        }
        const result = this.expand(sub, inner, `${id}_`, deps, out, goalDepth, depth + 1)
        scope.steps.set(s.id, result)
        continue
      }

      if (s.capability == null) {
        fail(s.goal != null
          ? `${where}: no template for sub-goal "${s.goal.intent.slice(0, 100)}" and no capability to delegate it to`
          : `${where}: no capability`)
      }
      const step: PlanStep = {
        id,
        capability: s.capability,
        input: substitute(s.input ?? {}, scope, where) as Record<string, unknown>,
        dependsOn: deps
      }
      if (s.fanout != null) step.fanout = { ...s.fanout }
      if (s.goal != null) {
        if (goalDepth + 1 > PLAN_LIMITS.maxGoalDepth) {
          fail(`${where}: a delegated sub-goal of a goal at depth ${goalDepth} would nest deeper than ${PLAN_LIMITS.maxGoalDepth}`)
        }
        step.goal = {
          intent: s.goal.intent,
          input: substitute(s.goal.input ?? {}, scope, where) as Record<string, unknown>,
          depth: goalDepth + 1
        }
        if (s.goal.want != null) step.goal.want = s.goal.want
      }
      out.push(step)
      scope.steps.set(s.id, { deps: [id], ref: id })
    }

    // a dependent of this template waits for its sinks and its output
    const result = scope.steps.get(outputId) as { deps: string[], ref: string }
    const exits = steps.filter(s => !dependents.has(s.id)).flatMap(s => (scope.steps.get(s.id) as { deps: string[] }).deps)
    return { deps: [...new Set([...exits, ...result.deps])], ref: result.ref }
  }
}

/** A planner that plans from templates (see the module description) */
export function declarativePlanner (init: DeclarativePlannerInit): Planner {
  return new DeclarativePlanner(init)
}
