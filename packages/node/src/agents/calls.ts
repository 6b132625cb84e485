/**
 * The call bridge of an external agent: a program's `call` messages become
 * tasks submitted, as its agent, to other agents of the network. A call for
 * a task the program serves is that task's `ctx.call` (the task service's:
 * a delegation narrowed from the task's chain, the same code as a JS
 * handler's); a call for no task goes under a token of the agent's own.
 * Answers go back as `call-result` / `call-error`. Spec:
 * `spec/node-agents.md`, "Calls".
 */
import { randomUUID } from 'node:crypto'
import { DeadlineExceededError, NoProviderError } from '@ioa/collab'
import { TASK_ID_PATTERN } from '@ioa/collab/wire'
import { isCapability, isDid } from '@ioa/interconnect'
import { anySignal } from 'any-signal'
import { AgentProtocolError } from '../errors.js'
import { MAX_ID, errorCode, errorMessage, isObject } from './protocol.js'
import type { Limits } from './limits.js'
import type { ExternalAgentComponents } from './types.js'
import type { Capability, SkillContext } from '@ioa/collab'
import type { Did, HostedAgent } from '@ioa/interconnect'
import type { Logger } from '@libp2p/interface'

/** How long the cancel of an abandoned subtask may take, ms */
const CANCEL_TIMEOUT = 5_000

/** A running task a call may be made for */
export interface CallParent {
  readonly id: string
  readonly ctx: SkillContext
  /** Aborted when the task ends: its pending calls stop */
  readonly calls: AbortController
}

/** What the bridge needs of the agent it serves */
export interface CallHost {
  /** The hosted agent when calls are accepted, else why not */
  accepting(): HostedAgent | string
  /** A running task of the program */
  task(id: string): CallParent | undefined
  /** Write a message to the program */
  send(msg: Record<string, unknown>): void
  /** Report a line to the agent's `onLog` */
  report(line: string): void
  /** Aborted when the program is gone or stopping */
  readonly lifetime: AbortSignal
}

interface CallRequest {
  skill: string
  input: unknown
  to?: Did
  constraints?: Record<string, unknown>
}

export class CallBridge {
  private readonly pending = new Set<string>()

  constructor (
    private readonly components: ExternalAgentComponents,
    private readonly host: CallHost,
    private readonly limits: Limits,
    private readonly log: Logger
  ) {}

  /** Handle a `call` message; throws AgentProtocolError for a malformed one (after a call-error when it has an id) */
  onCall (msg: Record<string, unknown>): void {
    const { id, skill, to, task, constraints } = msg
    if (typeof id !== 'string' || id.length === 0 || id.length > MAX_ID) throw new AgentProtocolError(`call.id must be a string of 1-${MAX_ID} characters`)
    if (this.pending.has(id)) throw new AgentProtocolError(`Call ${id} is already pending`)
    const invalid = (message: string): void => {
      this.host.send({ type: 'call-error', id, code: 'INVALID_CALL', message })
      throw new AgentProtocolError(`call ${id}: ${message}`)
    }
    if (!isCapability(skill)) return invalid('call.skill must be a capability name')
    if (to != null && !isDid(to)) return invalid('call.to must be a did:key')
    if (task != null && (typeof task !== 'string' || !TASK_ID_PATTERN.test(task))) return invalid('call.task must be a task id')
    if (constraints != null && !isObject(constraints)) return invalid('call.constraints must be an object')
    const agent = this.host.accepting()
    if (typeof agent === 'string') {
      this.host.send({ type: 'call-error', id, code: 'NOT_RUNNING', message: agent })
      return
    }
    if (this.pending.size >= this.limits.maxConcurrentCalls) {
      this.host.send({ type: 'call-error', id, code: 'TOO_MANY_CALLS', message: `${this.limits.maxConcurrentCalls} calls are pending already` })
      return
    }
    let parent: CallParent | undefined
    if (task != null) {
      parent = this.host.task(task)
      if (parent == null) {
        this.host.send({ type: 'call-error', id, code: 'UNKNOWN_TASK', message: `Task ${task} is not running` })
        return
      }
    }
    this.pending.add(id)
    void this.call(id, agent, { skill, input: msg.input ?? null, to: to ?? undefined, constraints: constraints ?? undefined }, parent)
      .catch((err) => {
        this.log.error('call %s failed: %e', id, err)
        this.host.report(`call ${id}: ${errorMessage(err)}`)
      })
      .finally(() => { this.pending.delete(id) })
  }

  private async call (id: string, agent: HostedAgent, req: CallRequest, parent?: CallParent): Promise<void> {
    const deadline = Math.min(Date.now() + this.limits.callTimeout, parent?.ctx.deadline ?? Infinity)
    // not AbortSignal.timeout: the call's deadline error is DEADLINE_EXCEEDED, not a DOMException
    const timeout = new AbortController()
    const timer = setTimeout(() => { timeout.abort(new DeadlineExceededError(`Call ${id} timed out`)) }, Math.max(0, deadline - Date.now()))
    timer.unref?.()
    const signal = anySignal([this.host.lifetime, parent?.calls.signal, timeout.signal])
    let submitted: { to: Did, taskId: string } | undefined
    try {
      if (parent != null) {
        // on behalf of the task: its context makes the narrowed delegation and the subtask
        this.log('call %s for task %s: %s', id, parent.id, req.skill)
        const output = await parent.ctx.call(req.to, req.skill, req.input, {
          signal, timeout: Math.max(1, deadline - Date.now()), ...(req.constraints != null ? { constraints: req.constraints } : {})
        })
        this.host.send({ type: 'call-result', id, output: output ?? null })
        return
      }
      const to = req.to ?? await this.provider(agent.did, req.skill, signal)
      signal.throwIfAborted()
      const cap: Capability = { skill: req.skill, ...(req.constraints != null ? { constraints: req.constraints } : {}) }
      const proofs = [await this.components.delegate(agent, { audience: to, capabilities: [cap], expiresAt: deadline })]
      signal.throwIfAborted()
      submitted = { to, taskId: randomUUID() }
      this.log('call %s: task %s to %s for %s', id, submitted.taskId, to, req.skill)
      const done = await this.components.tasks.submitAndWait(agent.identity, to, {
        skill: req.skill, input: req.input, proofs, deadline, taskId: submitted.taskId
      }, { signal })
      this.host.send({ type: 'call-result', id, output: done.result ?? null })
    } catch (err) {
      const reason = signal.aborted ? signal.reason : err
      this.log('call %s failed: %s', id, errorMessage(reason))
      this.host.send({ type: 'call-error', id, code: errorCode(reason, 'CALL_FAILED'), message: errorMessage(reason) })
      if (signal.aborted && submitted != null) {
        // stopping to listen does not stop the subtask: cancel it
        const { to, taskId } = submitted
        void this.components.tasks.cancel(to, taskId, { signal: AbortSignal.timeout(CANCEL_TIMEOUT) }).catch((e) => {
          this.log('cancel of subtask %s at %s failed: %e', taskId, to, e)
        })
      }
    } finally {
      clearTimeout(timer)
      signal.clear()
    }
  }

  /** The best ranked agent (not this one) that has `skill` */
  private async provider (self: Did, skill: string, signal: AbortSignal): Promise<Did> {
    const found = await this.components.discover({ capability: skill }, { signal, timeout: this.limits.discoveryTimeout })
    const best = found.find(d => d.card.id !== self && d.skills.some(s => s.id === skill))
    if (best == null) throw new NoProviderError(`No agent found for ${skill}`)
    return best.card.id
  }
}
