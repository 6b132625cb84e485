/**
 * The public types and errors of the orchestrator (`createOrchestrator`)
 */
import { CollabError } from '../errors.js'
import type { VerificationCache, VerificationCacheInit } from '../auth/verification-cache.js'
import type { Capability, Token } from '../auth/delegation.js'
import type { AttemptState, RunState, StepState } from './journal.js'
import type { Goal, Plan, PlanStep, Planner } from '../planning/plan.js'
import type { ServeOptions, TaskService } from '../tasks/service.js'
import type { TaskError, TaskSnapshot, TaskState } from '../tasks/model.js'
import type { Did, HostedAgent, Interconnect, Ranker } from '@ioa/interconnect'
import type { Datastore } from 'interface-datastore'
import type { TraceContext } from '../tasks/wire-v2.js'
import type { IoaTracer } from '../tracing.js'

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
  /** Where the run's spans go (`invoke_workflow`, `plan`; see `TaskServiceInit.tracer`) @default none (no span is recorded) */
  tracer?: IoaTracer
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
  /**
   * Parsed keys and verified token signatures of the runs' chains (a
   * `VerificationCache`, e.g. the one given to the task service, or its bounds)
   *
   * @default a cache of its own with the default bounds (4,096 entries each)
   */
  verificationCache?: VerificationCache | VerificationCacheInit
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
  /**
   * The trace the run continues (a handler's `ctx.trace`): its
   * `invoke_workflow` span is a child of it, and its subtasks carry it on
   * (spec/management.md 3) @default the active context (a new trace)
   */
  trace?: TraceContext
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
