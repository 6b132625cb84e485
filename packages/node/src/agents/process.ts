/**
 * The supervisor of one external agent program: spawns it, reads its lines
 * (`ioa-agent/1`, JSON lines on stdio), waits for its hello, hosts and serves
 * its agent, hands tasks to it and their answers back, passes its calls to
 * the call bridge, and stops it (shutdown, SIGTERM, SIGKILL). Spec:
 * `spec/node-agents.md`.
 *
 * Over 500 lines on purpose: one state machine (starting, running, stopping,
 * exited) whose transitions read and write the same fields; the codec, line
 * splitter, limits and call bridge are already out in their own files.
 */
import { spawn } from 'node:child_process'
import { TASK_ID_PATTERN } from '@ioa/collab/wire'
import { CanceledError, ERROR_CODE_PATTERN } from '@ioa/transport'
import pDefer from 'p-defer'
import { raceSignal } from 'race-signal'
import {
  AgentExitedError, AgentProtocolError, AgentStartError, AgentStartTimeoutError, AgentTaskError, ExternalAgentError,
  LineTooLongError, TooManyTasksError
} from '../errors.js'
import { CallBridge } from './calls.js'
import { LineSplitter } from './line-splitter.js'
import { AGENT_PROTOCOL, AGENT_PROTOCOLS, AGENT_PROTOCOL_V2, MAX_EVENT, MAX_MESSAGE, cancelReason, errorMessage, isObject, lenient, parseHello, replacer, skillsOf, utf8 } from './protocol.js'
import { TeamBridge } from './teams.js'
import type { CallParent } from './calls.js'
import type { Limits } from './limits.js'
import type { Hello } from './protocol.js'
import type { ExternalAgent, ExternalAgentComponents, ExternalAgentInit } from './types.js'
import type { SkillHandler } from '@ioa/collab'
import type { HostedAgent } from '@ioa/interconnect'
import type { Logger } from '@libp2p/interface'
import type { ChildProcessWithoutNullStreams } from 'node:child_process'

/** Ended task ids remembered, so that late messages for them are ignored, not errors */
const RECENT_TASKS = 1_024
/** stderr lines kept for the message of a start failure */
const STDERR_TAIL = 8
/** How long stdout may stay open after the program exited (a child of it may hold it) */
const STDIO_GRACE = 1_000
/** How long a SIGKILLed program may take to be reaped */
const KILL_WAIT = 5_000

/** Programs still running, killed if this process exits without stopping them */
const children = new Set<ChildProcessWithoutNullStreams>()
let exitHook = false
function track (child: ChildProcessWithoutNullStreams): void {
  children.add(child)
  if (!exitHook) {
    exitHook = true
    process.once('exit', () => {
      for (const c of children) {
        try { c.kill('SIGKILL') } catch { /* already gone: nothing to kill, and no logger is left at exit */ }
      }
    })
  }
}

// ---- the agent ---------------------------------------------------------------

interface RunningTask extends CallParent {
  resolve(value: unknown): void
  reject(err: unknown): void
  detach(): void
}

export class ExternalAgentProcess implements ExternalAgent {
  private readonly node: ExternalAgentComponents
  private readonly logger: Logger
  private readonly bridge: CallBridge
  /** ioa-agent/2: invitations, the conversation and posts of the agent's teams */
  private teams?: TeamBridge
  private readonly init: ExternalAgentInit
  private readonly limits: Limits
  private readonly child: ChildProcessWithoutNullStreams
  private phase: 'starting' | 'running' | 'stopping' | 'exited' = 'starting'
  private hosted?: HostedAgent
  private served: string[] = []
  private readonly tasks = new Map<string, RunningTask>()
  private readonly ended = new Set<string>()
  private readonly lifetime = new AbortController()
  private errors = 0
  private readonly stderrTail: string[] = []
  private hello?: { resolve(h: Hello): void, reject(err: unknown): void }
  private killCause?: string
  /** Killed for a failure: later lines of the program are not read */
  private deaf = false
  /** The welcome was sent: calls are accepted */
  private welcomed = false
  private exitTimer?: ReturnType<typeof setTimeout>
  private readonly exit = pDefer<number | null>()
  private finalizing?: Promise<void>
  private stopping?: Promise<void>
  private readonly offSignal: () => void
  readonly exited: Promise<number | null>

