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
 *
 * This file holds the runs: starting (a plan, a goal through the planner, or
 * a journaled run to resume), driving (the schedule over the plan's DAG, the
 * run's deadline, cancel) and finishing them. One step is steps.ts (fan-out
 * decisions in fanout.ts, providers in provider-pool.ts), one subtask with
 * its attempts and failover is attempts.ts; the public types are api.ts.
 */
import { CanceledError } from '@ioa/transport'
import { MemoryDatastore } from 'datastore-core'
import { capabilityFor, verifyChain } from '../auth/delegation.js'
import { verificationCacheOf } from '../auth/verification-cache.js'
import {
  CollabError, DeadlineExceededError, InvalidPlanError, PlannerFailedError, StepFailedError, UnauthorizedError
} from '../errors.js'
import { validatePlan } from '../planning/plan.js'
import { isTerminal } from '../tasks/model.js'
import { DuplicateRunError, OrchestratorStoppedError, UnknownRunError } from './api.js'
import { SubtaskRunner } from './attempts.js'
import { errorOf } from './failures.js'
import { RUN_ID, RunJournal } from './journal.js'
import { isMap, newRun, parseGoal, resultOf, terminalEvent } from './run.js'
import { orchestratorSettings } from './settings.js'
import { StepRunner } from './steps.js'
import { endSpanWithError, endTaskSpan, extractTrace, injectTrace, tracerOf } from '../tracing.js'
import { checkTrace } from '../tasks/wire-v2.js'
import type { IoaSpan, IoaTracer } from '../tracing.js'
import type {
  Orchestrator, OrchestratorEvent, OrchestratorInit, RunOptions, RunResult, RunSummary
} from './api.js'
import type { AttemptRecord, RunRecord, RunState, StepRecord } from './journal.js'
import type { OrchestrationContext, Run } from './run.js'
import type { OrchestratorSettings } from './settings.js'
import type { Token, VerifiedChain } from '../auth/delegation.js'
import type { VerificationCache } from '../auth/verification-cache.js'
import type { Goal, Plan, PlanStep, Planner } from '../planning/plan.js'
import type { ServeOptions, SkillContext, TaskService } from '../tasks/service.js'
import type { TaskState } from '../tasks/model.js'
import type { Did, HostedAgent, Interconnect, Ranker } from '@ioa/interconnect'
import type { Logger } from '@libp2p/interface'

export { UnknownRunError, DuplicateRunError, OrchestratorStoppedError } from './api.js'
export type {
  Orchestrator, OrchestratorInit, OrchestratorEvent, RunOptions, RunResult, RunSummary, StepOutcome, BackoffInit, AttenuateContext
} from './api.js'
export { subtaskId } from './run.js'

class DefaultOrchestrator implements Orchestrator {
  readonly agent: HostedAgent
  private readonly ic: Interconnect
  private readonly tasks: TaskService
  private readonly journal: RunJournal
  private readonly planner?: Planner
  private readonly ranker?: Ranker
  private readonly settings: OrchestratorSettings
  private readonly attenuate?: OrchestratorInit['attenuate']
  private readonly goalCapabilities?: OrchestratorInit['goalCapabilities']
  private readonly isRevoked?: OrchestratorInit['isRevoked']
  private readonly verification: VerificationCache
  private readonly active = new Map<string, Run>()
  /** subtasks in flight per provider (load spreading) */
  private readonly inflight = new Map<Did, number>()
  /** when a provider last failed as if gone */
  private readonly suspects = new Map<Did, number>()
  /** attempts created here whose request has not left yet */
  private readonly unsent = new WeakSet<AttemptRecord>()
  private stopped = false
  private readonly steps: StepRunner
  private readonly log: Logger
  private readonly tracer: IoaTracer
  private readonly subtasks: SubtaskRunner

