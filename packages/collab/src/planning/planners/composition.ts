/**
 * The composition planner: typed service composition. It knows the values
 * the goal's owner has (the goal input: an object whose property types are
 * inferred from the values) and the result wanted (`goal.want`, a JSON Schema),
 * and the skills that agents offer with their input and output schemas. A
 * breadth-first search over the sets of available properties finds the
 * shortest chain of skills in which every skill's required input properties
 * are available (from the goal input or an earlier skill's output) and the
 * last skill's output satisfies `want`. Each step's input is wired with
 * `$input` and `$ref`, and each step depends on the steps it takes values from.
 */
import type { Skill } from '@ioa/interconnect'
import { PlannerFailedError } from '../../errors.js'
import { validatePlan } from '../plan.js'
import { discoverSkills, loggedPlan, newPlanId, plannerLogger } from './shared.js'
import { numberOption } from '../../options.js'
import type { Goal, Plan, Planner, PlannerContext, PlanStep } from '../plan.js'
import type { ComponentLogger, Logger } from '@libp2p/interface'
import type { SkillInfo } from './shared.js'

export interface CompositionPlannerInit {
  /** Longest chain of skills @default 5 */
  maxDepth?: number
  /** Skills to compose, for offline use; when given, nothing is discovered */
  catalogue?: Array<Pick<Skill, 'id' | 'inputSchema' | 'outputSchema'>>
  /** Capability names or prefixes to look up with `ctx.discover` when there is no catalogue */
  capabilities?: string[]
  /** Most sets of available properties explored before giving up @default 10_000 */
  maxStates?: number
  /** Where the planner logs (`ioa:collab:planner:composition`), unless a plan call's context has a logger @default libp2p's default logger (`DEBUG=ioa:collab:planner:*`) */
  logger?: ComponentLogger
}

type Schema = Record<string, unknown>

/** Where an available property comes from: the goal input (null) or a step */
interface Known { type?: string, from: string | null }

interface Candidate {
  skill: SkillInfo
  stepId: string
  /** Input properties the skill requires, with their types */
  required: Array<[string, string | undefined]>
  /** Input properties it accepts but does not require */
  optional: string[]
  /** Output properties, with their types */
  provides: Array<[string, string | undefined]>
}

interface Link {
  candidate: Candidate
  wiring: Array<[string, Known]>
}

interface State {
  known: Map<string, Known>
  chain: Link[]
}

function fail (message: string, cause?: unknown): never {
  throw new PlannerFailedError(message, cause != null ? { cause } : undefined)
}

function isObject (v: unknown): v is Record<string, unknown> {
  return v != null && typeof v === 'object' && !Array.isArray(v)
}

function typeOf (schema: unknown): string | undefined {
  if (isObject(schema)) {
    const t = schema.type
    return typeof t === 'string' ? t : undefined
  }
  return undefined
}

function properties (schema: Schema | undefined): Record<string, unknown> {
  const p = schema?.properties
  return isObject(p) ? p : {}
}

function requiredOf (schema: Schema | undefined): string[] {
  const r = schema?.required
  return Array.isArray(r) ? r.filter((x): x is string => typeof x === 'string') : []
}

/** The JSON Schema type of a value; integers are `integer` */
function inferType (v: unknown): string | undefined {
  if (v === null) return 'null'
  if (typeof v === 'string') return 'string'
  if (typeof v === 'boolean') return 'boolean'
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number'
  if (Array.isArray(v)) return 'array'
  if (typeof v === 'object') return 'object'
  return undefined
}

/**
 * Does a value of type `provided` serve where `wanted` is asked? As in
 * `schemaSatisfies` of @ioa/interconnect: equal, or either unnamed; besides,
 * an integer serves where a number is wanted
 */
function typesAgree (provided: string | undefined, wanted: string | undefined): boolean {
  return provided == null || wanted == null || provided === wanted || (provided === 'integer' && wanted === 'number')
}

/** A step id from a capability name: `travel.hotel.search` -> `travel-hotel-search` */
function stepIdFor (capability: string, taken: Set<string>): string {
  const base = capability.replace(/\./g, '-').slice(0, 60)
  let id = base
  for (let n = 2; taken.has(id); n++) id = `${base}-${n}`
  return id
}

function stateKey (known: Map<string, Known>): string {
  return [...known.entries()].map(([k, v]) => `${k}:${v.type ?? '*'}`).sort().join('\n')
}

class CompositionPlanner implements Planner {
  readonly name = 'composition'
  private readonly log: Logger
  private readonly maxDepth: number
  private readonly maxStates: number

  constructor (private readonly init: CompositionPlannerInit = {}) {
    this.maxDepth = numberOption('maxDepth', init.maxDepth ?? 5, { max: 256, integer: true })
    this.maxStates = init.maxStates ?? 10_000
    this.log = plannerLogger('composition', init.logger)
  }

  private async skills (ctx: PlannerContext): Promise<SkillInfo[]> {
    if (this.init.catalogue != null) return this.init.catalogue
    const prefixes = this.init.capabilities ?? []
    if (ctx.discover == null || prefixes.length === 0) {
      fail('No skills to compose: give the planner a catalogue, or capabilities to discover and a discover function')
    }
    return await discoverSkills(ctx.discover, prefixes, ctx.signal)
  }