  constructor (node: ExternalAgentComponents, init: ExternalAgentInit, limits: Limits) {
    this.node = node
    this.init = init
    this.limits = limits
    this.logger = node.logger.forComponent('ioa:node:agents')
    this.bridge = new CallBridge(node, {
      accepting: () => {
        if (!this.welcomed) return 'Calls are accepted after the welcome'
        if (this.hosted == null || this.phase === 'stopping') return 'The agent is stopping'
        return this.hosted
      },
      task: id => this.tasks.get(id),
      send: msg => { this.send(msg) },
      report: line => { this.log(line) },
      lifetime: this.lifetime.signal
    }, limits, this.logger)
    this.exited = this.exit.promise
    this.child = spawn(init.command[0], init.command.slice(1), {
      cwd: init.cwd,
      env: {
        ...process.env,
        ...init.env,
        IOA_AGENT_PROTOCOL: AGENT_PROTOCOL,
        IOA_AGENT_PROTOCOLS: AGENT_PROTOCOLS.join(' '),
        IOA_AGENT_OPTIONS: JSON.stringify(init.options ?? {})
      },
      stdio: ['pipe', 'pipe', 'pipe'],
      shell: false,
      windowsHide: true
    })
    track(this.child)
    const out = new LineSplitter(limits.maxLineBytes, line => { this.onLine(line) }, (head, size) => { this.onOversized(head, size) })
    const err = new LineSplitter(limits.maxLineBytes, line => { this.onStderr(lenient.decode(line)) }, (head, size) => {
      this.onStderr(`${lenient.decode(head.subarray(0, 512))}… [${size} bytes]`)
    })
    this.child.stdout.on('data', (chunk: Buffer) => { out.push(chunk) })
    this.child.stdout.on('end', () => { out.end() })
    this.child.stderr.on('data', (chunk: Buffer) => { err.push(chunk) })
    this.child.stderr.on('end', () => { err.end() })
    for (const s of [this.child.stdin, this.child.stdout, this.child.stderr]) {
      // EPIPE and the like: the exit handler reports the end
      s.on('error', (e: Error) => { this.logger.trace('stdio of %s: %s', init.command[0], e.message) })
    }
    this.child.on('error', (e: NodeJS.ErrnoException) => {
      if (this.child.pid == null) {
        // never started: no exit event follows
        this.hello?.reject(new AgentStartError(`Cannot start ${init.command[0]}: ${e.code ?? e.message}`, { cause: e }))
        void this.finalize(null, null)
      } else {
        this.logger.error('process %d: %e', this.child.pid, e)
        this.log(`process error: ${e.message}`)
      }
    })
    this.child.on('exit', (code, signal) => {
      // stdout may still hold the last lines: wait for it to close, a little
      this.exitTimer = setTimeout(() => { void this.finalize(code, signal) }, STDIO_GRACE)
      this.exitTimer.unref?.()
    })
    this.child.on('close', (code, signal) => { void this.finalize(code, signal) })

    const signal = init.signal
    const onAbort = (): void => {
      if (this.phase === 'starting') this.fail(new AgentStartError('Start aborted', { cause: signal?.reason }))
      else void this.stop()
    }
    signal?.addEventListener('abort', onAbort, { once: true })
    this.offSignal = () => { signal?.removeEventListener('abort', onAbort) }
  }

  get pid (): number | undefined {
    return this.child.pid
  }

  get agent (): HostedAgent {
    if (this.hosted == null) throw new AgentStartError('The agent is not hosted yet')
    return this.hosted
  }

  get skills (): readonly string[] {
    return this.served
  }

  get protocolErrors (): number {
    return this.errors
  }

  // ---- start -------------------------------------------------------------

