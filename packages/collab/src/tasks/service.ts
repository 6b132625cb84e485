/**
 * The task protocol `/ioa/task/1.0.0`: an agent asks another agent (found
 * through the interconnect) to run a skill, under a delegation chain, in a
 * signed envelope; the executor verifies, applies policy, runs the skill
 * handler and streams the task's states back, with heartbeats that renew the
 * requester's lease on the task. Spec: `spec/collab-tasks.md`.
 *
 * This file wires the two sides into one service: the executor
 * (executor.ts) and the requester (requester.ts, lease-watch.ts), over the
 * wire codec of wire.ts; the public types are in api.ts.
 */
import { TaskExecutor } from './executor.js'
import { TaskRequester } from './requester.js'
import { SubtaskCaller } from './subtask-call.js'
import type {
  ServeOptions, SkillHandler, SubmitOptions, TaskEvent, TaskRequest, TaskService, TaskServiceComponents, TaskServiceInit
} from './api.js'
import type { Approval } from '../auth/policy.js'
import type { TaskSnapshot } from './model.js'
import type { TraceContext } from './wire-v2.js'
import type { Did, Identity, Interconnect } from '@ioa/interconnect'

export { TASK_PROTOCOL, MAX_KEY_LENGTH, checkSubmit, eventTaskId, parseEvent, parseTaskRef } from './wire.js'
export { TASK_PROTOCOL_V2 } from './wire-v2.js'
export type { TraceContext } from './wire-v2.js'
export { LeaseLapsedError } from './lease-watch.js'
export { taskFailure } from './requester.js'
export type {
  AcceptedSubmit, TaskEvent, TaskRequest, TaskScope, SubmitOptions, SkillContext, SkillHandler, ServeOptions, TaskServiceInit, TaskService,
  TaskServiceComponents
} from './api.js'

class DefaultTaskService implements TaskService {
  private readonly executor: TaskExecutor
  private readonly requester: TaskRequester

  constructor (components: TaskServiceComponents, init: TaskServiceInit = {}) {
    this.executor = new TaskExecutor(components, init)
    this.requester = new TaskRequester(components, this.executor, init)
    this.executor.subtasks = new SubtaskCaller(components, this.requester, components.logger.forComponent('ioa:collab:call'))
  }

  async start (): Promise<void> {
    await this.executor.start()
  }

  async stop (): Promise<void> {
    await this.executor.stop()
  }

  async serve (agentDid: Did, skill: string, handler: SkillHandler, options: ServeOptions = {}): Promise<void> {
    await this.executor.serve(agentDid, skill, handler, options)
  }

  unserve (agentDid: Did, skill: string): void {
    this.executor.unserve(agentDid, skill)
  }

  submit (from: Did | Identity, to: Did, request: TaskRequest, options: SubmitOptions = {}): AsyncGenerator<TaskEvent, void, undefined> {
    return this.requester.submit(from, to, request, options)
  }

  async submitAndWait (from: Did | Identity, to: Did, request: TaskRequest, options: SubmitOptions & { onEvent?: (event: TaskEvent) => void } = {}): Promise<TaskSnapshot> {
    return await this.requester.submitAndWait(from, to, request, options)
  }

  async get (to: Did, taskId: string, options: { signal?: AbortSignal } = {}): Promise<TaskSnapshot> {
    return await this.requester.get(to, taskId, options)
  }

  async cancel (to: Did, taskId: string, options: { signal?: AbortSignal } = {}): Promise<TaskSnapshot> {
    return await this.requester.cancel(to, taskId, options)
  }

  resubscribe (to: Did, taskId: string, options: { signal?: AbortSignal, trace?: TraceContext } = {}): AsyncGenerator<TaskEvent, void, undefined> {
    return this.requester.resubscribe(to, taskId, options)
  }

  async approve (to: Did, taskId: string, approval: Approval, options: { signal?: AbortSignal } = {}): Promise<TaskSnapshot> {
    return await this.requester.approve(to, taskId, approval, options)
  }
}

/**
 * Create the task service of an interconnect: the executor side (serve skills
 * on `/ioa/task/1.0.0`) and the requester side (submit tasks to agents found
 * through the interconnect). The protocol is registered by the first `serve`
 * or by `start()`.
 */
export function createTaskService (ic: Interconnect, init: TaskServiceInit = {}): TaskService {
  return taskService(init)({
    peerId: ic.node.peerId,
    logger: ic.node.logger,
    messaging: ic.node.services.messaging,
    interconnect: ic,
    protocolsOf: async (peer) => {
      try {
        return (await ic.node.peerStore.get(peer)).protocols
      } catch {
        // not in the peer store yet: unknown (the requester tries 2.0.0 first)
        return undefined
      }
    }
  })
}

/**
 * The task service over the components it needs (`TaskServiceComponents`),
 * in the form of a libp2p service factory: `taskService(init)(components)`
 */
export function taskService (init: TaskServiceInit = {}): (components: TaskServiceComponents) => TaskService {
  return (components) => new DefaultTaskService(components, init)
}
