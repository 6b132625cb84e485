/**
 * The orchestrator: carries out a plan (or a goal, through a planner) with
 * agents found at run time. For every step it discovers providers of the
 * step's capability, ranks them, delegates an attenuated token to the chosen
 * one, submits the step as a task, follows it, fails over to another provider
 * or retries with backoff when it fails, and feeds the results into the steps
 * that depend on it. Steps run in parallel as far as the plan's DAG allows;
 * a step may fan out to several providers (all / first / quorum); a step with
 * a sub-goal is handed to an agent that orchestrates it itself. The run's
 * state is journaled in a datastore after every transition, so that another
 * orchestrator (after a crash) resumes it without running completed steps
 * again.
 *
 * Normative description: `spec/collab-orchestration.md`.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { setMaxListeners } from 'node:events'
import { AsyncQueue, CanceledError, StreamClosedError } from '@ioa/transport'
import { MemoryDatastore } from 'datastore-core'
import { sha256 } from 'multiformats/hashes/sha2'
import { base64url } from 'multiformats/bases/base64'
import { equals as bytesEqual } from 'uint8arrays/equals'
import { capabilityFor, delegate, tokenCid, verifyChain } from '../auth/delegation.js'
import {
  CollabError, DeadlineExceededError, InvalidPlanError, NoProviderError, PlannerFailedError, StepFailedError,
  UnauthorizedError, fromRemote
} from '../errors.js'
import { RUN_ID, RunJournal } from './journal.js'
import { PLAN_LIMITS, resolveInput, subGoal, validatePlan } from '../planning/plan.js'
import { LeaseLapsedError, taskFailure } from '../tasks/service.js'
import { isTerminal } from '../tasks/model.js'
import type { Capability, Token, VerifiedChain } from '../auth/delegation.js'
import type { AttemptRecord, AttemptState, RunRecord, RunState, StepRecord, StepState } from './journal.js'
import type { Goal, Plan, PlanStep, Planner } from '../planning/plan.js'
import type { ServeOptions, SkillContext, TaskRequest, TaskService } from '../tasks/service.js'
import type { TaskError, TaskSnapshot, TaskState } from '../tasks/model.js'
import type { Did, HostedAgent, Interconnect, Ranker } from '@ioa/interconnect'
import type { Datastore } from 'interface-datastore'

// ---- errors --------------------------------------------------------------

/** `resume` of a run the journal does not hold */
export class UnknownRunError extends CollabError {
  static override name = 'UnknownRunError'
  static code = 'UNKNOWN_RUN'
  constructor (message = 'Unknown run', options?: ErrorOptions) {
    super(UnknownRunError.code, message, options)
    this.name = UnknownRunError.name
  }
}

/** `run` with the id of a journaled run, or `resume` of a run already active here */
export class DuplicateRunError extends CollabError {
  static override name = 'DuplicateRunError'
  static code = 'DUPLICATE_RUN'
  constructor (message = 'Run already exists', options?: ErrorOptions) {
    super(DuplicateRunError.code, message, options)
    this.name = DuplicateRunError.name
  }
}

/** The orchestrator was stopped while the run was active (the journal keeps it for `resume`) */
export class OrchestratorStoppedError extends CollabError {
  static override name = 'OrchestratorStoppedError'
  static code = 'STOPPED'
  constructor (message = 'Orchestrator stopped', options?: ErrorOptions) {
    super(OrchestratorStoppedError.code, message, options)
    this.name = OrchestratorStoppedError.name
  }
}

// ---- public types ----------------------------------------------------------

export interface BackoffInit {
  /** Delay before the first retry round, ms @default 200 */
  initial?: number
  /** Longest delay, ms @default 2_000 */
  max?: number
  /** Growth per round @default 2 */
  factor?: number
}

/** What `attenuate` is asked to narrow */
export interface AttenuateContext {
  step: PlanStep
  /** The skill the provider is asked to run */
  skill: string
  provider: Did
  /** The capability of the run's chain that covers the skill (undefined: the orchestrator acts on its own authority) */
  parent?: Capability
  /** The step's resolved input */
  input: unknown
  /** What would be delegated without the hook: the skill with the parent's constraints */
  proposed: Capability
}

export interface OrchestratorInit {
  ic: Interconnect
  /** The task service used to submit subtasks (and to serve sub-goals, see `serveGoals`) */
  tasks: TaskService
  /** The orchestrating agent (hosted on `ic`): signs delegations and task envelopes */
  agent: HostedAgent
  /** Where runs are journaled @default an in-memory datastore */
  datastore?: Datastore
  /** Turns goals into plans (required to run goals) */
  planner?: Planner
  /** Re-scores discovered providers @default the interconnect's scores */
  ranker?: Ranker
  /** Retry rounds of a step after its first round failed @default 2 */
  retries?: number
  /** Delay between retry rounds @default { initial: 200, max: 2000, factor: 2 } */
  backoff?: BackoffInit
  /** Deepest sub-goal (hierarchical step) this orchestrator runs or delegates @default 3 */
  maxDepth?: number
  /** Subtasks of one run in flight at once @default 16 */
  concurrency?: number
  /** Timeout of one provider lookup, ms @default 5_000 */
  discoveryTimeout?: number
  /** Providers tried per subtask and retry round @default 3 */
  maxAttemptsPerRound?: number
  /** How long to wait for a failed provider to confirm (get / cancel) the state of its task, ms @default 3_000 */
  confirmTimeout?: number
  /** Longest validity of a delegated token when the run has no earlier deadline or chain expiry, ms @default 3_600_000 */
  tokenTtl?: number
  /**
   * Narrow what is delegated to a provider (e.g. `maxAmount` down to the
   * step's amount). The result must be covered by `parent`, or the provider
   * refuses the chain with ESCALATION.
   */
  attenuate?: (ctx: AttenuateContext) => Capability | Promise<Capability>
  /**
   * Capabilities delegated to the agent of a sub-goal step besides the step
   * capability's subtree (`<capability>.*`), e.g. `payment.pay` for a hotel
   * agent that pays; each must be covered by `parents` (the run's). Default: none.
   */
  goalCapabilities?: (step: PlanStep, parents: Capability[]) => Capability[] | Promise<Capability[]>
  /** Revocation check of the run's own chain when a run starts (a RevocationStore's `isRevoked`) */
  isRevoked?: (cid: string, issuers: readonly Did[]) => boolean | Promise<boolean>
}

export interface RunOptions {
  /** The chain that grants the orchestrating agent its authority, leaf first; empty: it acts on its own authority @default [] */
  proofs?: Token[]
  /** ms since the epoch: the run fails with DEADLINE_EXCEEDED after it, its subtasks are canceled */
  deadline?: number
  /** Budget (abstract units) shared out among the subtasks */
  budget?: number
  /** Cancels the run (its subtasks are canceled) */
  signal?: AbortSignal
  /** @default a random UUID; 1-64 of [A-Za-z0-9_-] */
  runId?: string
}

/** What became of one step */
export interface StepOutcome {
  state: StepState
  result?: unknown
  error?: TaskError
  /** The agents whose results make the step's result */
  providers: Did[]
  /** Every subtask id submitted for the step */
  taskIds: string[]
  attempts: number
}

export interface RunResult {
  runId: string
  planId: string
  state: RunState
  result?: unknown
  error?: TaskError
  steps: Record<string, StepOutcome>
}