  async start (): Promise<void> {
    try {
      if (this.init.signal?.aborted === true) throw new AgentStartError('Start aborted', { cause: this.init.signal.reason })
      const hello = await new Promise<Hello>((resolve, reject) => {
        const timer = setTimeout(() => {
          reject(new AgentStartTimeoutError(`No hello from ${this.init.command[0]} within ${this.limits.startTimeout} ms`))
        }, this.limits.startTimeout)
        this.hello = {
          resolve: (h) => { clearTimeout(timer); this.hello = undefined; resolve(h) },
          reject: (e) => { clearTimeout(timer); this.hello = undefined; reject(e) }
        }
      })
      const skills = skillsOf(this.init.card.skills ?? [], hello)
      const card = this.init.card
      const agent = await this.node.host({
        ...card,
        name: typeof card.name === 'string' && card.name !== '' ? card.name : (hello.name ?? 'external agent'),
        ...(card.description == null && hello.description != null ? { description: hello.description } : {}),
        skills
      })
      this.hosted = agent
      if (this.phase !== 'starting') throw this.exitError('during its start')
      this.welcomed = true
      if (hello.protocol === AGENT_PROTOCOL_V2) {
        this.teams = new TeamBridge(this.node, { did: agent.did, send: msg => { this.send(msg) }, input: this.child.stdin, report: line => { this.log(line) }, lifetime: this.lifetime.signal }, this.limits, this.init.inviteDefault, this.logger)
      }
      this.send({
        type: 'welcome',
        protocol: hello.protocol,
        agent: { did: agent.did, name: agent.card.card.name, domain: agent.card.card.domain },
        options: this.init.options ?? {}
      })
      const handlers: Record<string, SkillHandler> = {}
      for (const s of skills) handlers[s.id] = this.handler(s.id)
      this.served = skills.map(s => s.id)
      await this.node.serve(agent, handlers)
      if (this.phase !== 'starting') throw this.exitError('during its start')
      this.phase = 'running'
      this.teams?.start()
    } catch (err) {
      this.hello = undefined
      this.kill(`start failed: ${errorMessage(err)}`)
      await this.settled()
      // the program may have exited while its agent was being hosted
      if (this.hosted != null) {
        this.unserve()
        await this.node.interconnect.unhost(this.hosted.did).catch((e) => { this.logger.error('unhost %s after a failed start: %e', this.hosted?.did, e) })
      }
      this.logger('%s failed to start: %s', this.init.command[0], errorMessage(err))
      throw this.withStderr(err)
    }
  }

  private withStderr (err: unknown): unknown {
    if (this.stderrTail.length === 0 || !(err instanceof ExternalAgentError)) return err
    err.message += ` (stderr: ${this.stderrTail.join(' | ').slice(0, MAX_MESSAGE)})`
    return err
  }

  private exitError (when: string): Error {
    return new AgentExitedError(`The agent program exited ${when}${this.killCause != null ? ` (${this.killCause})` : ''}`)
  }

  // ---- input from the program ----------------------------------------------

  private log (line: string): void {
    try {
      this.init.onLog?.(line)
    } catch (err) {
      // a listener's failure is its own: logged, the agent goes on
      this.logger.error('onLog listener failed: %e', err)
    }
  }

  private onStderr (line: string): void {
    this.stderrTail.push(line.slice(0, 200))
    if (this.stderrTail.length > STDERR_TAIL) this.stderrTail.shift()
    this.log(line)
  }

  /** Count a protocol error, fail the task it concerns, kill the program at the limit */
  private protocolError (err: Error, taskId?: unknown): void {
    this.errors++
    this.logger('protocol error %d of %s: %s', this.errors, this.init.command[0], err.message)
    this.log(`protocol error: ${err.message}`)
    if (this.hello != null) {
      this.hello.reject(err)
      return
    }
    if (typeof taskId === 'string') this.endTask(taskId, err)
    if (this.errors >= this.limits.maxProtocolErrors) this.fail(new AgentProtocolError(`${this.errors} protocol errors`))
  }

  private onOversized (head: Buffer, size: number): void {
    if (this.phase === 'exited' || this.deaf) return
    const m = /"task"\s*:\s*"([A-Za-z0-9._:-]{1,128})"/.exec(lenient.decode(head))
    this.protocolError(new LineTooLongError(`A line of ${size} bytes exceeds maxLineBytes (${this.limits.maxLineBytes})`), m?.[1])
  }

