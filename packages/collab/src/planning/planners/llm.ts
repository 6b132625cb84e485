/**
 * The LLM planner: asks a language model behind an OpenAI-compatible chat
 * completions endpoint to write the plan. The model sees the goal and the
 * capabilities available and must answer with one JSON object; the answer is
 * checked with `validatePlan` (and against the capabilities offered) before it
 * is returned, so an invalid plan is never handed on to be run. The prompt and
 * response contract is in `spec/collab-plans.md`.
 */
import { capabilityMatches } from '@ioa/interconnect'
import { PlannerFailedError } from '../../errors.js'
import { validatePlan } from '../plan.js'
import { discoverSkills, loggedPlan, newPlanId, plannerLogger } from './shared.js'
import type { Goal, Plan, Planner, PlannerContext } from '../plan.js'
import type { ComponentLogger, Logger } from '@libp2p/interface'

/** A capability as described to the model */
export interface CapabilityInfo {
  /** Capability name (or prefix) */
  name: string
  description?: string
  inputSchema?: Record<string, unknown>
  outputSchema?: Record<string, unknown>
}

export interface LlmPlannerInit {
  /** Base URL of the OpenAI-compatible API, e.g. `http://127.0.0.1:11434/v1`; `/chat/completions` is appended */
  url: string
  model: string
  /** Sent as `Authorization: Bearer <apiKey>` */
  apiKey?: string
  /** The fetch implementation @default globalThis.fetch */
  fetch?: typeof globalThis.fetch
  /** Give up on the model after this long, in ms @default 30_000 */
  timeout?: number
  /** `max_tokens` of the request */
  maxTokens?: number
  /** Replaces the default system prompt ({@link DEFAULT_SYSTEM_PROMPT}) */
  systemPrompt?: string
  /**
   * Capabilities to offer the model. A string is a capability name or prefix:
   * with `ctx.discover` it is looked up and the skills found (with their
   * descriptions and schemas) are offered; without, it is offered as is.
   */
  capabilities?: Array<string | CapabilityInfo>
  /** Refuse plans with a capability not covered by one offered (when any are) @default true */
  strictCapabilities?: boolean
  /** Show the model the goal input's values, not only its field names and types @default false */
  includeInputValues?: boolean
  /** `temperature` of the request @default 0 */
  temperature?: number
  /** Largest response body accepted, in bytes @default 1_048_576 */
  maxResponseBytes?: number
  /** Where the planner logs (`ioa:collab:planner:llm`), unless a plan call's context has a logger @default libp2p's default logger (`DEBUG=ioa:collab:planner:*`) */
  logger?: ComponentLogger
}

/** The system prompt used unless `systemPrompt` is given */
export const DEFAULT_SYSTEM_PROMPT = `You are the planner of an Internet of Agents. Agents offer capabilities, named by dot-separated lower-case names such as "travel.hotel.booking". Turn the user's goal into a plan: a directed acyclic graph of steps, each asking an agent with one capability to do one thing.

The user message is a JSON object: {"goal": {"intent": string, "inputSchema": JSON Schema of the goal input, "input"?: the goal input values, "want"?: JSON Schema of the result wanted}, "capabilities": [{"name", "description"?, "inputSchema"?, "outputSchema"?}]}.

Answer with one JSON object and nothing else:
{"steps": [{"id": string, "capability": string, "input": object, "dependsOn": [string]}], "output": string}
Rules:
- id: unique; 1-64 characters: letters, digits, "_" or "-", starting with a letter or digit.
- capability: one of the capabilities listed (or a name below a listed prefix).
- input: the step's input. A value {"$input": "a.b"} is field a.b of the goal input; {"$ref": "step"} is the result of another step and {"$ref": "step.a.b"} a field of it: that step must be among this step's dependencies, directly or through other steps. Any other value is used as is.
- dependsOn: the ids of the steps that must finish first. No cycles.
- output: the id of the step whose result answers the goal.
- Optional per step: "fanout": {"mode": "all" | "first" | "quorum", "count": 1-32, "quorum": n (mode quorum only, at most count)} to ask several agents at once; "goal": {"intent": string, "input": object} to delegate a sub-goal to an agent with the step's capability that plans it itself.
- At most 256 steps; no other keys.
If the goal cannot be reached with the capabilities listed, answer {"error": "<short reason>"}.`

