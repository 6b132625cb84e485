/**
 * Attempts and failover: one subtask slot of a step run to a result at one
 * provider after another (retry rounds with backoff, re-attach to journaled
 * subtasks), the token delegated to each provider, the check of a subtask
 * whose outcome became unknown, and the cancel of subtasks a step no longer
 * needs (spec/collab-orchestration.md).
 */
import { anySignal } from 'any-signal'
import delay from 'delay'
import { StreamClosedError, isUnreached } from '@ioa/transport'
import { capabilityFor, delegate, tokenCid } from '../auth/delegation.js'
import { NoProviderError, StepFailedError, UnauthorizedError, fromRemote } from '../errors.js'
import { LeaseLapsedError, taskFailure } from '../tasks/service.js'
import { isTerminal } from '../tasks/model.js'
import { FAILED_STATES, FATAL, REFUSED, SUSPECT_FOR, codeOf, errorOf, isGone } from './failures.js'
import { backoffDelay, subtaskId } from './run.js'
import type { ProviderPool } from './provider-pool.js'
import type { OrchestrationContext, Run } from './run.js'
import type { Capability, Token } from '../auth/delegation.js'
import type { AttemptRecord, AttemptState, StepRecord } from './journal.js'
import type { PlanStep } from '../planning/plan.js'
import type { TaskRequest } from '../tasks/service.js'
import type { TaskSnapshot, TaskState } from '../tasks/model.js'
import type { Did } from '@ioa/interconnect'

export class SubtaskRunner {
  constructor (private readonly ctx: OrchestrationContext) {}

  /** The skill pattern a goal step's token grants: the step capability's subtree when the parent allows it */
  private goalSkill (run: Run, step: PlanStep): string {
    const subtree = `${step.capability}.*`
    if (run.chain == null) return subtree
    return capabilityFor(run.chain, subtree) != null ? subtree : step.capability
  }