  private onLine (bytes: Buffer): void {
    if (this.phase === 'exited' || this.deaf) return
    let text: string
    try {
      text = utf8.decode(bytes)
    } catch {
      // the decoder's error says no more than this
      this.protocolError(new AgentProtocolError('A line is not valid UTF-8'))
      return
    }
    if (text.trim() === '') return
    let msg: unknown
    try {
      msg = JSON.parse(text)
    } catch {
      // the parser's error is replaced by the protocol error it means
      this.protocolError(new AgentProtocolError(`Not JSON: ${text.slice(0, 80)}`))
      return
    }
    if (!isObject(msg)) {
      this.protocolError(new AgentProtocolError('A line is not a JSON object'))
      return
    }
    try {
      this.onMessage(msg)
    } catch (err) {
      // the task a bad message is about fails (a call's `task` is its parent: the call-error tells the program)
      const about = msg.type !== 'call' ? msg.task : undefined
      this.protocolError(err instanceof Error ? err : new AgentProtocolError(String(err)), about)
    }
  }

  private onMessage (msg: Record<string, unknown>): void {
    if (this.hello != null) {
      if (msg.type !== 'hello') throw new AgentProtocolError(`The first message must be a hello, not ${JSON.stringify(msg.type)?.slice(0, 40)}`)
      this.hello.resolve(parseHello(msg))
      return
    }
    switch (msg.type) {
      case 'progress':
      case 'artifact':
      case 'result':
      case 'error':
        this.onTaskMessage(msg)
        return
      case 'call':
        this.bridge.onCall(msg)
        return
      case 'log': {
        if (typeof msg.event !== 'string' || msg.event.length === 0 || msg.event.length > MAX_EVENT) {
          throw new AgentProtocolError(`log.event must be a string of 1-${MAX_EVENT} characters`)
        }
        const data = msg.data ?? {}
        if (!isObject(data)) throw new AgentProtocolError('log.data must be an object')
        try {
          this.init.onEvent?.(msg.event, data)
        } catch (err) {
          // a listener's failure is its own: logged, the agent goes on
          this.logger.error('onEvent listener failed: %e', err)
        }
        return
      }
      case 'team-answer':
      case 'team-post':
      case 'team-form':
        if (this.teams == null) throw new AgentProtocolError(`${msg.type} is a message of ${AGENT_PROTOCOL_V2}`)
        this.teams.onMessage(msg)
        return
      case 'hello':
        throw new AgentProtocolError('A second hello')
      default:
        throw new AgentProtocolError(`Unknown message type ${JSON.stringify(msg.type)?.slice(0, 40)}`)
    }
  }

  private onTaskMessage (msg: Record<string, unknown>): void {
    const id = msg.task
    if (typeof id !== 'string' || !TASK_ID_PATTERN.test(id)) throw new AgentProtocolError(`${String(msg.type)}.task must be a task id`)
    const task = this.tasks.get(id)
    if (task == null) {
      // a message crossing a cancel is normal; an id never given is not
      if (this.ended.has(id)) return
      throw new AgentProtocolError(`Unknown task ${id}`)
    }
    switch (msg.type) {
      case 'progress':
        if (!('message' in msg)) throw new AgentProtocolError('progress needs a message')
        this.forward(task, () => { task.ctx.progress(msg.message) })
        return
      case 'artifact':
        if (!('artifact' in msg)) throw new AgentProtocolError('artifact needs an artifact')
        this.forward(task, () => { task.ctx.artifact(msg.artifact) })
        return
      case 'result':
        this.endTask(id, undefined, msg.output ?? null)
        return
      default: {
        const { code, message } = msg
        if (typeof code !== 'string' || !ERROR_CODE_PATTERN.test(code)) throw new AgentProtocolError('error.code must be UPPER_SNAKE_CASE (1-64 characters)')
        if (message != null && typeof message !== 'string') throw new AgentProtocolError('error.message must be a string')
        this.endTask(id, new AgentTaskError(code, (message ?? code).slice(0, MAX_MESSAGE)))
      }
    }
  }