function fail (message: string, cause?: unknown): never {
  throw new PlannerFailedError(message, cause != null ? { cause } : undefined)
}

function isObject (v: unknown): v is Record<string, unknown> {
  return v != null && typeof v === 'object' && !Array.isArray(v)
}

function inferType (v: unknown): string {
  if (v === null) return 'null'
  if (Array.isArray(v)) return 'array'
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number'
  return typeof v
}

/** Read a response body, refusing more than `max` bytes (@internal: also the teams' LLM speaker policy) */
export async function readBounded (res: Response, max: number, log: Logger): Promise<string> {
  if (res.body == null) {
    const text = await res.text()
    if (text.length > max) fail(`Model response larger than ${max} bytes`)
    return text
  }
  const reader = res.body.getReader()
  const chunks: Uint8Array[] = []
  let size = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    size += value.byteLength
    if (size > max) {
      // the response is refused for its size either way; a failed cancel only leaves the stream to be collected
      await reader.cancel().catch((err: unknown) => { log.trace('canceling an oversized model response failed: %e', err) })
      fail(`Model response larger than ${max} bytes`)
    }
    chunks.push(value)
  }
  const all = new Uint8Array(size)
  let at = 0
  for (const c of chunks) {
    all.set(c, at)
    at += c.byteLength
  }
  return new TextDecoder().decode(all)
}

/** The JSON in a message: the whole content, or the body of a fenced code block (@internal: also the teams' LLM speaker policy) */
export function extractJson (content: string): unknown {
  const text = content.trim()
  const fenced = /^```(?:json)?\s*\n([\s\S]*?)\n?```$/.exec(text)
  return JSON.parse(fenced != null ? fenced[1] : text)
}

class LlmPlanner implements Planner {
  readonly name = 'llm'
  private readonly log: Logger
  private readonly endpoint: string
  private readonly fetch: typeof globalThis.fetch
  private readonly timeout: number
  private readonly maxResponseBytes: number

  constructor (private readonly init: LlmPlannerInit) {
    if (typeof init.url !== 'string' || init.url === '') throw new TypeError('llmPlanner needs a url')
    if (typeof init.model !== 'string' || init.model === '') throw new TypeError('llmPlanner needs a model')
    this.endpoint = `${init.url.replace(/\/+$/, '')}/chat/completions`
    this.fetch = init.fetch ?? globalThis.fetch
    this.timeout = init.timeout ?? 30_000
    this.maxResponseBytes = init.maxResponseBytes ?? 1_048_576
    this.log = plannerLogger('llm', init.logger)
  }

  /** The capabilities offered to the model */
  private async capabilities (ctx: PlannerContext): Promise<CapabilityInfo[]> {
    const out: CapabilityInfo[] = []
    const names = new Set<string>()
    const add = (c: CapabilityInfo): void => {
      if (names.has(c.name)) return
      names.add(c.name)
      out.push(c)
    }
    for (const entry of this.init.capabilities ?? []) {
      if (typeof entry !== 'string') {
        add(entry)
      } else if (ctx.discover == null) {
        add({ name: entry })
      } else {
        for (const s of await discoverSkills(ctx.discover, [entry], ctx.signal)) {
          const c: CapabilityInfo = { name: s.id }
          if (s.description != null) c.description = s.description
          if (s.inputSchema != null) c.inputSchema = s.inputSchema
          if (s.outputSchema != null) c.outputSchema = s.outputSchema
          add(c)
        }
      }
    }
    return out
  }

  /** The chat messages for a goal */
  messages (goal: Goal, capabilities: CapabilityInfo[]): Array<{ role: 'system' | 'user', content: string }> {
    const input = isObject(goal.input) ? goal.input : {}
    const described: Record<string, unknown> = {
      intent: goal.intent,
      inputSchema: {
        type: 'object',
        properties: Object.fromEntries(Object.entries(input).map(([k, v]) => [k, { type: inferType(v) }])),
        required: Object.keys(input)
      }
    }
    if (this.init.includeInputValues === true) described.input = input
    if (goal.want != null) described.want = goal.want
    return [
      { role: 'system', content: this.init.systemPrompt ?? DEFAULT_SYSTEM_PROMPT },
      { role: 'user', content: JSON.stringify({ goal: described, capabilities }) }
    ]
  }