export type OrchestratorEvent =
  /** The plan being run (first event) */
  | { type: 'plan', runId: string, plan: Plan, resumed: boolean }
  | { type: 'step-started', runId: string, stepId: string, capability: string, resumed: boolean }
  /** A provider was chosen for a subtask (`reattach`: a journaled subtask is picked up again) */
  | { type: 'provider-selected', runId: string, stepId: string, slot: number, provider: Did, taskId: string, score?: number, candidates: number, reattach: boolean }
  /** A token was delegated to the provider (its CID) */
  | { type: 'delegated', runId: string, stepId: string, slot: number, provider: Did, token: string, capabilities: Capability[], expiresAt: number }
  /** A status event of a subtask (state change or progress) */
  | { type: 'step-status', runId: string, stepId: string, slot: number, provider: Did, taskId: string, state: TaskState, task: TaskSnapshot }
  /** Every provider of the round failed: the next round starts after `delay` */
  | { type: 'step-retry', runId: string, stepId: string, slot: number, round: number, delay: number, error: TaskError }
  /** A subtask failed at `from` (whose task is known to be in state `previous`): it goes to `to` */
  | { type: 'failover', runId: string, stepId: string, slot: number, from: Did, to: Did, error: TaskError, previous: AttemptState }
  | { type: 'step-completed', runId: string, stepId: string, result: unknown, providers: Did[], replayed: boolean }
  | { type: 'step-failed', runId: string, stepId: string, error: TaskError }
  /**
   * With `taskId`: a subtask was canceled (`state`: what the executor answered).
   * With only `stepId`: the step was stopped. Without `stepId`: the run was
   * canceled by its caller (last event).
   */
  | { type: 'canceled', runId: string, stepId?: string, slot?: number, provider?: Did, taskId?: string, state?: AttemptState, reason: TaskError }
  | { type: 'completed', runId: string, result: unknown, steps: Record<string, StepOutcome> }
  | { type: 'failed', runId: string, error: TaskError, stepId?: string, steps: Record<string, StepOutcome> }

export interface RunSummary {
  runId: string
  planId: string
  state: RunState
  createdAt: number
  updatedAt: number
}

export interface Orchestrator {
  readonly agent: HostedAgent
  /** Run a goal (planned by the planner) or a plan; events until `completed`, `failed` or `canceled`. Stopping the iteration cancels the run. */
  run(goalOrPlan: Goal | Plan, options?: RunOptions): AsyncGenerator<OrchestratorEvent, void, undefined>
  /** `run` to the end: the result, or the run's typed error (its `run` property holds the RunResult) */
  runToCompletion(goalOrPlan: Goal | Plan, options?: RunOptions & { onEvent?: (event: OrchestratorEvent) => void }): Promise<RunResult>
  /** Carry on a journaled run (after a crash or `stop`): completed steps are not run again, journaled subtasks are re-attached */
  resume(runId: string, options?: { signal?: AbortSignal }): AsyncGenerator<OrchestratorEvent, void, undefined>
  resumeToCompletion(runId: string, options?: { signal?: AbortSignal, onEvent?: (event: OrchestratorEvent) => void }): Promise<RunResult>
  /** A journaled run as it stands */
  getRun(runId: string): Promise<RunResult | undefined>
  /** Journaled runs (e.g. the `running` ones to resume after a restart) */
  listRuns(options?: { state?: RunState }): Promise<RunSummary[]>
  /**
   * Serve sub-goals: requests for `skill` whose input is `{ goal }` are
   * planned and orchestrated by this orchestrator, under the caller's chain,
   * deadline and budget; the task's result is the run's result.
   */
  serveGoals(skill: string, options?: ServeOptions): Promise<void>
  /** Stop every active run where it is, without canceling subtasks or journaling an end (as a crash would); `resume` continues them */
  stop(): Promise<void>
}

// ---- helpers -------------------------------------------------------------

/** Codes after which a step fails at once: the authority, the input or the limits are wrong, not the provider */
const FATAL = new Set([
  'INVALID_TOKEN', 'INVALID_SIGNATURE', 'TOKEN_EXPIRED', 'TOKEN_NOT_YET_VALID', 'ESCALATION', 'PRINCIPAL_MISMATCH',
  'CHAIN_TOO_DEEP', 'REVOKED', 'UNAUTHORIZED', 'POLICY_DENIED', 'APPROVAL_REQUIRED', 'DEADLINE_EXCEEDED',
  'BUDGET_EXCEEDED', 'INVALID_PLAN', 'INVALID_ENVELOPE', 'PLANNER_FAILED'
])

/** Codes of errors that mean the request did not reach the executor (no task was created there) */
const NOT_REACHED = new Set(['DIAL_FAILED', 'UNKNOWN_AGENT', 'PEER_UNREACHABLE', 'NOT_STARTED', 'PROTOCOL_NOT_SUPPORTED', 'AGENT_NOT_HERE'])

/** Codes the executor answers a submit with instead of creating a task */
const REFUSED = new Set(['NO_PROVIDER', 'TOO_MANY_REQUESTS', 'REPLAY', 'ENVELOPE_EXPIRED', ...FATAL])

/** Attempt states after which the executor's task is known not to have completed */
const FAILED_STATES = new Set<AttemptState>(['failed', 'canceled', 'rejected'])

/** Codes of a provider presumed gone (deprioritised for a while) */
const GONE = new Set(['LEASE_LAPSED', 'INTERRUPTED', ...NOT_REACHED])

/** A provider that failed like this is ranked last for this long, ms */
const SUSPECT_FOR = 60_000

function codeOf (err: unknown): string {
  const c = (err as { code?: unknown } | undefined)?.code
  return typeof c === 'string' ? c : 'ERROR'
}

function errorOf (err: unknown): TaskError {
  const e = err as { code?: unknown, message?: unknown } | undefined
  const code = typeof e?.code === 'string' && /^[A-Z][A-Z0-9_]{0,63}$/.test(e.code) ? e.code : 'HANDLER_ERROR'
  const message = typeof e?.message === 'string' ? e.message : String(err)
  return { code, message: message.slice(0, 1_024) }
}

async function sleep (ms: number, signal: AbortSignal): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    if (signal.aborted) { reject(signal.reason); return }
    const onAbort = (): void => { clearTimeout(t); reject(signal.reason) }
    const t = setTimeout(() => { signal.removeEventListener('abort', onAbort); resolve() }, ms)
    signal.addEventListener('abort', onAbort, { once: true })
  })
}

function isMap (v: unknown): v is Record<string, unknown> {
  return v != null && typeof v === 'object' && !Array.isArray(v) && !(v instanceof Uint8Array)
}

async function hashedId (text: string): Promise<string> {
  const digest = await sha256.digest(new TextEncoder().encode(text))
  return `h:${base64url.baseEncode(digest.digest)}`
}

/**
 * The task id (also the idempotency key) of a subtask: deterministic, so that
 * a resumed orchestrator finds the task again; `generation` counts the
 * earlier tasks of the slot at the same provider that are known to have
 * failed. Longer than 128 characters: `h:` + base64url(sha-256).
 */
export async function subtaskId (runId: string, stepId: string, slot: number, generation: number): Promise<string> {
  const text = `${runId}:${stepId}:${slot}:${generation}`
  return text.length <= 128 ? text : await hashedId(text)
}

/**
 * The run's controller: every running step and subtask listens to its
 * signal, legitimately more than Node's default warning threshold of 10
 */
function runController (): AbortController {
  const controller = new AbortController()
  setMaxListeners(Infinity, controller.signal)
  return controller
}

class Semaphore {
  private free: number
  private readonly waiting: Array<() => void> = []