  /** Pass progress or an artifact on; one the task service refuses (too large) fails the task */
  private forward (task: RunningTask, fn: () => void): void {
    try {
      fn()
    } catch (err) {
      this.log(`task ${task.id}: ${errorMessage(err)}`)
      this.endTask(task.id, err)
    }
  }

  // ---- tasks -----------------------------------------------------------------

  private handler (skill: string): SkillHandler {
    return async (input, ctx) => {
      if (this.phase !== 'running') throw new AgentExitedError('The agent program is not running')
      if (this.tasks.size >= this.limits.maxConcurrentTasks) {
        throw new TooManyTasksError(`The agent runs ${this.limits.maxConcurrentTasks} tasks already`)
      }
      const id = ctx.task.id
      if (this.tasks.has(id)) throw new AgentProtocolError(`Task ${id} is already running`)
      return await new Promise((resolve, reject) => {
        const onAbort = (): void => {
          if (!this.tasks.has(id)) return
          this.endTask(id, ctx.signal.reason ?? new CanceledError('Task canceled'))
          this.send({ type: 'cancel', task: id, reason: cancelReason(ctx.signal.reason) })
        }
        this.tasks.set(id, {
          id,
          ctx,
          calls: new AbortController(),
          resolve,
          reject,
          detach: () => { ctx.signal.removeEventListener('abort', onAbort) }
        })
        ctx.signal.addEventListener('abort', onAbort, { once: true })
        if (ctx.signal.aborted) {
          onAbort()
          return
        }
        try {
          this.send({
            type: 'task',
            task: id,
            skill,
            input: input ?? null,
            caller: ctx.caller,
            root: ctx.chain.root,
            deadline: ctx.deadline ?? null,
            capability: ctx.capability,
            ...this.teamOf(id)
          }, true)
        } catch (err) {
          this.endTask(id, err)
        }
      })
    }
  }

  /** ioa-agent/2: the `team` field of a task that an `assign` entry of one of the agent's teams names */
  private teamOf (id: string): { team?: unknown } {
    const team = this.teams?.taskTeam(id)
    return team != null ? { team } : {}
  }

  /** End a running task with an error, or with `output` when `err` is undefined; later ends do nothing */
  private endTask (id: string, err: unknown, output?: unknown): void {
    const task = this.tasks.get(id)
    if (task == null) return
    this.tasks.delete(id)
    this.ended.add(id)
    if (this.ended.size > RECENT_TASKS) this.ended.delete(this.ended.values().next().value as string)
    task.detach()
    task.calls.abort(new CanceledError(`Task ${id} ended`))
    if (err === undefined) task.resolve(output)
    else task.reject(err)
  }

  // ---- output to the program ----------------------------------------------------

  /**
   * Write one message. Throws LineTooLongError (when `strict`; otherwise the
   * message is dropped and logged) for a line over maxLineBytes; kills the
   * program when it leaves more than maxPendingWriteBytes unread.
   */
  private send (msg: Record<string, unknown>, strict = false): void {
    if (this.phase === 'exited' || !this.child.stdin.writable) {
      if (strict) throw this.exitError('before the message was sent')
      return
    }
    let line: string
    try {
      line = JSON.stringify(msg, replacer)
    } catch (err) {
      if (strict) throw new AgentProtocolError(`Cannot encode the ${String(msg.type)} message as JSON: ${errorMessage(err)}`)
      this.logger.error('cannot encode the %s message as JSON: %e', msg.type, err)
      return
    }
    const size = Buffer.byteLength(line)
    if (size > this.limits.maxLineBytes) {
      const err = new LineTooLongError(`The ${String(msg.type)} message (${size} bytes) exceeds maxLineBytes (${this.limits.maxLineBytes})`)
      if (strict) throw err
      this.log(err.message)
      if (msg.type === 'call-result') this.send({ type: 'call-error', id: msg.id, code: err.code, message: err.message })
      // ioa-agent/2: the program learns of an entry too large for a line (spec 16.3)
      if (msg.type === 'team-message') this.send({ ...msg, body: null, cut: size })
      return
    }
    if (this.child.stdin.writableLength + size > this.limits.maxPendingWriteBytes) {
      this.fail(new AgentProtocolError(`The program left more than ${this.limits.maxPendingWriteBytes} bytes of its input unread`))
      if (strict) throw this.exitError('with its input unread')
      return
    }
    this.child.stdin.write(line + '\n')
  }

