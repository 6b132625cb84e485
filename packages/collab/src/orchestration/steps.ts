/**
 * One step of a run: its providers (discovered once per capability and run,
 * ranked), its budget share, its subtasks (one per fan-out slot, each run by
 * attempts.ts) and the fan-out decision over their outcomes (fanout.ts).
 */
import delay from 'delay'
import { CanceledError } from '@ioa/transport'
import { capabilityFor } from '../auth/delegation.js'
import { InvalidPlanError, NoProviderError, StepFailedError } from '../errors.js'
import { resolveInput, subGoal } from '../planning/plan.js'
import { decideFanout } from './fanout.js'
import { ProviderPool } from './provider-pool.js'
import { backoffDelay } from './run.js'
import type { SubtaskRunner } from './attempts.js'
import type { FanoutDecision, SlotFailure, SlotSuccess } from './fanout.js'
import type { StepRecord } from './journal.js'
import type { Candidate, OrchestrationContext, Run, SlotOutcome } from './run.js'
import type { PlanStep } from '../planning/plan.js'
import type { Did } from '@ioa/interconnect'

export class StepRunner {
  constructor (private readonly ctx: OrchestrationContext, private readonly subtasks: SubtaskRunner) {}

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
    const found = await this.ctx.ic.discoverAll(query, {
      timeout: this.ctx.discoveryTimeout,
      signal: run.controller.signal,
      ...(fresh ? { cache: false } : {})
    })
    const now = Date.now()
    const out: Candidate[] = []
    for (const a of found) {
      if (a.card.id === this.ctx.agent.did) continue
      const exact = a.skills.find(s => s.id === step.capability)
      // a sub-goal goes only to an agent that serves the capability itself
      if (step.goal != null && exact == null) continue
      const skill = exact?.id ?? a.skills.find(s => run.chain == null || capabilityFor(run.chain, s.id) != null)?.id
      if (skill == null) continue
      const score = this.ctx.ranker != null
        ? this.ctx.ranker.score({
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

  async stepBody (run: Run, step: PlanStep, rec: StepRecord): Promise<{ result: unknown, providers: Did[] }> {
    const signal = run.controller.signal
    if (step.goal != null) {
      const depth = (run.plan.goal.depth ?? 0) + 1
      if (depth > this.ctx.maxDepth) throw new InvalidPlanError(`Step "${step.id}": a sub-goal at depth ${depth} is deeper than maxDepth ${this.ctx.maxDepth}`)
    }
    const input: unknown = step.goal != null
      ? { goal: subGoal(run.plan, step, run.results) }
      : resolveInput(step.input, run.results, run.plan.goal.input)
    const mode = step.fanout?.mode ?? 'first'
    const count = step.fanout?.count ?? 1
    const needed = mode === 'quorum' ? (step.fanout?.quorum ?? 1) : 1

    const pool = new ProviderPool(async (fresh) => this.discover(run, step, fresh), this.ctx.inflight, this.ctx.suspects)
    if (rec.slots == null) {
      let round = 0
      while (true) {
        await pool.refresh(round > 0)
        if (pool.size >= needed) break
        if (round >= this.ctx.retries) {
          throw new NoProviderError(`No provider of ${step.capability} for step "${step.id}" (found ${pool.size}, need ${needed})`)
        }
        round++
        const pause = backoffDelay(this.ctx.backoff, round)
        this.ctx.emit(run, { type: 'step-retry', runId: run.id, stepId: step.id, slot: 0, round, delay: pause, error: { code: 'NO_PROVIDER', message: `Found ${pool.size} providers of ${step.capability}, need ${needed}` } })
        await delay(pause, { signal })
      }
      rec.slots = Math.min(count, pool.size)
      if (run.record.budget != null) rec.budget = this.allocate(run, step, rec.slots)
      // not awaited here: the first subtask's save, queued in this same turn,
      // coalesces with it and is awaited before any request leaves
      void this.ctx.trySave(run, rec)
    }
    // (resumed: the journaled subtasks name their providers; spares are looked up when needed)

    const slots = rec.slots
    const stepController = new AbortController()
    // one subtask ends with its step: no step-level signal needed
    const stepSignal = slots > 1 ? AbortSignal.any([signal, stepController.signal]) : signal
    const running = new Map<number, Promise<SlotOutcome>>()
    for (let i = 0; i < slots; i++) {
      running.set(i, this.subtasks.runSlot(run, step, rec, pool, i, input, stepSignal).then(
        v => ({ slot: i, ok: true as const, result: v.result, provider: v.provider }),
        err => ({ slot: i, ok: false as const, err })
      ))
    }
    const successes: SlotSuccess[] = []
    const failures: SlotFailure[] = []
    let decision: FanoutDecision | undefined
    const decide = (): typeof decision => decideFanout(step, mode, slots, needed, successes, failures, running.size)
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
}