  async plan (goal: Goal, ctx: PlannerContext = {}): Promise<Plan> {
    return await loggedPlan(this.name, this.log, goal, ctx, async (log) => this.draw(goal, ctx, log))
  }

  private async draw (goal: Goal, ctx: PlannerContext, log: Logger): Promise<Plan> {
    const signal = ctx.signal
    signal?.throwIfAborted()
    if (goal == null || typeof goal.intent !== 'string') fail('Goal must have an intent')
    const capabilities = await this.capabilities(ctx)

    const body: Record<string, unknown> = {
      model: this.init.model,
      messages: this.messages(goal, capabilities),
      response_format: { type: 'json_object' },
      temperature: this.init.temperature ?? 0
    }
    if (this.init.maxTokens != null) body.max_tokens = this.init.maxTokens
    const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json' }
    if (this.init.apiKey != null) headers.authorization = `Bearer ${this.init.apiKey}`

    // one controller for the caller's signal and the timeout
    const controller = new AbortController()
    let timedOut = false
    const timer = setTimeout(() => {
      timedOut = true
      controller.abort(new Error(`timed out after ${this.timeout} ms`))
    }, this.timeout)
    const onAbort = (): void => { controller.abort(signal?.reason) }
    signal?.addEventListener('abort', onAbort, { once: true })

    let text: string
    try {
      const res = await this.fetch(this.endpoint, {
        method: 'POST',
        headers,
        body: JSON.stringify(body),
        signal: controller.signal
      })
      if (!res.ok) {
        // the status is the error; the body only adds detail when it can be read
        const detail = await readBounded(res, 4096, log).catch((err: unknown) => {
          log.trace('the body of an HTTP %d answer could not be read: %e', res.status, err)
          return ''
        })
        fail(`Model endpoint answered HTTP ${res.status}${detail !== '' ? `: ${detail.slice(0, 300)}` : ''}`)
      }
      text = await readBounded(res, this.maxResponseBytes, log)
    } catch (err) {
      if (signal?.aborted === true) throw signal.reason
      if (timedOut) fail(`Model endpoint did not answer within ${this.timeout} ms`, err)
      if (err instanceof PlannerFailedError) throw err
      fail(`Model request failed: ${(err as Error)?.message ?? String(err)}`, err)
    } finally {
      clearTimeout(timer)
      signal?.removeEventListener('abort', onAbort)
    }

    let answer: unknown
    try {
      const completion = JSON.parse(text) as { choices?: Array<{ message?: { content?: unknown }, finish_reason?: unknown }> }
      const choice = completion?.choices?.[0]
      const content = choice?.message?.content
      if (typeof content !== 'string') fail('Model response has no message content in its first choice')
      try {
        answer = extractJson(content)
      } catch (err) {
        fail(`Model answer is not JSON${choice?.finish_reason === 'length' ? ' (cut off at the token limit)' : ''}: ${content.slice(0, 200)}`, err)
      }
    } catch (err) {
      if (err instanceof PlannerFailedError) throw err
      fail('Model endpoint did not answer with a chat completion', err)
    }

    if (!isObject(answer)) fail('Model answer is not a JSON object')
    if (typeof answer.error === 'string' && answer.steps == null) {
      fail(`The model could not plan the goal: ${answer.error.slice(0, 500)}`)
    }
    const draft = isObject(answer.plan) && answer.steps == null ? answer.plan : answer
    const steps = Array.isArray(draft.steps)
      ? draft.steps.map(s => isObject(s) ? { dependsOn: [], input: {}, ...s } : s)
      : draft.steps
    const candidate: Record<string, unknown> = { id: newPlanId(), goal, steps }
    if (draft.output != null) candidate.output = draft.output

    let plan: Plan
    try {
      plan = validatePlan(candidate)
    } catch (err) {
      fail(`The model's plan is invalid: ${(err as Error).message}`, err)
    }
    if (this.init.strictCapabilities !== false && capabilities.length > 0) {
      for (const step of plan.steps) {
        if (!capabilities.some(c => capabilityMatches(c.name, step.capability))) {
          fail(`The model's plan is invalid: step "${step.id}" uses capability "${step.capability}", which was not offered`)
        }
      }
    }
    signal?.throwIfAborted()
    return plan
  }
}

/** A planner that asks a language model (see the module description) */
export function llmPlanner (init: LlmPlannerInit): Planner {
  return new LlmPlanner(init)
}
