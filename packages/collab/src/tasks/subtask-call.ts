/**
 * `ctx.call`: a skill handler calls another agent on behalf of its task. The
 * executing agent delegates to the callee a token narrowed from the task's
 * chain (the capability of the chain that covers the skill, or tighter
 * constraints the caller asks for; valid no longer than the chain and the
 * call), submits the subtask under it (deadline within the task's; a budget
 * only when asked for, out of the task's), waits for its result, and cancels it when the call is abandoned.
 * External agents' `call` messages go through the same code (their bridge
 * calls `ctx.call`).
 */
import { isCapability, isDid } from '@ioa/interconnect'
import { capabilityCovers, capabilityFor, delegate } from '../auth/delegation.js'
import { DeadlineExceededError, NoProviderError, UnauthorizedError } from '../errors.js'
import { linked } from './signals.js'
import type { CallOptions, SkillContext, TaskService, TaskServiceComponents } from './api.js'
import type { Capability } from '../auth/delegation.js'
import type { Did } from '@ioa/interconnect'
import type { Logger } from '@libp2p/interface'

/** Longest a call waits for its subtask when neither the task's deadline nor `options.timeout` is nearer, ms */
export const DEFAULT_CALL_TIMEOUT = 60_000
/** How long the cancel of an abandoned subtask may take, ms */
const CANCEL_TIMEOUT = 5_000

let calls = 0

/** Makes the calls of the handlers of one task service */
export class SubtaskCaller {
  constructor (
    private readonly components: Pick<TaskServiceComponents, 'interconnect'>,
    private readonly tasks: Pick<TaskService, 'submitAndWait' | 'cancel'>,
    private readonly log: Logger
  ) {}

  /** Run `skill` at `to` (or the best ranked other agent offering it) for the task of `ctx`, run by `agent` */
  async call (agent: Did, ctx: SkillContext, to: Did | undefined, skill: string, input: unknown, options: CallOptions = {}): Promise<unknown> {
    if (!isCapability(skill)) throw new TypeError('skill must be a capability name')
    if (to != null && !isDid(to)) throw new TypeError('to must be a did:key')
    const timeout = options.timeout ?? DEFAULT_CALL_TIMEOUT
    if (!Number.isFinite(timeout) || timeout <= 0) throw new RangeError('timeout must be a positive number of ms')
    const self = this.components.interconnect.agents().find(a => a.did === agent)
    if (self == null) throw new UnauthorizedError(`Agent ${agent} is not hosted here: it cannot delegate`)
    const deadline = Math.min(Date.now() + timeout, ctx.deadline ?? Infinity)
    const id = `call-${++calls}`
    // not AbortSignal.timeout: the call's deadline error is DEADLINE_EXCEEDED, not a DOMException
    const expiry = new AbortController()
    const timer = setTimeout(() => { expiry.abort(new DeadlineExceededError(`Call of ${skill} timed out`)) }, Math.max(0, deadline - Date.now()))
    timer.unref?.()
    const { signal, done: unlink } = linked(ctx.signal, options.signal, expiry.signal)
    let submitted: { to: Did, taskId: string } | undefined
    try {
      const callee = to ?? await this.provider(agent, skill, signal)
      signal.throwIfAborted()
      const cap = narrowed(ctx, agent, skill, options.constraints)
      const token = await delegate(self.identity, {
        audience: callee,
        capabilities: [cap],
        expiresAt: Math.min(ctx.chain.expiresAt, deadline),
        proofs: [ctx.chain.path[0]]
      }, { signal })
      submitted = { to: callee, taskId: crypto.randomUUID() }
      this.log('%s of task %s: subtask %s to %s for %s', id, ctx.task.id, submitted.taskId, callee, skill)
      // a budget is handed on only when asked for (taken out of the task's)
      const done = await this.tasks.submitAndWait(self.identity, callee, {
        skill, input: input ?? null, proofs: [token, ...ctx.chain.path], deadline, taskId: submitted.taskId,
        ...(options.budget != null ? { budget: options.budget } : {})
      }, { signal, ...(options.budget != null ? { parent: ctx } : {}), ...(ctx.trace != null ? { trace: ctx.trace } : {}) })
      return done.result ?? null
    } catch (err) {
      const reason = signal.aborted ? signal.reason : err
      this.log('%s of task %s failed: %s', id, ctx.task.id, (reason as Error)?.message ?? reason)
      if (signal.aborted && submitted != null) {
        // stopping to listen does not stop the subtask: cancel it
        const { to: at, taskId } = submitted
        void this.tasks.cancel(at, taskId, { signal: AbortSignal.timeout(CANCEL_TIMEOUT) }).catch((e: unknown) => {
          this.log('cancel of subtask %s at %s failed: %e', taskId, at, e)
        })
      }
      throw reason
    } finally {
      clearTimeout(timer)
      unlink()
    }
  }

  /** The best ranked agent (not `self`) that has `skill` */
  private async provider (self: Did, skill: string, signal: AbortSignal): Promise<Did> {
    const discover = this.components.interconnect.discoverAll
    if (discover == null) throw new NoProviderError(`No agent named for ${skill}, and no discovery here`)
    const found = await discover.call(this.components.interconnect, { capability: skill }, { signal })
    const best = found.find(d => d.card.id !== self && d.skills.some(s => s.id === skill))
    if (best == null) throw new NoProviderError(`No agent found for ${skill}`)
    return best.card.id
  }
}

/**
 * The capability a call delegates: exactly `skill`, with the constraints of
 * the task's chain for it or the tighter ones asked for. Throws
 * `UnauthorizedError` when the task's chain cannot be handed on.
 */
function narrowed (ctx: SkillContext, agent: Did, skill: string, constraints?: Record<string, unknown>): Capability {
  const chain = ctx.chain
  if (chain.audience !== agent) {
    throw new UnauthorizedError(`Task ${ctx.task.id} was not delegated to this agent (its chain grants ${chain.audience}), so it cannot delegate further`)
  }
  const granted = capabilityFor(chain, skill)
  if (granted == null) throw new UnauthorizedError(`The chain of task ${ctx.task.id} does not cover ${skill}`)
  const wanted = constraints ?? granted.constraints
  const cap: Capability = { skill, ...(wanted != null ? { constraints: wanted } : {}) }
  if (!capabilityCovers(granted, cap)) throw new UnauthorizedError(`The constraints asked for ${skill} are wider than task ${ctx.task.id}'s`)
  return cap
}