  constructor (n: number) {
    this.free = n
  }

  async acquire (signal: AbortSignal): Promise<() => void> {
    signal.throwIfAborted()
    if (this.free > 0) {
      this.free--
    } else {
      await new Promise<void>((resolve, reject) => {
        const go = (): void => { signal.removeEventListener('abort', onAbort); resolve() }
        const onAbort = (): void => {
          const i = this.waiting.indexOf(go)
          if (i >= 0) this.waiting.splice(i, 1)
          reject(signal.reason)
        }
        this.waiting.push(go)
        signal.addEventListener('abort', onAbort, { once: true })
      })
    }
    let released = false
    return () => {
      if (released) return
      released = true
      const next = this.waiting.shift()
      if (next != null) next()
      else this.free++
    }
  }
}

interface Candidate {
  did: Did
  skill: string
  score: number
}

interface Run {
  id: string
  record: RunRecord
  plan: Plan
  steps: Map<string, StepRecord>
  results: Map<string, unknown>
  proofs: Token[]
  chain?: VerifiedChain
  controller: AbortController
  events: AsyncQueue<OrchestratorEvent>
  semaphore: Semaphore
  tokens: Map<string, Promise<{ token: Token, cid: string }>>
  /** provider lookups of this run, by capability */
  discovered: Map<string, Promise<Candidate[]>>
  resumed: boolean
  /** the caller canceled (signal or stopped iterating) */
  canceled: boolean
  stopped: boolean
  /** the first error that ended the run, and the step it came from */
  failure?: { err: unknown, stepId?: string }
  outcome?: RunResult
  done?: Promise<void>
}

type SlotOutcome = { slot: number, ok: true, result: unknown, provider: Did } | { slot: number, ok: false, err: unknown }

function encodeForCompare (v: unknown): Uint8Array {
  try {
    return dagCbor.encode(v ?? null)
  } catch {
    return new TextEncoder().encode(JSON.stringify(v))
  }
}

function parseGoal (input: unknown): Goal {
  const raw = isMap(input) ? input.goal : undefined
  if (!isMap(raw) || typeof raw.intent !== 'string' || raw.intent.length === 0 || raw.intent.length > PLAN_LIMITS.maxIntent || !isMap(raw.input)) {
    throw new InvalidPlanError('A sub-goal request needs input { goal: { intent, input } }')
  }
  const goal: Goal = { intent: raw.intent, input: raw.input }
  if (isMap(raw.want)) goal.want = raw.want
  if (raw.depth != null) {
    if (typeof raw.depth !== 'number' || !Number.isInteger(raw.depth) || raw.depth < 0) throw new InvalidPlanError('goal.depth must be an integer ≥ 0')
    goal.depth = raw.depth
  }
  return goal
}

// ---- the orchestrator ----------------------------------------------------

class DefaultOrchestrator implements Orchestrator {
  readonly agent: HostedAgent
  private readonly ic: Interconnect
  private readonly tasks: TaskService
  private readonly journal: RunJournal
  private readonly planner?: Planner
  private readonly ranker?: Ranker
  private readonly retries: number
  private readonly backoff: Required<BackoffInit>
  private readonly maxDepth: number
  private readonly concurrency: number
  private readonly discoveryTimeout: number
  private readonly maxAttemptsPerRound: number
  private readonly confirmTimeout: number
  private readonly tokenTtl: number
  private readonly attenuate?: OrchestratorInit['attenuate']
  private readonly goalCapabilities?: OrchestratorInit['goalCapabilities']
  private readonly isRevoked?: OrchestratorInit['isRevoked']
  private readonly active = new Map<string, Run>()
  /** subtasks in flight per provider (load spreading) */
  private readonly inflight = new Map<Did, number>()
  /** when a provider last failed as if gone */
  private readonly suspects = new Map<Did, number>()
  /** attempts created here whose request has not left yet */
  private readonly unsent = new WeakSet<AttemptRecord>()
  private stopped = false