  constructor (init: OrchestratorInit) {
    if (init?.ic == null || init.tasks == null || init.agent == null) throw new TypeError('createOrchestrator needs ic, tasks and agent')
    this.ic = init.ic
    this.tasks = init.tasks
    this.agent = init.agent
    this.journal = new RunJournal(init.datastore ?? new MemoryDatastore())
    this.planner = init.planner
    this.ranker = init.ranker
    this.settings = orchestratorSettings(init)
    this.tracer = tracerOf(init.tracer)
    this.attenuate = init.attenuate
    this.goalCapabilities = init.goalCapabilities
    this.isRevoked = init.isRevoked
    this.verification = verificationCacheOf(init.verificationCache)
    this.log = this.ic.node.logger.forComponent('ioa:collab:orchestrator')
    const ctx: OrchestrationContext = {
      agent: this.agent,
      ic: this.ic,
      tasks: this.tasks,
      journal: this.journal,
      ...(this.ranker != null ? { ranker: this.ranker } : {}),
      ...this.settings,
      ...(this.attenuate != null ? { attenuate: this.attenuate } : {}),
      ...(this.goalCapabilities != null ? { goalCapabilities: this.goalCapabilities } : {}),
      inflight: this.inflight,
      suspects: this.suspects,
      unsent: this.unsent,
      log: this.log,
      emit: (run, event) => { this.emit(run, event) },
      save: async (run, rec) => { await this.save(run, rec) },
      trySave: async (run, rec) => { await this.trySave(run, rec) }
    }
    this.subtasks = new SubtaskRunner(ctx)
    this.steps = new StepRunner(ctx, this.subtasks)
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
    return resultOf(record, steps)
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
      if (depth > this.settings.maxDepth) throw new InvalidPlanError(`Sub-goal at depth ${depth} is deeper than this orchestrator's maxDepth ${this.settings.maxDepth}`)
      const outcome = await this.runToCompletion(goal, {
        proofs: [...ctx.chain.path],
        ...(ctx.deadline != null ? { deadline: ctx.deadline } : {}),
        ...(ctx.budget != null ? { budget: ctx.budget } : {}),
        signal: ctx.signal,
        onEvent: (e) => {
          if (e.type === 'step-completed' || e.type === 'step-failed' || e.type === 'failover') {
            try {
              ctx.progress({ event: e.type, stepId: e.stepId })
            } catch (err) {
              // progress is best effort
              this.log.trace('progress of a sub-goal run not sent: %e', err)
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


  private async verifyProofs (proofs: Token[], plan: Plan): Promise<VerifiedChain | undefined> {
    if (proofs.length === 0) return undefined
    const chain = await verifyChain(proofs[0], proofs.slice(1), {
      ...(this.isRevoked != null ? { isRevoked: this.isRevoked } : {}),
      verificationCache: this.verification
    })
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

    const given = options.trace != null ? checkTrace(options.trace) : undefined
    const intent = isMap(goalOrPlan) && isMap(goalOrPlan.goal) ? goalOrPlan.goal.intent : (goalOrPlan as Partial<Goal>)?.intent
    const span = this.tracer.startSpan(`invoke_workflow ${typeof intent === 'string' ? intent.slice(0, 64) : 'plan'}`, 'internal', extractTrace(given), () => ({
      'gen_ai.operation.name': 'invoke_workflow',
      ...(typeof intent === 'string' ? { 'gen_ai.workflow.name': intent } : {}),
      'gen_ai.agent.id': this.agent.did,
      'gen_ai.conversation.id': runId,
      'ioa.run.id': runId,
      'ioa.chain.depth': proofs.length
    }))
    try {
      const run = await this.prepareTraced(goalOrPlan, options, runId, proofs, span)
      run.span = span
      const carried = injectTrace(span, given)
      if (carried != null) run.trace = carried
      return run
    } catch (err) {
      endSpanWithError(span, err)
      throw err
    }
  }

  private async prepareTraced (goalOrPlan: Goal | Plan, options: RunOptions, runId: string, proofs: Token[], span: IoaSpan): Promise<Run> {
    let plan: Plan
    if (isMap(goalOrPlan) && Array.isArray((goalOrPlan as Partial<Plan>).steps)) {
      plan = validatePlan(goalOrPlan)
    } else {
      const goal = goalOrPlan as Goal
      if (this.planner == null) throw new PlannerFailedError('This orchestrator has no planner: give it a plan')
      const planning = this.tracer.startSpan('plan', 'internal', { span }, () => ({ 'gen_ai.operation.name': 'plan', 'gen_ai.agent.id': this.agent.did }))
      try {
        const planned = await this.planner.plan(goal, {
          discover: async (q) => this.ic.discoverAll(q, { timeout: this.settings.discoveryTimeout, ...(options.signal != null ? { signal: options.signal } : {}) }),
          logger: this.ic.node.logger,
          ...(options.signal != null ? { signal: options.signal } : {})
        })
        plan = validatePlan(planned)
        if (planning.isRecording()) planning.setAttribute('ioa.plan.steps', plan.steps.length)
        planning.end()
      } catch (err) {
        endSpanWithError(planning, err)
        throw err
      }
    }
    const depth = plan.goal.depth ?? 0
    if (depth > this.settings.maxDepth) throw new InvalidPlanError(`The plan's goal is at depth ${depth}, deeper than maxDepth ${this.settings.maxDepth}`)
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
    const run = newRun(record, plan, steps, false, this.settings.concurrency)
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
    const run = newRun(record, plan, steps, true, this.settings.concurrency)
    if (record.state === 'running') {
      if (this.active.has(runId)) throw new DuplicateRunError(`Run ${runId} is active here`)
      this.active.set(runId, run)
    }
    return run
  }

  // ---- driving ---------------------------------------------------------

  /** Start executing a run; returns what its reader calls when it stops reading the run's events */
  private start (run: Run, signal?: AbortSignal): () => Promise<void> {
    const onAbort = (): void => { this.cancel(run, signal?.reason) }
    signal?.addEventListener('abort', onAbort, { once: true })
    if (signal?.aborted === true) onAbort()
    run.done = this.execute(run)
    return async () => {
      signal?.removeEventListener('abort', onAbort)
      if (run.outcome == null && !run.stopped) this.cancel(run, new CanceledError('The run\'s event iteration was stopped'))
      await run.done
    }
  }

  private async * drive (run: Run, signal?: AbortSignal): AsyncGenerator<OrchestratorEvent, void, undefined> {
    const stop = this.start(run, signal)
    try {
      for await (const e of run.events) yield e
    } finally {
      await stop()
    }
  }

  private async complete (run: Run, signal?: AbortSignal, onEvent?: (event: OrchestratorEvent) => void): Promise<RunResult> {
    // the run's events read here directly (no generator layer per event)
    const stop = this.start(run, signal)
    try {
      for await (const e of run.events) onEvent?.(e)
    } finally {
      await stop()
    }
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

  /** `save`, a failure logged: the run goes on in memory, and the step's next save writes it again */
  private async trySave (run: Run, rec: StepRecord): Promise<void> {
    await this.save(run, rec).catch((err: unknown) => {
      this.log.error('could not journal step %s of run %s: %e', rec.id, run.id, err)
    })
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
        run.outcome = resultOf(run.record, run.steps)
        this.emit(run, terminalEvent(run))
        run.events.end()
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
      const { result, providers } = await this.steps.stepBody(run, step, rec)
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
        await this.trySave(run, rec)
        this.emit(run, { type: 'canceled', runId: run.id, stepId: step.id, reason: errorOf(signal.reason) })
        return
      }
      rec.state = 'failed'
      rec.error = errorOf(err)
      await this.trySave(run, rec)
      this.emit(run, { type: 'step-failed', runId: run.id, stepId: step.id, error: rec.error })
      this.fail(run, err, step.id)
    }
  }

  // ---- the end -----------------------------------------------------------



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
              sweep.push(this.subtasks.cancelSubtask(run, step, rec, a, signal.reason))
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
      } catch (err) {
        // the outcome is still reported; the journal keeps the run as running
        this.log.error('could not journal the end of run %s: %e', run.id, err)
      }
      run.outcome = resultOf(record, run.steps)
      this.emit(run, terminalEvent(run))
    } finally {
      this.active.delete(run.id)
      run.events.end()
      if (run.span != null) endTaskSpan(run.span, run.outcome?.state ?? 'stopped', run.outcome?.error?.code, run.outcome?.error?.message)
    }
  }
}
/**
 * Create an orchestrator for `agent` (see the module description and
 * `spec/collab-orchestration.md`)
 */
export function createOrchestrator (init: OrchestratorInit): Orchestrator {
  return new DefaultOrchestrator(init)
}