  async plan (goal: Goal, ctx: PlannerContext = {}): Promise<Plan> {
    return await loggedPlan(this.name, this.log, goal, ctx, async () => this.draw(goal, ctx))
  }

  private async draw (goal: Goal, ctx: PlannerContext): Promise<Plan> {
    const signal = ctx.signal
    signal?.throwIfAborted()
    const want = goal?.want
    if (!isObject(want)) fail('The composition planner needs goal.want, a JSON Schema of the result wanted')
    const wantProps = properties(want)
    let wanted = requiredOf(want)
    if (wanted.length === 0) wanted = Object.keys(wantProps)
    if (wanted.length === 0) fail('goal.want names no property')
    const wantType = typeOf(want)

    const skills = await this.skills(ctx)
    signal?.throwIfAborted()

    // candidates, in a deterministic order whatever the catalogue's
    const taken = new Set<string>()
    const candidates: Candidate[] = []
    const sorted = [...skills].sort((a, b) => a.id < b.id ? -1 : a.id > b.id ? 1 : JSON.stringify([a.inputSchema, a.outputSchema]).localeCompare(JSON.stringify([b.inputSchema, b.outputSchema])))
    for (const skill of sorted) {
      const input = skill.inputSchema
      if (input != null && typeOf(input) != null && typeOf(input) !== 'object') continue
      const output = skill.outputSchema
      if (output == null || (typeOf(output) != null && typeOf(output) !== 'object')) continue
      const inProps = properties(input)
      const req = requiredOf(input)
      const provides = Object.entries(properties(output))
        .filter(([name]) => !name.includes('.'))
        .map(([name, s]): [string, string | undefined] => [name, typeOf(s)])
      if (provides.length === 0) continue
      const stepId = stepIdFor(skill.id, taken)
      taken.add(stepId)
      candidates.push({
        skill,
        stepId,
        required: req.map(name => [name, typeOf(inProps[name])]),
        optional: Object.keys(inProps).filter(n => !req.includes(n)),
        provides
      })
    }

    const start = new Map<string, Known>()
    for (const [name, value] of Object.entries(goal.input ?? {})) {
      if (!name.includes('.') && value !== undefined) start.set(name, { type: inferType(value), from: null })
    }

    const satisfiesWant = (c: Candidate): boolean => {
      if (wantType != null && wantType !== 'object') return false
      const out = new Map(c.provides)
      return wanted.every(name => out.has(name) && typesAgree(out.get(name), typeOf(wantProps[name])))
    }

    // breadth-first search: each layer adds one skill to every chain of the previous layer
    const visited = new Set<string>([stateKey(start)])
    let layer: State[] = [{ known: start, chain: [] }]
    let explored = 0
    for (let depth = 1; depth <= this.maxDepth && layer.length > 0; depth++) {
      const next: State[] = []
      for (const state of layer) {
        if (signal?.aborted === true) throw signal.reason
        const used = new Set(state.chain.map(l => l.candidate.stepId))
        for (const c of candidates) {
          if (used.has(c.stepId)) continue
          const wiring: Array<[string, Known]> = []
          let ok = true
          for (const [name, type] of c.required) {
            const k = state.known.get(name)
            if (k == null || !typesAgree(k.type, type)) { ok = false; break }
            wiring.push([name, k])
          }
          if (!ok) continue
          // optional inputs the goal's owner has are passed along too (they add no dependency)
          for (const name of c.optional) {
            const k = state.known.get(name)
            if (k != null && k.from == null) wiring.push([name, k])
          }
          const chain = [...state.chain, { candidate: c, wiring }]
          if (satisfiesWant(c)) return this.build(goal, chain)
          if (depth === this.maxDepth) continue
          const known = new Map(state.known)
          for (const [name, type] of c.provides) {
            // the goal's own values are preferred; otherwise the latest step's output
            if (known.get(name)?.from === null) continue
            known.set(name, { type, from: c.stepId })
          }
          const key = stateKey(known)
          if (visited.has(key)) continue
          visited.add(key)
          if (++explored > this.maxStates) fail(`Search gave up after ${this.maxStates} states`)
          next.push({ known, chain })
        }
      }
      layer = next
      // let an abort be noticed between layers
      await Promise.resolve()
    }
    return fail(`No chain of at most ${this.maxDepth} skills turns the goal input (${[...start.keys()].join(', ') || 'nothing'}) into the wanted result (${wanted.join(', ')})`)
  }

  private build (goal: Goal, chain: Link[]): Plan {
    const steps: PlanStep[] = chain.map(({ candidate, wiring }) => {
      const deps: string[] = []
      // Object.fromEntries defines own properties, so a property `__proto__` stays data
      const input: Record<string, unknown> = Object.fromEntries(wiring.map(([name, k]) => {
        if (k.from == null) return [name, { $input: name }]
        if (!deps.includes(k.from)) deps.push(k.from)
        return [name, { $ref: `${k.from}.${name}` }]
      }))
      return { id: candidate.stepId, capability: candidate.skill.id, input, dependsOn: deps }
    })
    const plan: Plan = { id: newPlanId(), goal, steps, output: steps[steps.length - 1].id }
    try {
      return validatePlan(plan)
    } catch (err) {
      return fail(`Composed plan is invalid: ${(err as Error).message}`, err)
    }
  }
}

/** A planner that chains skills by their schemas (see the module description) */
export function compositionPlanner (init: CompositionPlannerInit = {}): Planner {
  return new CompositionPlanner(init)
}