  // ---- the end -------------------------------------------------------------------

  /** Kill the program for a failure (no grace) */
  private fail (err: Error): void {
    this.deaf = true
    this.hello?.reject(err)
    this.kill(err.message)
  }

  private kill (cause: string): void {
    if (this.phase === 'exited') return
    this.killCause ??= cause
    if (this.child.exitCode == null && this.child.signalCode == null) {
      try { this.child.kill('SIGKILL') } catch (err) { this.logger.trace('SIGKILL: %e', err) /* already gone */ }
    }
  }

  /** Resolves once the program is gone and its agent unhosted (bounded: a kill that is not reaped still settles) */
  private async settled (): Promise<void> {
    if (this.finalizing != null) {
      await this.finalizing
      return
    }
    if (!await this.waitExit(KILL_WAIT)) this.logger('%s was not reaped within %d ms', this.init.command[0], KILL_WAIT)
    await (this.finalizing ?? this.finalize(null, null))
  }

  private async waitExit (ms: number): Promise<boolean> {
    // AbortSignal.timeout's timer is unref'd: a wait cut short keeps no process alive
    return await raceSignal(this.exited, AbortSignal.timeout(ms)).then(() => true, () => false)
  }

  async stop (): Promise<void> {
    this.stopping ??= this.doStop()
    await this.stopping
  }

  private async doStop (): Promise<void> {
    if (this.phase === 'exited' || this.phase === 'starting') {
      if (this.phase === 'starting') this.kill('stopped during its start')
      await this.settled()
      return
    }
    this.phase = 'stopping'
    this.teams?.stop()
    this.unserve()
    for (const id of [...this.tasks.keys()]) {
      this.endTask(id, new AgentExitedError('The agent was stopped'))
      this.send({ type: 'cancel', task: id, reason: 'shutdown' })
    }
    this.lifetime.abort(new AgentExitedError('The agent was stopped'))
    this.send({ type: 'shutdown' })
    this.child.stdin.end()
    if (!await this.waitExit(this.limits.stopGrace)) {
      this.killCause ??= 'did not exit after shutdown'
      try { this.child.kill('SIGTERM') } catch (err) { this.logger.trace('SIGTERM: %e', err) /* already gone */ }
      if (!await this.waitExit(this.limits.stopGrace)) this.kill('did not exit after SIGTERM')
    }
    await this.settled()
  }

  private unserve (): void {
    if (this.hosted == null) return
    for (const skill of this.served) this.node.tasks.unserve(this.hosted.did, skill)
  }

  /** The program is gone: fail its tasks and calls, unserve and unhost its agent, resolve `exited` */
  private async finalize (code: number | null, signal: NodeJS.Signals | null): Promise<void> {
    this.finalizing ??= (async () => {
      const starting = this.phase === 'starting'
      this.phase = 'exited'
      clearTimeout(this.exitTimer)
      children.delete(this.child)
      this.offSignal()
      this.child.stdin.destroy()
      this.child.stdout.destroy()
      this.child.stderr.destroy()
      const how = code != null ? `with code ${code}` : signal != null ? `on ${signal}` : ''
      const err = this.exitError(how)
      this.hello?.reject(starting ? new AgentStartError(`The agent program exited ${how} before its hello`) : err)
      this.lifetime.abort(err)
      this.teams?.stop()
      for (const id of [...this.tasks.keys()]) this.endTask(id, err)
      this.unserve()
      if (this.hosted != null) await this.node.interconnect.unhost(this.hosted.did).catch((e) => { this.logger.error('unhost %s: %e', this.hosted?.did, e) })
      this.logger('%s exited %s', this.init.command[0], how)
      this.exit.resolve(code)
    })()
    await this.finalizing
  }
}