  /** Run one subtask of a step to a result: providers in turn, retry rounds with backoff, re-attach of journaled subtasks */
  async runSlot (run: Run, step: PlanStep, rec: StepRecord, pool: ProviderPool, slot: number, input: unknown, signal: AbortSignal): Promise<{ result: unknown, provider: Did }> {
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
        this.ctx.emit(run, { type: 'provider-selected', runId: run.id, stepId: step.id, slot, provider: attempt.provider, taskId: attempt.taskId, candidates: pool.size, reattach: true })
      } else {
        if (!pool.discovered) await this.refresh(pool, step, false)
        const candidate = tried.size < this.ctx.maxAttemptsPerRound ? pool.claim(tried) : undefined
        if (candidate == null) {
          if (round >= this.ctx.retries) throw this.slotError(step, lastErr, mine.length)
          round++
          tried.clear()
          const pause = backoffDelay(this.ctx.backoff, round)
          this.ctx.emit(run, { type: 'step-retry', runId: run.id, stepId: step.id, slot, round, delay: pause, error: errorOf(lastErr ?? new NoProviderError(`No provider of ${step.capability}`)) })
          await delay(pause, { signal })
          await this.refresh(pool, step, true)
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
        this.ctx.unsent.add(attempt)
        this.ctx.emit(run, { type: 'provider-selected', runId: run.id, stepId: step.id, slot, provider: candidate.did, taskId: attempt.taskId, score: candidate.score, candidates: pool.size, reattach: false })
        try {
          // journaled before the request leaves: a successor re-attaches to it
          await this.ctx.save(run, rec)
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
          if (this.ctx.unsent.has(attempt)) {
            attempt.state = 'absent'
          } else if (attempt.state === 'submitting' && (REFUSED.has(code) || isUnreached(code))) {
            // refused before a task existed, or never delivered: nothing runs there
            attempt.state = REFUSED.has(code) ? 'absent' : 'unreachable'
          } else {
            const confirmed = await this.confirm(attempt, signal)
            if (confirmed.state === 'completed') {
              attempt.state = 'completed'
              delete attempt.error
              await this.ctx.trySave(run, rec)
              return { result: confirmed.result, provider: attempt.provider }
            }
            attempt.state = confirmed.state
          }
        }
        void this.ctx.trySave(run, rec)
        if (FATAL.has(code)) throw err
        if (isGone(code) || attempt.state === 'unreachable') this.suspect(attempt.provider)
        lastErr = err
        const next = tried.size < this.ctx.maxAttemptsPerRound ? pool.peek(tried) : undefined
        if (next != null) {
          this.ctx.emit(run, { type: 'failover', runId: run.id, stepId: step.id, slot, from: attempt.provider, to: next.did, error: errorOf(err), previous: attempt.state })
        }
      } finally {
        pool.release(attempt.provider)
      }
    }
  }

  /** Look the step's providers up again; a failed lookup keeps the pool as it is (the slot's own error decides) */
  private async refresh (pool: ProviderPool, step: PlanStep, fresh: boolean): Promise<void> {
    await pool.refresh(fresh).catch((err: unknown) => {
      this.ctx.log('could not look up providers of %s for step %s: %e', step.capability, step.id, err)
    })
  }

  private suspect (did: Did): void {
    const now = Date.now()
    this.ctx.suspects.delete(did)
    this.ctx.suspects.set(did, now)
    if (this.ctx.suspects.size > 1_024) {
      for (const [d, at] of this.ctx.suspects) {
        if (now - at < SUSPECT_FOR && this.ctx.suspects.size <= 1_024) break
        this.ctx.suspects.delete(d)
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
    const main = this.ctx.attenuate != null
      ? await this.ctx.attenuate({ step, skill: attempt.skill, provider: attempt.provider, ...(parent != null ? { parent } : {}), input, proposed })
      : proposed
    const capabilities = [main]
    if (step.goal != null && this.ctx.goalCapabilities != null) {
      const parents = run.chain?.capabilities ?? []
      capabilities.push(...await this.ctx.goalCapabilities(step, parents))
    }
    const key = `${attempt.provider}\n${JSON.stringify(capabilities)}`
    let entry = run.tokens.get(key)
    if (entry == null) {
      const expiresAt = Math.min(run.chain?.expiresAt ?? Infinity, run.record.deadline ?? Infinity, Date.now() + this.ctx.tokenTtl)
      entry = (async () => {
        const token = await delegate(this.ctx.agent.identity, {
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
      this.ctx.emit(run, { type: 'delegated', runId: run.id, stepId: step.id, slot: attempt.slot, provider: attempt.provider, token: cid, capabilities, expiresAt: token.payload.exp })
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
      this.ctx.unsent.delete(attempt)
      for await (const ev of this.ctx.tasks.submit(this.ctx.agent.identity, attempt.provider, request, { signal, ...(run.trace != null ? { trace: run.trace } : {}) })) {
        if (ev.type === 'heartbeat') continue
        if (ev.type === 'lapsed') {
          attempt.state = 'lapsed'
          throw new LeaseLapsedError(ev.error.message, { taskId: ev.taskId })
        }
        const task = ev.task
        last = task
        if (task.state !== attempt.state) {
          attempt.state = task.state
          // intermediate states in the background; a terminal state is
          // journaled by what follows it (the step's end, awaited, or the
          // failure's save in runSlot), not written twice
          if (!isTerminal(task.state)) void this.ctx.trySave(run, rec)
        }
        if (ev.type === 'status') {
          this.ctx.emit(run, { type: 'step-status', runId: run.id, stepId: step.id, slot: attempt.slot, provider: attempt.provider, taskId: task.id, state: task.state, task })
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
    const signal = anySignal([outer, AbortSignal.timeout(this.ctx.confirmTimeout)])
    try {
      return await this.confirmWithin(attempt, signal)
    } finally {
      signal.clear()
    }
  }

  /** `confirm` within `signal` */
  private async confirmWithin (attempt: AttemptRecord, signal: AbortSignal): Promise<{ state: AttemptState, result?: unknown }> {
    let snap: TaskSnapshot
    try {
      snap = await this.ctx.tasks.get(attempt.provider, attempt.taskId, { signal })
    } catch (err) {
      this.ctx.log('could not read subtask %s at %s: %e', attempt.taskId, attempt.provider, err)
      return { state: codeOf(err) === 'UNKNOWN_TASK' ? 'absent' : 'unreachable' }
    }
    if (snap.state === 'completed') return { state: 'completed', result: snap.result ?? null }
    if (isTerminal(snap.state)) return { state: snap.state }
    try {
      snap = await this.ctx.tasks.cancel(attempt.provider, attempt.taskId, { signal })
    } catch (err) {
      this.ctx.log('could not cancel subtask %s at %s: %e', attempt.taskId, attempt.provider, err)
      return { state: 'unreachable' }
    }
    if (snap.state === 'completed') return { state: 'completed', result: snap.result ?? null }
    return { state: isTerminal(snap.state) ? snap.state : 'unreachable' }
  }

  /** Cancel a subtask because its step or run ended (best effort, bounded by confirmTimeout) */
  async cancelSubtask (run: Run, step: PlanStep, rec: StepRecord, attempt: AttemptRecord, reason: unknown): Promise<void> {
    if (run.stopped || isTerminal(attempt.state as TaskState) || attempt.state === 'absent') return
    if (this.ctx.unsent.has(attempt)) {
      // the request never left: there is nothing to cancel
      attempt.state = 'absent'
      await this.ctx.trySave(run, rec)
      return
    }
    let state: AttemptState = attempt.state
    try {
      const snap = await this.ctx.tasks.cancel(attempt.provider, attempt.taskId, { signal: AbortSignal.timeout(this.ctx.confirmTimeout) })
      state = snap.state
    } catch (err) {
      // best effort: the state stays as last seen, unless the executor has no such task
      this.ctx.log('could not cancel subtask %s at %s: %e', attempt.taskId, attempt.provider, err)
      if (codeOf(err) === 'UNKNOWN_TASK') state = 'absent'
    }
    attempt.state = state
    await this.ctx.trySave(run, rec)
    this.ctx.emit(run, { type: 'canceled', runId: run.id, stepId: step.id, slot: attempt.slot, provider: attempt.provider, taskId: attempt.taskId, state, reason: errorOf(reason) })
  }
}
