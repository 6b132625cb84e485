/**
 * The state of a run in memory, what the parts of the orchestrator share
 * (OrchestrationContext), and small helpers: subtask ids, the run's
 * controller, the run's concurrency limit, backoff, sub-goal requests.
 */
import { setMaxListeners } from 'node:events'
import { sha256 } from 'multiformats/hashes/sha2'
import { base64url } from 'multiformats/bases/base64'
import { InvalidPlanError } from '../errors.js'
import { pushable } from 'it-pushable'
import type { Pushable } from 'it-pushable'
import { PLAN_LIMITS } from '../planning/plan.js'
import { isMap } from '../shape.js'
import type { BackoffInit, OrchestratorEvent, OrchestratorInit, RunResult, StepOutcome } from './api.js'
import type { AttemptRecord, RunJournal, RunRecord, StepRecord } from './journal.js'
import type { Token, VerifiedChain } from '../auth/delegation.js'
import type { Goal, Plan } from '../planning/plan.js'
import type { TaskService } from '../tasks/service.js'
import type { Did, HostedAgent, Interconnect, Ranker } from '@ioa/interconnect'
import type { Logger } from '@libp2p/interface'

import type { TraceContext } from '../tasks/wire-v2.js'
import type { IoaSpan } from '../tracing.js'
export { isMap }

/** What the run, step and attempt parts of one orchestrator share */
export interface OrchestrationContext {
  readonly agent: HostedAgent
  readonly ic: Interconnect
  readonly tasks: TaskService
  readonly journal: RunJournal
  readonly ranker?: Ranker
  readonly retries: number
  readonly backoff: Required<BackoffInit>
  readonly maxDepth: number
  readonly discoveryTimeout: number
  readonly maxAttemptsPerRound: number
  readonly confirmTimeout: number
  readonly tokenTtl: number
  readonly attenuate?: OrchestratorInit['attenuate']
  readonly goalCapabilities?: OrchestratorInit['goalCapabilities']
  /** subtasks in flight per provider (load spreading) */
  readonly inflight: Map<Did, number>
  /** when a provider last failed as if gone */
  readonly suspects: Map<Did, number>
  /** attempts created here whose request has not left yet */
  readonly unsent: WeakSet<AttemptRecord>
  readonly log: Logger
  emit(run: Run, event: OrchestratorEvent): void
  save(run: Run, rec: StepRecord): Promise<void>
  /** `save`, a failure logged: the run goes on in memory, and the step's next save writes it again */
  trySave(run: Run, rec: StepRecord): Promise<void>
}

/** The pause before retry round `round` (≥ 1) */
export function backoffDelay (backoff: Required<BackoffInit>, round: number): number {
  return Math.min(backoff.max, backoff.initial * backoff.factor ** Math.max(0, round - 1))
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
export function runController (): AbortController {
  const controller = new AbortController()
  setMaxListeners(Infinity, controller.signal)
  return controller
}

/**
 * The run's limit on subtasks in flight. Kept by hand rather than a queue
 * (@libp2p/utils Queue, p-queue): an acquire hands back a release that the
 * holder calls when its subtask's stream ends, and a waiter leaves the line
 * when its signal aborts.
 */
export class Semaphore {
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

export interface Candidate {
  did: Did
  skill: string
  score: number
}

export interface Run {
  id: string
  record: RunRecord
  plan: Plan
  steps: Map<string, StepRecord>
  results: Map<string, unknown>
  proofs: Token[]
  chain?: VerifiedChain
  controller: AbortController
  events: Pushable<OrchestratorEvent>
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
  /** The run's `invoke_workflow` span (a run resumed from the journal has none) */
  span?: IoaSpan
  /** The trace context its subtasks continue */
  trace?: TraceContext
}

export type SlotOutcome = { slot: number, ok: true, result: unknown, provider: Did } | { slot: number, ok: false, err: unknown }

export function parseGoal (input: unknown): Goal {
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

/** A run in memory, from its records */
export function newRun (record: RunRecord, plan: Plan, steps: Map<string, StepRecord>, resumed: boolean, concurrency: number): Run {
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
    events: pushable<OrchestratorEvent>({ objectMode: true }),
    semaphore: new Semaphore(concurrency),
    tokens: new Map(),
    discovered: new Map(),
    resumed,
    canceled: false,
    stopped: false
  }
}

/** A run's outcome as the API reports it, from its records */
export function resultOf (record: RunRecord, steps: Map<string, StepRecord>): RunResult {
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

/** The last event of a finished run */
export function terminalEvent (run: Run): OrchestratorEvent {
  const o = run.outcome as RunResult
  if (o.state === 'completed') return { type: 'completed', runId: run.id, result: o.result ?? null, steps: o.steps }
  if (o.state === 'canceled') return { type: 'canceled', runId: run.id, reason: o.error ?? { code: 'CANCELED', message: 'Run canceled' } }
  return { type: 'failed', runId: run.id, error: o.error ?? { code: 'STEP_FAILED', message: 'Run failed' }, ...(run.failure?.stepId != null ? { stepId: run.failure.stepId } : {}), steps: o.steps }
}