  constructor (init: OrchestratorInit) {
    if (init?.ic == null || init.tasks == null || init.agent == null) throw new TypeError('createOrchestrator needs ic, tasks and agent')
    this.ic = init.ic
    this.tasks = init.tasks
    this.agent = init.agent
    this.journal = new RunJournal(init.datastore ?? new MemoryDatastore())
    this.planner = init.planner
    this.ranker = init.ranker
    const int = (name: string, v: number, min: number, max = Number.MAX_SAFE_INTEGER): number => {
      if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max) throw new RangeError(`${name} must be a number in ${min}..${max}`)
      return v
    }
    this.retries = Math.floor(int('retries', init.retries ?? 2, 0, 100))
    this.backoff = {
      initial: int('backoff.initial', init.backoff?.initial ?? 200, 0),
      max: int('backoff.max', init.backoff?.max ?? 2_000, 0),
      factor: int('backoff.factor', init.backoff?.factor ?? 2, 1)
    }
    this.maxDepth = Math.floor(int('maxDepth', init.maxDepth ?? 3, 0, PLAN_LIMITS.maxGoalDepth))
    this.concurrency = Math.floor(int('concurrency', init.concurrency ?? 16, 1))
    this.discoveryTimeout = int('discoveryTimeout', init.discoveryTimeout ?? 5_000, 1)
    this.maxAttemptsPerRound = Math.floor(int('maxAttemptsPerRound', init.maxAttemptsPerRound ?? 3, 1))
    this.confirmTimeout = int('confirmTimeout', init.confirmTimeout ?? 3_000, 1)
    this.tokenTtl = int('tokenTtl', init.tokenTtl ?? 3_600_000, 1_000)
    this.attenuate = init.attenuate
    this.goalCapabilities = init.goalCapabilities
    this.isRevoked = init.isRevoked
  }

  // ---- public API ------------------------------------------------------

  async * run (goalOrPlan: Goal | Plan, options: RunOptions = {}): AsyncGenerator<OrchestratorEvent, void, undefined> {
    const run = await this.prepare(goalOrPlan, options)
    yield * this.drive(run, options.signal)
  }

  async runToCompletion (goalOrPlan: Goal | Plan, options: RunOptions & { onEvent?: (event: OrchestratorEvent) => void } = {}): Promise<RunResult> {
    const run = await this.prepare(goalOrPlan, options)
    return await this.complete(run, options.signal, options.onEvent)
  }

  async * resume (runId: string, options: { signal?: AbortSignal } = {}): AsyncGenerator<OrchestratorEvent, void, undefined> {
    const run = await this.load(runId)
    yield * this.drive(run, options.signal)
  }

  async resumeToCompletion (runId: string, options: { signal?: AbortSignal, onEvent?: (event: OrchestratorEvent) => void } = {}): Promise<RunResult> {
    const run = await this.load(runId)
    return await this.complete(run, options.signal, options.onEvent)
  }

  async getRun (runId: string): Promise<RunResult | undefined> {
    const record = await this.journal.getRun(runId)
    if (record == null) return undefined
    const steps = await this.journal.getSteps(runId)
    return this.resultOf(record, steps)
  }

  async listRuns (options: { state?: RunState } = {}): Promise<RunSummary[]> {
    const out: RunSummary[] = []
    for await (const r of this.journal.runs()) {
      if (options.state != null && r.state !== options.state) continue
      out.push({ runId: r.runId, planId: r.plan.id, state: r.state, createdAt: r.createdAt, updatedAt: r.updatedAt })
    }
    return out
  }

  async serveGoals (skill: string, options?: ServeOptions): Promise<void> {
    await this.tasks.serve(this.agent.did, skill, async (input: unknown, ctx: SkillContext) => {
      const goal = parseGoal(input)
      const depth = goal.depth ?? 1
      if (depth > this.maxDepth) throw new InvalidPlanError(`Sub-goal at depth ${depth} is deeper than this orchestrator's maxDepth ${this.maxDepth}`)
      const outcome = await this.runToCompletion(goal, {
        proofs: [...ctx.chain.path],
        ...(ctx.deadline != null ? { deadline: ctx.deadline } : {}),
        ...(ctx.budget != null ? { budget: ctx.budget } : {}),
        signal: ctx.signal,
        onEvent: (e) => {
          if (e.type === 'step-completed' || e.type === 'step-failed' || e.type === 'failover') {
            try {
              ctx.progress({ event: e.type, stepId: e.stepId })
            } catch {
              // progress is best effort
            }
          }
        }
      })
      return outcome.result ?? null
    }, options)
  }

  async stop (): Promise<void> {
    this.stopped = true
    const runs = [...this.active.values()]
    for (const run of runs) {
      run.stopped = true
      if (!run.controller.signal.aborted) run.controller.abort(new OrchestratorStoppedError())
    }
    await Promise.allSettled(runs.map(async r => r.done))
    await this.journal.flush()
  }

  // ---- starting runs ---------------------------------------------------

  private newRun (record: RunRecord, plan: Plan, steps: Map<string, StepRecord>, resumed: boolean): Run {
    const results = new Map<string, unknown>()
    for (const [id, rec] of steps) {
      if (rec.state === 'completed') results.set(id, rec.result ?? null)
    }
    return {
      id: record.runId,
      record,
      plan,
      steps,
      results,
      proofs: record.proofs,
      controller: runController(),
      events: new AsyncQueue(),
      semaphore: new Semaphore(this.concurrency),
      tokens: new Map(),
      discovered: new Map(),
      resumed,
      canceled: false,
      stopped: false
    }
  }

  private async verifyProofs (proofs: Token[], plan: Plan): Promise<VerifiedChain | undefined> {
    if (proofs.length === 0) return undefined
    const chain = await verifyChain(proofs[0], proofs.slice(1), this.isRevoked != null ? { isRevoked: this.isRevoked } : {})
    if (chain.audience !== this.agent.did) {
      throw new UnauthorizedError(`The proofs grant authority to ${chain.audience}, not to the orchestrating agent ${this.agent.did}`)
    }
    for (const step of plan.steps) {
      if (capabilityFor(chain, step.capability) == null) {
        throw new UnauthorizedError(`No delegated capability covers step "${step.id}" (${step.capability})`)
      }
    }
    return chain
  }

  private async prepare (goalOrPlan: Goal | Plan, options: RunOptions): Promise<Run> {
    if (this.stopped) throw new OrchestratorStoppedError()
    options.signal?.throwIfAborted()
    const runId = options.runId ?? globalThis.crypto.randomUUID()
    if (typeof runId !== 'string' || !RUN_ID.test(runId)) throw new TypeError('runId must be 1-64 of [A-Za-z0-9_-]')
    if (options.deadline != null && (typeof options.deadline !== 'number' || !Number.isSafeInteger(options.deadline) || options.deadline < 0)) {
      throw new TypeError('deadline must be a time in ms since the epoch')
    }
    if (options.budget != null && (typeof options.budget !== 'number' || !Number.isFinite(options.budget) || options.budget < 0)) {
      throw new TypeError('budget must be a number ≥ 0')
    }
    const proofs = options.proofs ?? []
    if (!Array.isArray(proofs)) throw new TypeError('proofs must be a list of tokens')
    if (this.active.has(runId) || await this.journal.getRun(runId) != null) throw new DuplicateRunError(`Run ${runId} exists; resume it instead`)

    let plan: Plan
    if (isMap(goalOrPlan) && Array.isArray((goalOrPlan as Partial<Plan>).steps)) {
      plan = validatePlan(goalOrPlan)
    } else {
      const goal = goalOrPlan as Goal
      if (this.planner == null) throw new PlannerFailedError('This orchestrator has no planner: give it a plan')
      const planned = await this.planner.plan(goal, {
        discover: async (q) => this.ic.discoverAll(q, { timeout: this.discoveryTimeout, ...(options.signal != null ? { signal: options.signal } : {}) }),
        ...(options.signal != null ? { signal: options.signal } : {})
      })
      plan = validatePlan(planned)
    }
    const depth = plan.goal.depth ?? 0
    if (depth > this.maxDepth) throw new InvalidPlanError(`The plan's goal is at depth ${depth}, deeper than maxDepth ${this.maxDepth}`)
    const chain = await this.verifyProofs(proofs, plan)

    const now = Date.now()
    const record: RunRecord = {
      v: 1,
      runId,
      agent: this.agent.did,
      plan,
      proofs,
      ...(options.deadline != null ? { deadline: options.deadline } : {}),
      ...(options.budget != null ? { budget: options.budget } : {}),
      state: 'running',
      createdAt: now,
      updatedAt: now
    }
    const steps = new Map<string, StepRecord>(plan.steps.map(s => [s.id, { v: 1, id: s.id, state: 'pending', attempts: [] }]))
    const run = this.newRun(record, plan, steps, false)
    run.chain = chain
    this.active.set(runId, run)
    try {
      await this.journal.putRun(record)
    } catch (err) {
      this.active.delete(runId)
      throw err
    }
    return run
  }

  private async load (runId: string): Promise<Run> {
    if (this.stopped) throw new OrchestratorStoppedError()
    if (typeof runId !== 'string' || !RUN_ID.test(runId)) throw new UnknownRunError(`No run ${String(runId).slice(0, 80)}`)
    if (this.active.has(runId)) throw new DuplicateRunError(`Run ${runId} is active here`)
    const record = await this.journal.getRun(runId)
    if (record == null) throw new UnknownRunError(`No run ${runId} in the journal`)
    if (record.agent !== this.agent.did) throw new UnauthorizedError(`Run ${runId} belongs to ${record.agent}`)
    const plan = validatePlan(record.plan)
    const stored = await this.journal.getSteps(runId)
    const steps = new Map<string, StepRecord>()
    for (const s of plan.steps) steps.set(s.id, stored.get(s.id) ?? { v: 1, id: s.id, state: 'pending', attempts: [] })
    const run = this.newRun(record, plan, steps, true)
    if (record.state === 'running') {
      if (this.active.has(runId)) throw new DuplicateRunError(`Run ${runId} is active here`)
      this.active.set(runId, run)
    }
    return run
  }

  // ---- driving ---------------------------------------------------------

  private async * drive (run: Run, signal?: AbortSignal): AsyncGenerator<OrchestratorEvent, void, undefined> {
    const onAbort = (): void => { this.cancel(run, signal?.reason) }
    signal?.addEventListener('abort', onAbort, { once: true })
    if (signal?.aborted === true) onAbort()
    run.done = this.execute(run)
    try {
      for await (const e of run.events) yield e
    } finally {
      signal?.removeEventListener('abort', onAbort)
      if (run.outcome == null && !run.stopped) this.cancel(run, new CanceledError('The run\'s event iteration was stopped'))
      await run.done
    }
  }

  private async complete (run: Run, signal?: AbortSignal, onEvent?: (event: OrchestratorEvent) => void): Promise<RunResult> {
    for await (const e of this.drive(run, signal)) onEvent?.(e)
    if (run.stopped) throw new OrchestratorStoppedError(`Run ${run.id} was stopped`)
    const outcome = run.outcome as RunResult
    if (outcome.state === 'completed') return outcome
    const err = (run.failure?.err ?? new CollabError(outcome.error?.code ?? 'STEP_FAILED', outcome.error?.message ?? 'Run failed')) as Error & { run?: RunResult, stepId?: string }
    try {
      err.run = outcome
      if (run.failure?.stepId != null) err.stepId = run.failure.stepId
    } catch {
      // a frozen error object: thrown as it is
    }
    throw err
  }

  private cancel (run: Run, reason?: unknown): void {
    if (run.controller.signal.aborted || run.outcome != null) return
    run.canceled = true
    const err = reason instanceof Error && typeof (reason as { code?: unknown }).code === 'string' ? reason : new CanceledError('Run canceled', { cause: reason })
    run.controller.abort(err)
  }

  /** End the run because of `err` (first caller wins) */
  private fail (run: Run, err: unknown, stepId?: string): void {
    if (run.controller.signal.aborted) return
    run.failure = { err, ...(stepId != null ? { stepId } : {}) }
    run.controller.abort(err)
  }

  private emit (run: Run, event: OrchestratorEvent): void {
    if (!run.stopped) run.events.push(event)
  }

  private async save (run: Run, rec: StepRecord): Promise<void> {
    if (run.stopped) return
    await this.journal.putStep(run.id, rec)
  }

  private async execute (run: Run): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined
    try {
      this.emit(run, { type: 'plan', runId: run.id, plan: run.plan, resumed: run.resumed })
      for (const step of run.plan.steps) {
        const rec = run.steps.get(step.id) as StepRecord
        if (rec.state === 'completed') {
          this.emit(run, { type: 'step-completed', runId: run.id, stepId: step.id, result: rec.result ?? null, providers: rec.providers ?? [], replayed: true })
        }
      }
      if (run.record.state !== 'running') {
        // a finished run: report it as journaled
        run.outcome = this.resultOf(run.record, run.steps)
        this.emit(run, this.terminalEvent(run))
        run.events.close()
        return
      }
      if (run.resumed) {
        run.chain = await this.verifyProofs(run.proofs, run.plan)
        const broken = [...run.steps.values()].find(r => r.state === 'failed' || r.state === 'canceled')
        if (broken != null) {
          this.fail(run, new StepFailedError(`Step "${broken.id}" had ${broken.state} before the restart: ${broken.error?.code ?? ''} ${broken.error?.message ?? ''}`.trim()), broken.id)
        }
      }
      const deadline = run.record.deadline
      if (deadline != null) {
        const left = deadline - Date.now()
        const expire = (): void => { this.fail(run, new DeadlineExceededError(`Run deadline ${new Date(deadline).toISOString()} passed`)) }
        if (left <= 0) expire()
        else timer = setTimeout(expire, Math.min(left, 2_147_483_647))
      }
      await this.schedule(run)
    } catch (err) {
      this.fail(run, err)
    } finally {
      clearTimeout(timer)
    }
    await this.finish(run)
  }

  private async schedule (run: Run): Promise<void> {
    const signal = run.controller.signal
    const active = new Map<string, Promise<void>>()
    while (!signal.aborted) {
      for (const step of run.plan.steps) {
        if (signal.aborted) break
        const rec = run.steps.get(step.id) as StepRecord
        if ((rec.state !== 'pending' && rec.state !== 'running') || active.has(step.id)) continue
        if (!step.dependsOn.every(d => run.steps.get(d)?.state === 'completed')) continue
        const p = this.runStep(run, step, rec).finally(() => { active.delete(step.id) })
        active.set(step.id, p)
      }
      if (active.size === 0) break
      await Promise.race(active.values())
    }
    await Promise.allSettled([...active.values()])
  }

  private async runStep (run: Run, step: PlanStep, rec: StepRecord): Promise<void> {
    const signal = run.controller.signal
    const resumed = rec.state === 'running'
    rec.state = 'running'
    rec.startedAt ??= Date.now()
    this.emit(run, { type: 'step-started', runId: run.id, stepId: step.id, capability: step.capability, resumed })
    try {
      // (journaled with its first subtask: a step that crashes before it has none and simply starts again)
      const { result, providers } = await this.stepBody(run, step, rec)
      rec.state = 'completed'
      rec.result = result ?? null
      rec.providers = providers
      rec.finishedAt = Date.now()
      delete rec.error
      run.results.set(step.id, result ?? null)
      await this.save(run, rec)
      this.emit(run, { type: 'step-completed', runId: run.id, stepId: step.id, result: result ?? null, providers, replayed: false })
    } catch (err) {
      if (run.stopped) return
      rec.finishedAt = Date.now()
      if (signal.aborted) {
        rec.state = 'canceled'
        rec.error = errorOf(signal.reason)
        await this.save(run, rec).catch(() => {})
        this.emit(run, { type: 'canceled', runId: run.id, stepId: step.id, reason: errorOf(signal.reason) })
        return
      }
      rec.state = 'failed'
      rec.error = errorOf(err)
      await this.save(run, rec).catch(() => {})
      this.emit(run, { type: 'step-failed', runId: run.id, stepId: step.id, error: rec.error })
      this.fail(run, err, step.id)
    }
  }

  // ---- one step ----------------------------------------------------------

  private backoffDelay (round: number): number {
    return Math.min(this.backoff.max, this.backoff.initial * this.backoff.factor ** Math.max(0, round - 1))
  }

  /** The budget of each subtask of a step: an equal share of what is left for the steps not yet started */
  private allocate (run: Run, step: PlanStep, slots: number): number {
    let left = run.record.budget ?? 0
    let unallocated = slots
    for (const s of run.plan.steps) {
      const r = run.steps.get(s.id) as StepRecord
      if (r.budget != null) left -= r.budget * (r.slots ?? 1)
      else if (s.id !== step.id && r.state !== 'completed') unallocated += s.fanout?.count ?? 1
    }
    return Math.max(0, left) / unallocated
  }

  /** The skill pattern a goal step's token grants: the step capability's subtree when the parent allows it */
  private goalSkill (run: Run, step: PlanStep): string {
    const subtree = `${step.capability}.*`
    if (run.chain == null) return subtree
    return capabilityFor(run.chain, subtree) != null ? subtree : step.capability
  }

  /** Providers of a step's capability; one lookup per capability and run unless `fresh` */
  private async discover (run: Run, step: PlanStep, fresh: boolean): Promise<Candidate[]> {
    const key = `${step.goal != null ? 'goal' : 'task'}\n${step.capability}`
    let found = fresh ? undefined : run.discovered.get(key)
    if (found == null) {
      found = this.lookup(run, step, fresh)
      run.discovered.set(key, found)
      found.catch(() => { if (run.discovered.get(key) === found) run.discovered.delete(key) })
    }
    return [...await found]
  }

  private async lookup (run: Run, step: PlanStep, fresh: boolean): Promise<Candidate[]> {
    const query = { capability: step.capability }
    const found = await this.ic.discoverAll(query, {
      timeout: this.discoveryTimeout,
      signal: run.controller.signal,
      ...(fresh ? { cache: false } : {})
    })
    const now = Date.now()
    const out: Candidate[] = []
    for (const a of found) {
      if (a.card.id === this.agent.did) continue
      const exact = a.skills.find(s => s.id === step.capability)
      // a sub-goal goes only to an agent that serves the capability itself
      if (step.goal != null && exact == null) continue
      const skill = exact?.id ?? a.skills.find(s => run.chain == null || capabilityFor(run.chain, s.id) != null)?.id
      if (skill == null) continue
      const score = this.ranker != null
        ? this.ranker.score({
          card: a.card,
          skills: a.skills,
          ...(a.latency != null ? { latency: a.latency } : {}),
          alive: a.alive,
          local: a.local,
          // the agent's record with this node, as the interconnect's own ranking sees it
          ...(a.history != null ? { history: a.history } : {})
        }, query, now)
        : a.score
      out.push({ did: a.card.id, skill, score })
    }
    return out.sort((x, y) => y.score - x.score)
  }

  private async stepBody (run: Run, step: PlanStep, rec: StepRecord): Promise<{ result: unknown, providers: Did[] }> {
    const signal = run.controller.signal
    if (step.goal != null) {
      const depth = (run.plan.goal.depth ?? 0) + 1
      if (depth > this.maxDepth) throw new InvalidPlanError(`Step "${step.id}": a sub-goal at depth ${depth} is deeper than maxDepth ${this.maxDepth}`)
    }
    const input: unknown = step.goal != null
      ? { goal: subGoal(run.plan, step, run.results) }
      : resolveInput(step.input, run.results, run.plan.goal.input)
    const mode = step.fanout?.mode ?? 'first'
    const count = step.fanout?.count ?? 1
    const needed = mode === 'quorum' ? (step.fanout?.quorum ?? 1) : 1

    const pool = new ProviderPool(async (fresh) => this.discover(run, step, fresh), this.inflight, this.suspects)
    if (rec.slots == null) {
      let round = 0
      while (true) {
        await pool.refresh(round > 0)
        if (pool.size >= needed) break
        if (round >= this.retries) {
          throw new NoProviderError(`No provider of ${step.capability} for step "${step.id}" (found ${pool.size}, need ${needed})`)
        }
        round++
        const delay = this.backoffDelay(round)
        this.emit(run, { type: 'step-retry', runId: run.id, stepId: step.id, slot: 0, round, delay, error: { code: 'NO_PROVIDER', message: `Found ${pool.size} providers of ${step.capability}, need ${needed}` } })
        await sleep(delay, signal)
      }
      rec.slots = Math.min(count, pool.size)
      if (run.record.budget != null) rec.budget = this.allocate(run, step, rec.slots)
      // not awaited here: the first subtask's save, queued in this same turn,
      // coalesces with it and is awaited before any request leaves
      void this.save(run, rec).catch(() => {})
    }
    // (resumed: the journaled subtasks name their providers; spares are looked up when needed)

    const slots = rec.slots
    const stepController = new AbortController()
    // one subtask ends with its step: no step-level signal needed
    const stepSignal = slots > 1 ? AbortSignal.any([signal, stepController.signal]) : signal
    const running = new Map<number, Promise<SlotOutcome>>()
    for (let i = 0; i < slots; i++) {
      running.set(i, this.runSlot(run, step, rec, pool, i, input, stepSignal).then(
        v => ({ slot: i, ok: true as const, result: v.result, provider: v.provider }),
        err => ({ slot: i, ok: false as const, err })
      ))
    }
    const successes: Array<Extract<SlotOutcome, { ok: true }>> = []
    const failures: Array<Extract<SlotOutcome, { ok: false }>> = []
    let decision: { result: unknown, providers: Did[] } | { err: unknown } | undefined
    const decide = (): typeof decision => {
      const fatal = failures.find(f => FATAL.has(codeOf(f.err)))
      if (fatal != null) return { err: fatal.err }
      if (mode === 'all') {
        if (failures.length > 0) return { err: failures[0].err }
        if (successes.length === slots) {
          const ordered = [...successes].sort((a, b) => a.slot - b.slot)
          return { result: ordered.map(s => s.result), providers: ordered.map(s => s.provider) }
        }
        return undefined
      }
      if (mode === 'first') {
        if (successes.length > 0) return { result: successes[0].result, providers: [successes[0].provider] }
        if (failures.length === slots) return { err: failures[failures.length - 1].err }
        return undefined
      }
      // quorum: `needed` equal answers
      const groups: Array<{ bytes: Uint8Array, members: Array<Extract<SlotOutcome, { ok: true }>> }> = []
      for (const s of successes) {
        const bytes = encodeForCompare(s.result)
        const g = groups.find(x => bytesEqual(x.bytes, bytes))
        if (g != null) g.members.push(s)
        else groups.push({ bytes, members: [s] })
      }
      const best = groups.sort((a, b) => b.members.length - a.members.length)[0]
      if (best != null && best.members.length >= needed) {
        return { result: best.members[0].result, providers: best.members.map(m => m.provider) }
      }
      if ((best?.members.length ?? 0) + running.size < needed) {
        const last = failures[failures.length - 1]?.err
        return {
          err: new StepFailedError(`Step "${step.id}": no quorum of ${needed} equal answers (${successes.length} answers in ${groups.length} groups, ${failures.length} failures)`, last != null ? { cause: last } : undefined)
        }
      }
      return undefined
    }
    while (running.size > 0 && decision == null) {
      const o = await Promise.race(running.values())
      running.delete(o.slot)
      if (o.ok) successes.push(o)
      else failures.push(o)
      decision = decide()
    }
    decision ??= decide() ?? { err: new StepFailedError(`Step "${step.id}" ended without a result`) }
    if (running.size > 0) {
      stepController.abort(new CanceledError('The step has its result or has failed'))
      await Promise.allSettled([...running.values()])
    }
    if ('err' in decision) throw decision.err
    return decision
  }

  /** Run one subtask of a step to a result: providers in turn, retry rounds with backoff, re-attach of journaled subtasks */
  private async runSlot (run: Run, step: PlanStep, rec: StepRecord, pool: ProviderPool, slot: number, input: unknown, signal: AbortSignal): Promise<{ result: unknown, provider: Did }> {
    const mine = rec.attempts.filter(a => a.slot === slot)
    let round = mine.reduce((m, a) => Math.max(m, a.round), 0)
    const tried = new Set<Did>(mine.filter(a => a.round === round).map(a => a.provider))
    const last = mine[mine.length - 1]
    let reattach = last != null && !FAILED_STATES.has(last.state) && last.state !== 'absent' ? last : undefined
    let lastErr: unknown

    while (true) {
      signal.throwIfAborted()
      let attempt: AttemptRecord
      if (reattach != null) {
        attempt = reattach
        reattach = undefined
        pool.hold(attempt.provider)
        this.emit(run, { type: 'provider-selected', runId: run.id, stepId: step.id, slot, provider: attempt.provider, taskId: attempt.taskId, candidates: pool.size, reattach: true })
      } else {
        if (!pool.discovered) await pool.refresh(false).catch(() => {})
        const candidate = tried.size < this.maxAttemptsPerRound ? pool.claim(tried) : undefined
        if (candidate == null) {
          if (round >= this.retries) throw this.slotError(step, lastErr, mine.length)
          round++
          tried.clear()
          const delay = this.backoffDelay(round)
          this.emit(run, { type: 'step-retry', runId: run.id, stepId: step.id, slot, round, delay, error: errorOf(lastErr ?? new NoProviderError(`No provider of ${step.capability}`)) })
          await sleep(delay, signal)
          await pool.refresh(true).catch(() => {})
          continue
        }
        const generation = rec.attempts.filter(a => a.slot === slot && a.provider === candidate.did && FAILED_STATES.has(a.state)).length
        attempt = {
          slot,
          round,
          provider: candidate.did,
          skill: candidate.skill,
          taskId: await subtaskId(run.id, step.id, slot, generation),
          state: 'submitting',
          at: Date.now()
        }
        rec.attempts.push(attempt)
        mine.push(attempt)
        this.unsent.add(attempt)
        this.emit(run, { type: 'provider-selected', runId: run.id, stepId: step.id, slot, provider: candidate.did, taskId: attempt.taskId, score: candidate.score, candidates: pool.size, reattach: false })
        try {
          // journaled before the request leaves: a successor re-attaches to it
          await this.save(run, rec)
        } catch (err) {
          pool.release(attempt.provider)
          throw err
        }
      }
      tried.add(attempt.provider)
      try {
        const result = await this.attempt(run, step, rec, attempt, input, signal)
        return { result, provider: attempt.provider }
      } catch (caught) {
        const err = fromRemote(caught)
        if (signal.aborted) {
          await this.cancelSubtask(run, step, rec, attempt, signal.reason)
          throw signal.reason
        }
        const code = codeOf(err)
        attempt.error = errorOf(err)
        if (!isTerminal(attempt.state as TaskState) || attempt.state === 'lapsed') {
          if (this.unsent.has(attempt)) {
            attempt.state = 'absent'
          } else if (attempt.state === 'submitting' && (REFUSED.has(code) || NOT_REACHED.has(code))) {
            // refused before a task existed, or never delivered: nothing runs there
            attempt.state = REFUSED.has(code) ? 'absent' : 'unreachable'
          } else {
            const confirmed = await this.confirm(attempt, signal)
            if (confirmed.state === 'completed') {
              attempt.state = 'completed'
              delete attempt.error
              await this.save(run, rec).catch(() => {})
              return { result: confirmed.result, provider: attempt.provider }
            }
            attempt.state = confirmed.state
          }
        }
        void this.save(run, rec).catch(() => {})
        if (FATAL.has(code)) throw err
        if (GONE.has(code) || attempt.state === 'unreachable') this.suspect(attempt.provider)
        lastErr = err
        const next = tried.size < this.maxAttemptsPerRound ? pool.peek(tried) : undefined
        if (next != null) {
          this.emit(run, { type: 'failover', runId: run.id, stepId: step.id, slot, from: attempt.provider, to: next.did, error: errorOf(err), previous: attempt.state })
        }
      } finally {
        pool.release(attempt.provider)
      }
    }
  }

  private suspect (did: Did): void {
    const now = Date.now()
    this.suspects.delete(did)
    this.suspects.set(did, now)
    if (this.suspects.size > 1_024) {
      for (const [d, at] of this.suspects) {
        if (now - at < SUSPECT_FOR && this.suspects.size <= 1_024) break
        this.suspects.delete(d)
      }
    }
  }

  private slotError (step: PlanStep, lastErr: unknown, attempts: number): Error {
    if (lastErr == null) return new NoProviderError(`No provider of ${step.capability} for step "${step.id}"`)
    const e = errorOf(lastErr)
    const err = new StepFailedError(`Step "${step.id}" failed after ${attempts} attempts: ${e.code}: ${e.message}`, { cause: lastErr })
    Object.assign(err, { lastError: e })
    return err
  }

  /**
   * The token delegated to a provider for a step, and its CID (one per
   * provider and capabilities in a run). A plain step: the provider's skill
   * with the constraints of the run's capability that covers it (narrowed
   * by `attenuate`). A sub-goal: the step capability's subtree
   * (`<capability>.*`), plus what `goalCapabilities` adds.
   */
  private async delegation (run: Run, step: PlanStep, attempt: AttemptRecord, input: unknown): Promise<{ token: Token, cid: string, capabilities: Capability[] }> {
    const skill = step.goal != null ? this.goalSkill(run, step) : attempt.skill
    let parent: Capability | undefined
    if (run.chain != null) {
      parent = capabilityFor(run.chain, skill)
      if (parent == null) throw new UnauthorizedError(`No delegated capability covers ${skill} (step "${step.id}")`)
    }
    const proposed: Capability = { skill, ...(parent?.constraints != null ? { constraints: parent.constraints } : {}) }
    const main = this.attenuate != null
      ? await this.attenuate({ step, skill: attempt.skill, provider: attempt.provider, ...(parent != null ? { parent } : {}), input, proposed })
      : proposed
    const capabilities = [main]
    if (step.goal != null && this.goalCapabilities != null) {
      const parents = run.chain?.capabilities ?? []
      capabilities.push(...await this.goalCapabilities(step, parents))
    }
    const key = `${attempt.provider}\n${JSON.stringify(capabilities)}`
    let entry = run.tokens.get(key)
    if (entry == null) {
      const expiresAt = Math.min(run.chain?.expiresAt ?? Infinity, run.record.deadline ?? Infinity, Date.now() + this.tokenTtl)
      entry = (async () => {
        const token = await delegate(this.agent.identity, {
          audience: attempt.provider,
          capabilities,
          expiresAt,
          ...(run.proofs.length > 0 ? { proofs: [run.proofs[0]] } : {})
        })
        return { token, cid: (await tokenCid(token)).toString() }
      })()
      run.tokens.set(key, entry)
      entry.catch(() => { run.tokens.delete(key) })
    }
    const { token, cid } = await entry
    return { token, cid, capabilities }
  }

  /** One subtask at one provider, to its end */
  private async attempt (run: Run, step: PlanStep, rec: StepRecord, attempt: AttemptRecord, input: unknown, signal: AbortSignal): Promise<unknown> {
    const release = await run.semaphore.acquire(signal)
    try {
      const { token, cid, capabilities } = await this.delegation(run, step, attempt, input)
      this.emit(run, { type: 'delegated', runId: run.id, stepId: step.id, slot: attempt.slot, provider: attempt.provider, token: cid, capabilities, expiresAt: token.payload.exp })
      const request: TaskRequest = {
        skill: attempt.skill,
        input,
        proofs: [token, ...run.proofs],
        taskId: attempt.taskId,
        idempotencyKey: attempt.taskId,
        contextId: run.id
      }
      if (run.record.deadline != null) request.deadline = run.record.deadline
      if (rec.budget != null) request.budget = rec.budget
      let last: TaskSnapshot | undefined
      this.unsent.delete(attempt)
      for await (const ev of this.tasks.submit(this.agent.identity, attempt.provider, request, { signal })) {
        if (ev.type === 'heartbeat') continue
        if (ev.type === 'lapsed') {
          attempt.state = 'lapsed'
          throw new LeaseLapsedError(ev.error.message, { taskId: ev.taskId })
        }
        const task = ev.task
        last = task
        if (task.state !== attempt.state) {
          // in the background: the step's end is journaled (and awaited) right after a terminal state
          attempt.state = task.state
          void this.save(run, rec).catch(() => {})
        }
        if (ev.type === 'status') {
          this.emit(run, { type: 'step-status', runId: run.id, stepId: step.id, slot: attempt.slot, provider: attempt.provider, taskId: task.id, state: task.state, task })
        }
      }
      if (last == null) throw new StreamClosedError('The task stream ended without a status')
      if (last.state === 'completed') return last.result ?? null
      throw taskFailure(last)
    } finally {
      release()
    }
  }

  /**
   * After a subtask's outcome became unknown (lease lapsed, stream lost): ask
   * the executor. A completed task gives its result; a running one is
   * canceled (unless it completes first); no answer: `unreachable`.
   */
  private async confirm (attempt: AttemptRecord, outer: AbortSignal): Promise<{ state: AttemptState, result?: unknown }> {
    const signal = AbortSignal.any([outer, AbortSignal.timeout(this.confirmTimeout)])
    let snap: TaskSnapshot
    try {
      snap = await this.tasks.get(attempt.provider, attempt.taskId, { signal })
    } catch (err) {
      return { state: codeOf(err) === 'UNKNOWN_TASK' ? 'absent' : 'unreachable' }
    }
    if (snap.state === 'completed') return { state: 'completed', result: snap.result ?? null }
    if (isTerminal(snap.state)) return { state: snap.state }
    try {
      snap = await this.tasks.cancel(attempt.provider, attempt.taskId, { signal })
    } catch {
      return { state: 'unreachable' }
    }
    if (snap.state === 'completed') return { state: 'completed', result: snap.result ?? null }
    return { state: isTerminal(snap.state) ? snap.state : 'unreachable' }
  }

  /** Cancel a subtask because its step or run ended (best effort, bounded by confirmTimeout) */
  private async cancelSubtask (run: Run, step: PlanStep, rec: StepRecord, attempt: AttemptRecord, reason: unknown): Promise<void> {
    if (run.stopped || isTerminal(attempt.state as TaskState) || attempt.state === 'absent') return
    if (this.unsent.has(attempt)) {
      // the request never left: there is nothing to cancel
      attempt.state = 'absent'
      await this.save(run, rec).catch(() => {})
      return
    }
    let state: AttemptState = attempt.state
    try {
      const snap = await this.tasks.cancel(attempt.provider, attempt.taskId, { signal: AbortSignal.timeout(this.confirmTimeout) })
      state = snap.state
    } catch (err) {
      if (codeOf(err) === 'UNKNOWN_TASK') state = 'absent'
    }
    attempt.state = state
    await this.save(run, rec).catch(() => {})
    this.emit(run, { type: 'canceled', runId: run.id, stepId: step.id, slot: attempt.slot, provider: attempt.provider, taskId: attempt.taskId, state, reason: errorOf(reason) })
  }

  // ---- the end -----------------------------------------------------------

  private resultOf (record: RunRecord, steps: Map<string, StepRecord>): RunResult {
    const out: Record<string, StepOutcome> = {}
    for (const s of record.plan.steps) {
      const r = steps.get(s.id)
      out[s.id] = {
        state: r?.state ?? 'pending',
        ...(r?.state === 'completed' ? { result: r.result ?? null } : {}),
        ...(r?.error != null ? { error: r.error } : {}),
        providers: r?.providers ?? [],
        taskIds: [...new Set((r?.attempts ?? []).map(a => a.taskId))],
        attempts: r?.attempts.length ?? 0
      }
    }
    return {
      runId: record.runId,
      planId: record.plan.id,
      state: record.state,
      ...(record.state === 'completed' ? { result: record.result ?? null } : {}),
      ...(record.error != null ? { error: record.error } : {}),
      steps: out
    }
  }

  private terminalEvent (run: Run): OrchestratorEvent {
    const o = run.outcome as RunResult
    if (o.state === 'completed') return { type: 'completed', runId: run.id, result: o.result ?? null, steps: o.steps }
    if (o.state === 'canceled') return { type: 'canceled', runId: run.id, reason: o.error ?? { code: 'CANCELED', message: 'Run canceled' } }
    return { type: 'failed', runId: run.id, error: o.error ?? { code: 'STEP_FAILED', message: 'Run failed' }, ...(run.failure?.stepId != null ? { stepId: run.failure.stepId } : {}), steps: o.steps }
  }

  private async finish (run: Run): Promise<void> {
    try {
      if (run.stopped) return
      const signal = run.controller.signal
      const record = run.record
      if (!signal.aborted) {
        const incomplete = run.plan.steps.find(s => run.steps.get(s.id)?.state !== 'completed')
        if (incomplete == null) {
          record.state = 'completed'
          record.result = run.results.get(run.plan.output ?? run.plan.steps[run.plan.steps.length - 1].id) ?? null
        } else {
          this.fail(run, new StepFailedError(`Step "${incomplete.id}" could not run`), incomplete.id)
        }
      }
      if (signal.aborted) {
        // subtasks the journal still shows running (e.g. from before a restart)
        const sweep: Array<Promise<void>> = []
        for (const step of run.plan.steps) {
          const rec = run.steps.get(step.id) as StepRecord
          for (const a of rec.attempts) {
            if (!isTerminal(a.state as TaskState) && a.state !== 'absent' && a.state !== 'unreachable') {
              sweep.push(this.cancelSubtask(run, step, rec, a, signal.reason))
            }
          }
        }
        await Promise.allSettled(sweep)
        record.state = run.canceled && run.failure == null ? 'canceled' : 'failed'
        record.error = errorOf(run.failure?.err ?? signal.reason)
        run.failure ??= { err: signal.reason }
      }
      record.updatedAt = Date.now()
      try {
        await this.journal.putRun(record)
        await this.journal.flush()
      } catch {
        // the outcome is still reported; the journal keeps the run as running
      }
      run.outcome = this.resultOf(record, run.steps)
      this.emit(run, this.terminalEvent(run))
    } finally {
      this.active.delete(run.id)
      run.events.close()
    }
  }
}

