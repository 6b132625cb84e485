/**
 * The executor's per-task state: a served skill, a subscriber's bounded
 * event queue, a live task, and the context handed to a skill handler.
 */
import { BudgetExceededError } from '../errors.js'
import { isTerminal } from './model.js'
import type { CallOptions, SkillContext, SkillHandler, TaskEvent } from './api.js'
import type { Capability, Token, VerifiedChain } from '../auth/delegation.js'
import type { Policy } from '../auth/policy.js'
import type { TaskRecord, TaskSnapshot } from './model.js'
import type { TraceContext } from './wire-v2.js'
import type { IoaSpan } from '../tracing.js'
import type { ToolCallOptions } from '../tool-span.js'
import type { Did } from '@ioa/interconnect'

/** Events of one subscriber queued before the oldest non-terminal ones are dropped */
const MAX_QUEUED_EVENTS = 64

/**
 * How many progress messages had been added to a task when a snapshot of it
 * was made (set by the executor for each snapshot it makes): a 2.0.0 delta
 * names the messages added since the previous event, also when the oldest
 * were dropped
 */
export const messageCounts = new WeakMap<TaskSnapshot, number>()

/** The key of a task in the executor's and the requester's maps */
export function taskKey (agent: Did, id: string): string {
  return `${agent}\n${id}`
}

export interface Served {
  handler: SkillHandler
  policy?: Policy
  /** Requests must carry their own signature (envelope mode, spec 2.6) */
  requireEnvelope?: boolean
}

/**
 * The signal of a stream, or what makes it when it is first needed (the
 * transport makes a request's signal on first use: a stream answered at once
 * never needs one)
 */
export type SignalSource = AbortSignal | (() => AbortSignal)

export class Subscriber {
  private readonly queue: TaskEvent[] = []
  private wake?: () => void

  push (e: TaskEvent): void {
    this.queue.push(e)
    if (this.queue.length > MAX_QUEUED_EVENTS) {
      // a slow reader: drop the oldest non-terminal event (later statuses carry the full snapshot)
      const i = this.queue.findIndex(x => !(x.type === 'status' && isTerminal(x.task.state)))
      if (i >= 0) this.queue.splice(i, 1)
    }
    this.wake?.()
  }

  /** The next event, or undefined after `timeout` ms without one */
  async next (timeout: number, source: SignalSource): Promise<TaskEvent | undefined> {
    if (this.queue.length > 0) return this.queue.shift()
    const signal = typeof source === 'function' ? source() : source
    signal.throwIfAborted()
    await new Promise<void>((resolve, reject) => {
      const done = (): void => {
        clearTimeout(t)
        signal.removeEventListener('abort', onAbort)
        this.wake = undefined
      }
      const onAbort = (): void => { done(); reject(signal.reason) }
      const t = setTimeout(() => { done(); resolve() }, timeout)
      this.wake = () => { done(); resolve() }
      signal.addEventListener('abort', onAbort, { once: true })
    })
    return this.queue.shift()
  }
}

export interface Live {
  record: TaskRecord
  /**
   * Aborted when the task ends; made on first use of the handler's
   * `ctx.signal` (a handler that never reads it costs no controller, and the
   * task's end no error with a stack)
   */
  controller?: AbortController
  subscribers: Set<Subscriber>
  approvalTimer?: ReturnType<typeof setTimeout>
  /** what the handler needs, kept from acceptance until it starts (auth-required) */
  pending?: { input: unknown, chain: VerifiedChain, capability: Capability, proofs: Token[], served: Served, budget?: number }
  writing: Promise<void>
  saveQueued: boolean
  /** Gives the task's fair-share slots back (once) */
  release: () => void
  /** Runs while no stream follows the task */
  abandonTimer?: ReturnType<typeof setTimeout>
  /** Until when the task's envelope could be replayed (kept at least that long) */
  keepUntil: number
  /** When the handler started (absent while it has not) */
  startedAt?: number
  /** Progress messages ever added (the snapshot keeps the newest) */
  messagesAdded: number
  /** The trace context of the submit that created the task (2.0.0) */
  trace?: TraceContext
  /** The task's `invoke_agent` SERVER span (ended when the task ends) */
  span?: IoaSpan
}

export class HandlerContext implements SkillContext {
  readonly task: TaskSnapshot
  readonly caller: Did
  readonly chain: VerifiedChain
  readonly capability: Capability
  readonly deadline?: number
  readonly trace?: TraceContext
  private readonly signalOf: () => AbortSignal
  private remaining?: number
  private readonly onProgress: (m: unknown) => void
  private readonly onArtifact: (a: unknown) => void
  private readonly onCall: (ctx: SkillContext, to: Did | undefined, skill: string, input: unknown, options?: CallOptions) => Promise<unknown>
  private readonly onTool: <T>(name: string, fn: () => T | Promise<T>, options?: ToolCallOptions<T>) => Promise<T>

  constructor (init: {
    task: TaskSnapshot, caller: Did, chain: VerifiedChain, capability: Capability, signal: () => AbortSignal,
    deadline?: number, budget?: number, trace?: TraceContext, progress(m: unknown): void, artifact(a: unknown): void
    call(ctx: SkillContext, to: Did | undefined, skill: string, input: unknown, options?: CallOptions): Promise<unknown>
    tool<T>(name: string, fn: () => T | Promise<T>, options?: ToolCallOptions<T>): Promise<T>
  }) {
    this.task = init.task
    this.caller = init.caller
    this.chain = init.chain
    this.capability = init.capability
    this.signalOf = init.signal
    this.deadline = init.deadline
    if (init.trace != null) this.trace = init.trace
    this.remaining = init.budget
    this.onProgress = init.progress
    this.onArtifact = init.artifact
    this.onCall = init.call
    this.onTool = init.tool
  }

  /** Aborted when the task ends (made on first use) */
  get signal (): AbortSignal {
    return this.signalOf()
  }

  get budget (): number | undefined {
    return this.remaining
  }

  spend (amount: number): void {
    if (typeof amount !== 'number' || !Number.isFinite(amount) || amount < 0) throw new RangeError('amount must be a non-negative number')
    if (this.remaining == null) return
    if (amount > this.remaining) throw new BudgetExceededError(`Spending ${amount} exceeds the remaining budget ${this.remaining}`)
    this.remaining -= amount
  }

  progress (message: unknown): void {
    this.onProgress(message)
  }

  artifact (artifact: unknown): void {
    this.onArtifact(artifact)
  }

  async call (to: Did | undefined, skill: string, input: unknown, options?: CallOptions): Promise<unknown> {
    return this.onCall(this, to, skill, input, options)
  }

  async tool<T> (name: string, fn: () => T | Promise<T>, options?: ToolCallOptions<T>): Promise<T> {
    return await this.onTool(name, fn, options)
  }
}