/**
 * The providers of one step: discovered, ranked, and claimed by the step's
 * subtasks (one subtask per provider at a time), least loaded first among
 * equals, providers that recently failed as if gone last.
 */
class ProviderPool {
  private candidates: Candidate[] = []
  private readonly claimed = new Set<Did>()

  constructor (
    private readonly find: (fresh: boolean) => Promise<Candidate[]>,
    private readonly load: Map<Did, number>,
    private readonly suspects: Map<Did, number>
  ) {}

  get size (): number {
    return this.candidates.length
  }

  /** Whether providers have been looked up */
  discovered = false

  async refresh (fresh: boolean): Promise<void> {
    const found = await this.find(fresh)
    this.discovered = true
    if (found.length > 0 || fresh) this.candidates = found
  }

  private effective (c: Candidate): number {
    const load = this.load.get(c.did) ?? 0
    const failedAt = this.suspects.get(c.did)
    const suspect = failedAt != null && Date.now() - failedAt < SUSPECT_FOR
    return c.score / (1 + load) - (suspect ? 10 : 0)
  }

  peek (exclude: ReadonlySet<Did>): Candidate | undefined {
    let best: Candidate | undefined
    let bestScore = -Infinity
    for (const c of this.candidates) {
      if (exclude.has(c.did) || this.claimed.has(c.did)) continue
      const s = this.effective(c)
      if (s > bestScore) {
        best = c
        bestScore = s
      }
    }
    return best
  }

  claim (exclude: ReadonlySet<Did>): Candidate | undefined {
    const c = this.peek(exclude)
    if (c != null) this.hold(c.did)
    return c
  }

  hold (did: Did): void {
    this.claimed.add(did)
    this.load.set(did, (this.load.get(did) ?? 0) + 1)
  }

  release (did: Did): void {
    if (!this.claimed.delete(did)) return
    const n = (this.load.get(did) ?? 1) - 1
    if (n <= 0) this.load.delete(did)
    else this.load.set(did, n)
  }
}

/**
 * Create an orchestrator for `agent` (see the module description and
 * `spec/collab-orchestration.md`)
 */
export function createOrchestrator (init: OrchestratorInit): Orchestrator {
  return new DefaultOrchestrator(init)
}

