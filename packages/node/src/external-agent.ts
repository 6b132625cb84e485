/**
 * External agents: programs in any language that join a node over the local
 * agent protocol `ioa-agent/1` (JSON lines on stdio). The node hosts the
 * agent (its key, its signed card, its announcements) and serves its skills
 * through the task protocol; each task is handed to the program and its
 * answer handed back. Spec: `spec/node-agents.md`.
 */
import { spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { DeadlineExceededError, NoProviderError, TASK_ID_PATTERN, UnauthorizedError, capabilityCovers, capabilityFor } from '@ioa/collab'
import { CARD_LIMITS, SkillSchema, isCapability, isDid } from '@ioa/interconnect'
import { CanceledError, CodedError, ERROR_CODE_PATTERN, ErrorFamily } from '@ioa/transport'
import type { HostAgentOptions, IoaNode } from './ioa-node.js'
import type { Capability, SkillContext, SkillHandler, Token } from '@ioa/collab'
import type { Did, HostedAgent, SkillInit } from '@ioa/interconnect'
import type { ChildProcessWithoutNullStreams } from 'node:child_process'

/** The protocol name programs say in their hello */
export const AGENT_PROTOCOL = 'ioa-agent/1'

/** Default limits of an external agent (`spec/node-agents.md`, "Limits") */
export const EXTERNAL_AGENT_DEFAULTS = Object.freeze({
  maxLineBytes: 1_048_576,
  startTimeout: 10_000,
  maxConcurrentTasks: 16,
  stopGrace: 2_000,
  maxProtocolErrors: 10,
  maxConcurrentCalls: 16,
  callTimeout: 300_000,
  discoveryTimeout: 10_000,
  maxPendingWriteBytes: 16_777_216
})

/** Longest call id, event name and error message (characters) */
const MAX_ID = 128
const MAX_EVENT = 64
const MAX_MESSAGE = 1_024
/** Bytes of an oversized line looked at for its `"task"` */
const HEAD_BYTES = 4_096
/** Ended task ids remembered, so that late messages for them are ignored, not errors */
const RECENT_TASKS = 1_024
/** stderr lines kept for the message of a start failure */
const STDERR_TAIL = 8
/** How long stdout may stay open after the program exited (a child of it may hold it) */
const STDIO_GRACE = 1_000
/** How long a SIGKILLed program may take to be reaped */
const KILL_WAIT = 5_000

// ---- errors ----------------------------------------------------------------

/** Base class of the external agent errors; `code` is stable */
export class ExternalAgentError extends CodedError {
  static override name = 'ExternalAgentError'
}

const family = new ErrorFamily<ExternalAgentError>(ExternalAgentError)

/** The program could not be started, or exited before its hello */
export const AgentStartError = family.define('AgentStartError', 'AGENT_START_FAILED', 'The agent program failed to start')
/** No hello within `startTimeout` */
export const AgentStartTimeoutError = family.define('AgentStartTimeoutError', 'AGENT_START_TIMEOUT', 'The agent program sent no hello in time')
/** The hello names another protocol (version) */
export const UnsupportedProtocolError = family.define('UnsupportedProtocolError', 'UNSUPPORTED_PROTOCOL', 'Unsupported agent protocol')
/** The hello lacks a skill the configuration gives the agent */
export const SkillMismatchError = family.define('SkillMismatchError', 'SKILL_MISMATCH', 'The program does not serve a configured skill')
/** A line of the program is not a valid protocol message */
export const AgentProtocolError = family.define('AgentProtocolError', 'AGENT_PROTOCOL_ERROR', 'Agent protocol error')
/** A line is longer than `maxLineBytes` */
export const LineTooLongError = family.define('LineTooLongError', 'LINE_TOO_LONG', 'Line too long')
/** The program exited (or was stopped) while the task ran */
export const AgentExitedError = family.define('AgentExitedError', 'AGENT_EXITED', 'The agent program exited')
/** More than `maxConcurrentTasks` tasks at once */
export const TooManyTasksError = family.define('TooManyTasksError', 'TOO_MANY_TASKS', 'Too many concurrent tasks')

/** The error a program reported for a task (`{"type":"error"}`): its code is the program's */
export class AgentTaskError extends ExternalAgentError {
  static override name = 'AgentTaskError'
}

// ---- public types ----------------------------------------------------------

export interface ExternalAgentInit {
  /** The program and its arguments (run without a shell) */
  command: string[]
  /** @default the current directory */
  cwd?: string
  /** Extra environment variables of the program (added to the node's) @default {} */
  env?: Record<string, string>
  /**
   * The agent's card. Skills may be left empty: the program's hello names
   * them. When both name skills, the program must serve every configured one.
   */
  card: Omit<HostAgentOptions, 'handlers' | 'inbox'>
  /** Passed to the program as JSON in IOA_AGENT_OPTIONS and in the welcome message @default {} */
  options?: Record<string, unknown>
  /** The program's stderr lines, and the protocol errors of its stdout (prefixed `protocol error: `) */
  onLog?: (line: string) => void
  /** Events the program reports (`log` messages) */
  onEvent?: (event: string, data: Record<string, unknown>) => void
  /** Aborting it fails a start in progress, or stops the running agent */
  signal?: AbortSignal
  /** Longest line in either direction, in bytes, without the newline @default 1_048_576 */
  maxLineBytes?: number
  /** Time from spawn to the program's hello, ms @default 10_000 */
  startTimeout?: number
  /** Tasks the program runs at once; more fail at once with TOO_MANY_TASKS @default 16 */
  maxConcurrentTasks?: number
  /** Time the program gets to exit after `shutdown`, then again after SIGTERM before SIGKILL, ms @default 2_000 */
  stopGrace?: number
  /** Protocol errors after which the program is killed @default 10 */
  maxProtocolErrors?: number
  /** Calls to other agents pending at once; more are answered TOO_MANY_CALLS @default 16 */
  maxConcurrentCalls?: number
  /** Longest call to another agent (the subtask's deadline is at most this far away), ms @default 300_000 */
  callTimeout?: number
  /** How long a call looks for a provider of its skill, ms @default 10_000 */
  discoveryTimeout?: number
  /** Bytes written to the program and not yet read by it before it is deemed stuck and killed @default 16_777_216 */
  maxPendingWriteBytes?: number
}

export interface ExternalAgent {
  readonly agent: HostedAgent
  readonly pid: number | undefined
  /** Resolves with the exit code when the program exits (null when a signal ended it) */
  readonly exited: Promise<number | null>
  /** The skills served for the program */
  readonly skills: readonly string[]
  /** Protocol errors counted so far */
  readonly protocolErrors: number
  /** Send `shutdown`, wait `stopGrace`, then SIGTERM, then SIGKILL; resolves once the program exited and the agent is unhosted */
  stop(): Promise<void>
}

type Limits = Required<Pick<ExternalAgentInit, keyof typeof EXTERNAL_AGENT_DEFAULTS>>

// ---- helpers -----------------------------------------------------------------

function isObject (v: unknown): v is Record<string, unknown> {
  return v != null && typeof v === 'object' && !Array.isArray(v)
}

function limitsOf (init: ExternalAgentInit): Limits {
  const out: Record<string, number> = {}
  for (const [key, def] of Object.entries(EXTERNAL_AGENT_DEFAULTS)) {
    const v = (init as unknown as Record<string, unknown>)[key] ?? def
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1) throw new RangeError(`${key} must be a positive integer`)
    out[key] = v
  }
  return out as Limits
}

/** DAG-CBOR values as JSON: bytes as `{"/":{"bytes":"<base64>"}}` (DAG-JSON), big integers as numbers or strings */
function replacer (_key: string, value: unknown): unknown {
  if (value instanceof Uint8Array) return { '/': { bytes: Buffer.from(value).toString('base64').replace(/=+$/, '') } }
  if (typeof value === 'bigint') return Number.isSafeInteger(Number(value)) ? Number(value) : value.toString()
  return value
}

function errorCode (err: unknown, fallback: string): string {
  const code = (err as { code?: unknown } | undefined)?.code
  return typeof code === 'string' && ERROR_CODE_PATTERN.test(code) ? code : fallback
}

function errorMessage (err: unknown): string {
  const m = (err as { message?: unknown } | undefined)?.message
  return (typeof m === 'string' ? m : String(err)).slice(0, MAX_MESSAGE)
}

/** The `reason` of a cancel message, from the reason a task's signal was aborted with */
function cancelReason (reason: unknown): string {
  const code = (reason as { code?: unknown } | undefined)?.code
  if (code === DeadlineExceededError.code) return 'deadline'
  if (code === CanceledError.code) return 'canceled'
  if (code === 'INTERRUPTED') return 'interrupted'
  return 'ended'
}

/**
 * Splits a byte stream into lines of at most `max` bytes (without the `\n`,
 * and a `\r` before it) without ever holding more than `max` bytes of an
 * unfinished line: the rest of a longer line is dropped, its first bytes kept.
 */
class LineSplitter {
  private parts: Buffer[] = []
  private size = 0
  private head?: Buffer

  constructor (
    private readonly max: number,
    private readonly onLine: (line: Buffer) => void,
    private readonly onOversized: (head: Buffer, size: number) => void
  ) {}

  push (chunk: Buffer): void {
    let start = 0
    while (start <= chunk.length) {
      const nl = chunk.indexOf(0x0a, start)
      const piece = chunk.subarray(start, nl === -1 ? chunk.length : nl)
      if (this.head != null) {
        this.size += piece.length
      } else if (this.size + piece.length > this.max) {
        this.head = Buffer.concat([...this.parts, piece.subarray(0, HEAD_BYTES)]).subarray(0, HEAD_BYTES)
        this.parts = []
        this.size += piece.length
      } else if (piece.length > 0) {
        this.parts.push(piece)
        this.size += piece.length
      }
      if (nl === -1) return
      this.flush()
      start = nl + 1
    }
  }

  /** End of input: an unfinished last line counts as a line */
  end (): void {
    if (this.size > 0) this.flush()
  }

  private flush (): void {
    const head = this.head
    const size = this.size
    const parts = this.parts
    this.parts = []
    this.size = 0
    this.head = undefined
    if (head != null) {
      this.onOversized(head, size)
      return
    }
    let line = parts.length === 1 ? parts[0] : Buffer.concat(parts)
    if (line.length > 0 && line[line.length - 1] === 0x0d) line = line.subarray(0, line.length - 1)
    this.onLine(line)
  }
}

/** Programs still running, killed if this process exits without stopping them */
const children = new Set<ChildProcessWithoutNullStreams>()
let exitHook = false
function track (child: ChildProcessWithoutNullStreams): void {
  children.add(child)
  if (!exitHook) {
    exitHook = true
    process.once('exit', () => {
      for (const c of children) {
        try { c.kill('SIGKILL') } catch { /* gone */ }
      }
    })
  }
}

const utf8 = new TextDecoder('utf-8', { fatal: true })
const lenient = new TextDecoder('utf-8')

// ---- the agent ---------------------------------------------------------------

interface RunningTask {
  readonly id: string
  readonly ctx: SkillContext
  /** Aborted when the task ends: its pending calls stop */
  readonly calls: AbortController
  resolve(value: unknown): void
  reject(err: unknown): void
  detach(): void
}

interface Hello {
  name?: string
  description?: string
  skills?: SkillInit[]
}

class ExternalAgentProcess implements ExternalAgent {
  private readonly node: IoaNode
  private readonly init: ExternalAgentInit
  private readonly limits: Limits
  private readonly child: ChildProcessWithoutNullStreams
  private phase: 'starting' | 'running' | 'stopping' | 'exited' = 'starting'
  private hosted?: HostedAgent
  private served: string[] = []
  private readonly tasks = new Map<string, RunningTask>()
  private readonly ended = new Set<string>()
  private readonly calls = new Set<string>()
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
  private resolveExited!: (code: number | null) => void
  private finalizing?: Promise<void>
  private stopping?: Promise<void>
  private readonly offSignal: () => void
  readonly exited: Promise<number | null>

  constructor (node: IoaNode, init: ExternalAgentInit, limits: Limits) {
    this.node = node
    this.init = init
    this.limits = limits
    this.exited = new Promise(resolve => { this.resolveExited = resolve })
    this.child = spawn(init.command[0], init.command.slice(1), {
      cwd: init.cwd,
      env: {
        ...process.env,
        ...init.env,
        IOA_AGENT_PROTOCOL: AGENT_PROTOCOL,
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
      s.on('error', () => { /* EPIPE and the like: the exit handler reports the end */ })
    }
    this.child.on('error', (e: NodeJS.ErrnoException) => {
      if (this.child.pid == null) {
        // never started: no exit event follows
        this.hello?.reject(new AgentStartError(`Cannot start ${init.command[0]}: ${e.code ?? e.message}`, { cause: e }))
        void this.finalize(null, null)
      } else {
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
      const skills = this.skillsOf(hello)
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
      this.send({
        type: 'welcome',
        protocol: AGENT_PROTOCOL,
        agent: { did: agent.did, name: agent.card.card.name, domain: agent.card.card.domain },
        options: this.init.options ?? {}
      })
      const handlers: Record<string, SkillHandler> = {}
      for (const s of skills) handlers[s.id] = this.handler(s.id)
      this.served = skills.map(s => s.id)
      await this.node.serve(agent, handlers)
      if (this.phase !== 'starting') throw this.exitError('during its start')
      this.phase = 'running'
    } catch (err) {
      this.hello = undefined
      this.kill(`start failed: ${errorMessage(err)}`)
      await this.settled()
      // the program may have exited while its agent was being hosted
      if (this.hosted != null) {
        this.unserve()
        await this.node.interconnect.unhost(this.hosted.did).catch(() => {})
      }
      throw this.withStderr(err)
    }
  }

  /** The skills to serve: the configured ones (each named in the hello, when it names any), else the hello's */
  private skillsOf (hello: Hello): SkillInit[] {
    const configured = this.init.card.skills ?? []
    if (configured.length === 0) {
      if (hello.skills == null || hello.skills.length === 0) throw new SkillMismatchError('Neither the card nor the hello names a skill')
      return hello.skills
    }
    if (hello.skills != null) {
      const offered = new Set(hello.skills.map(s => s.id))
      const missing = configured.filter(s => !offered.has(s.id)).map(s => s.id)
      if (missing.length > 0) throw new SkillMismatchError(`The program does not serve the configured skill${missing.length > 1 ? 's' : ''} ${missing.join(', ')}`)
    }
    return configured
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
    } catch {
      // a listener's failure is its own
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
      this.protocolError(new AgentProtocolError('A line is not valid UTF-8'))
      return
    }
    if (text.trim() === '') return
    let msg: unknown
    try {
      msg = JSON.parse(text)
    } catch {
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
        this.onCall(msg)
        return
      case 'log': {
        if (typeof msg.event !== 'string' || msg.event.length === 0 || msg.event.length > MAX_EVENT) {
          throw new AgentProtocolError(`log.event must be a string of 1-${MAX_EVENT} characters`)
        }
        const data = msg.data ?? {}
        if (!isObject(data)) throw new AgentProtocolError('log.data must be an object')
        try {
          this.init.onEvent?.(msg.event, data)
        } catch {
          // a listener's failure is its own
        }
        return
      }
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
            capability: ctx.capability
          }, true)
        } catch (err) {
          this.endTask(id, err)
        }
      })
    }
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

  // ---- calls to other agents -------------------------------------------------------

  private onCall (msg: Record<string, unknown>): void {
    const { id, skill, to, task, constraints } = msg
    if (typeof id !== 'string' || id.length === 0 || id.length > MAX_ID) throw new AgentProtocolError(`call.id must be a string of 1-${MAX_ID} characters`)
    if (this.calls.has(id)) throw new AgentProtocolError(`Call ${id} is already pending`)
    const invalid = (message: string): void => {
      this.send({ type: 'call-error', id, code: 'INVALID_CALL', message })
      throw new AgentProtocolError(`call ${id}: ${message}`)
    }
    if (!isCapability(skill)) return invalid('call.skill must be a capability name')
    if (to != null && !isDid(to)) return invalid('call.to must be a did:key')
    if (task != null && (typeof task !== 'string' || !TASK_ID_PATTERN.test(task))) return invalid('call.task must be a task id')
    if (constraints != null && !isObject(constraints)) return invalid('call.constraints must be an object')
    if (!this.welcomed || this.hosted == null || this.phase === 'stopping') {
      this.send({ type: 'call-error', id, code: 'NOT_RUNNING', message: this.welcomed ? 'The agent is stopping' : 'Calls are accepted after the welcome' })
      return
    }
    if (this.calls.size >= this.limits.maxConcurrentCalls) {
      this.send({ type: 'call-error', id, code: 'TOO_MANY_CALLS', message: `${this.limits.maxConcurrentCalls} calls are pending already` })
      return
    }
    let parent: RunningTask | undefined
    if (task != null) {
      parent = this.tasks.get(task)
      if (parent == null) {
        this.send({ type: 'call-error', id, code: 'UNKNOWN_TASK', message: `Task ${task} is not running` })
        return
      }
    }
    this.calls.add(id)
    void this.call(id, this.hosted, { skill, input: msg.input ?? null, to: to ?? undefined, constraints: constraints ?? undefined }, parent)
      .catch((err) => { this.log(`call ${id}: ${errorMessage(err)}`) })
      .finally(() => { this.calls.delete(id) })
  }

  private async call (id: string, agent: HostedAgent, req: { skill: string, input: unknown, to?: Did, constraints?: Record<string, unknown> }, parent?: RunningTask): Promise<void> {
    const controller = new AbortController()
    const links: Array<() => void> = []
    for (const s of [this.lifetime.signal, parent?.calls.signal]) {
      if (s == null) continue
      const onAbort = (): void => { controller.abort(s.reason) }
      if (s.aborted) onAbort()
      s.addEventListener('abort', onAbort, { once: true })
      links.push(() => { s.removeEventListener('abort', onAbort) })
    }
    const deadline = Math.min(Date.now() + this.limits.callTimeout, parent?.ctx.deadline ?? Infinity)
    const timer = setTimeout(() => { controller.abort(new DeadlineExceededError(`Call ${id} timed out`)) }, Math.max(0, deadline - Date.now()))
    timer.unref?.()
    const signal = controller.signal
    let submitted: { to: Did, taskId: string } | undefined
    try {
      const to = req.to ?? await this.provider(agent.did, req.skill, signal)
      signal.throwIfAborted()
      const proofs = await this.proofs(agent, to, req.skill, req.constraints, deadline, parent)
      signal.throwIfAborted()
      submitted = { to, taskId: randomUUID() }
      const done = await this.node.tasks.submitAndWait(agent.identity, to, {
        skill: req.skill, input: req.input, proofs, deadline, taskId: submitted.taskId
      }, { signal })
      this.send({ type: 'call-result', id, output: done.result ?? null })
    } catch (err) {
      const reason = signal.aborted ? signal.reason : err
      this.send({ type: 'call-error', id, code: errorCode(reason, 'CALL_FAILED'), message: errorMessage(reason) })
      if (signal.aborted && submitted != null) {
        // stopping to listen does not stop the subtask: cancel it
        const { to, taskId } = submitted
        void this.node.tasks.cancel(to, taskId, { signal: AbortSignal.timeout(5_000) }).catch(() => {})
      }
    } finally {
      clearTimeout(timer)
      for (const off of links) off()
    }
  }

  /** The best ranked agent (not this one) that has `skill` */
  private async provider (self: Did, skill: string, signal: AbortSignal): Promise<Did> {
    const found = await this.node.discover({ capability: skill }, { signal, timeout: this.limits.discoveryTimeout })
    const best = found.find(d => d.card.id !== self && d.skills.some(s => s.id === skill))
    if (best == null) throw new NoProviderError(`No agent found for ${skill}`)
    return best.card.id
  }

  /**
   * The proofs of a call: a token from this agent to the provider for exactly
   * `skill`, expiring no later than the call's deadline; with a parent task,
   * proven by the task's chain (which it follows), narrowed to the capability
   * of that chain covering the skill.
   */
  private async proofs (agent: HostedAgent, to: Did, skill: string, constraints: Record<string, unknown> | undefined, deadline: number, parent?: RunningTask): Promise<Token[]> {
    if (parent == null) {
      const cap: Capability = { skill, ...(constraints != null ? { constraints } : {}) }
      return [await this.node.delegate(agent, { audience: to, capabilities: [cap], expiresAt: deadline })]
    }
    const chain = parent.ctx.chain
    if (chain.audience !== agent.did) {
      throw new UnauthorizedError(`Task ${parent.id} was not delegated to this agent (its chain grants ${chain.audience}), so it cannot delegate further`)
    }
    const granted = capabilityFor(chain, skill)
    if (granted == null) throw new UnauthorizedError(`The chain of task ${parent.id} does not cover ${skill}`)
    const cap: Capability = { skill, ...((constraints ?? granted.constraints) != null ? { constraints: constraints ?? granted.constraints } : {}) }
    if (!capabilityCovers(granted, cap)) throw new UnauthorizedError(`The constraints asked for ${skill} are wider than task ${parent.id}'s`)
    const token = await this.node.delegate(agent, {
      audience: to,
      capabilities: [cap],
      expiresAt: Math.min(chain.expiresAt, deadline),
      proofs: [chain.path[0]]
    })
    return [token, ...chain.path]
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
      return
    }
    const size = Buffer.byteLength(line)
    if (size > this.limits.maxLineBytes) {
      const err = new LineTooLongError(`The ${String(msg.type)} message (${size} bytes) exceeds maxLineBytes (${this.limits.maxLineBytes})`)
      if (strict) throw err
      this.log(err.message)
      if (msg.type === 'call-result') this.send({ type: 'call-error', id: msg.id, code: err.code, message: err.message })
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
      try { this.child.kill('SIGKILL') } catch { /* already gone */ }
    }
  }

  /** Resolves once the program is gone and its agent unhosted (bounded: a kill that is not reaped still settles) */
  private async settled (): Promise<void> {
    if (this.finalizing != null) {
      await this.finalizing
      return
    }
    let timer: ReturnType<typeof setTimeout> | undefined
    await Promise.race([this.exited, new Promise<void>(resolve => { timer = setTimeout(resolve, KILL_WAIT) })])
    clearTimeout(timer)
    await (this.finalizing ?? this.finalize(null, null))
  }

  private async waitExit (ms: number): Promise<boolean> {
    let timer: ReturnType<typeof setTimeout> | undefined
    const done = await Promise.race([
      this.exited.then(() => true),
      new Promise<boolean>(resolve => { timer = setTimeout(() => { resolve(false) }, ms) })
    ])
    clearTimeout(timer)
    return done
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
      try { this.child.kill('SIGTERM') } catch { /* gone */ }
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
      for (const id of [...this.tasks.keys()]) this.endTask(id, err)
      this.unserve()
      if (this.hosted != null) await this.node.interconnect.unhost(this.hosted.did).catch(() => {})
      this.resolveExited(code)
    })()
    await this.finalizing
  }
}

/** A hello message checked; unknown fields are ignored */
function parseHello (msg: Record<string, unknown>): Hello {
  if (msg.protocol !== AGENT_PROTOCOL) {
    throw new UnsupportedProtocolError(`The program speaks ${JSON.stringify(msg.protocol)?.slice(0, 40)}, this node ${AGENT_PROTOCOL}`)
  }
  const hello: Hello = {}
  if (msg.name != null) {
    if (typeof msg.name !== 'string' || msg.name.length === 0 || msg.name.length > CARD_LIMITS.maxName) throw new AgentProtocolError(`hello.name must be a string of 1-${CARD_LIMITS.maxName} characters`)
    hello.name = msg.name
  }
  if (msg.description != null) {
    if (typeof msg.description !== 'string' || msg.description.length > CARD_LIMITS.maxText) throw new AgentProtocolError(`hello.description must be a string of at most ${CARD_LIMITS.maxText} characters`)
    hello.description = msg.description
  }
  if (msg.skills != null) {
    if (!Array.isArray(msg.skills) || msg.skills.length > CARD_LIMITS.maxSkills) throw new AgentProtocolError(`hello.skills must be a list of at most ${CARD_LIMITS.maxSkills} skills`)
    hello.skills = msg.skills.map((s: unknown, i) => {
      if (!isObject(s)) throw new AgentProtocolError(`hello.skills.${i} must be an object`)
      const { id, name, description, tags, inputSchema, outputSchema, examples } = s
      const picked = Object.fromEntries(Object.entries({ id, name, description, tags, inputSchema, outputSchema, examples }).filter(([, v]) => v != null))
      const parsed = SkillSchema.safeParse(picked)
      if (!parsed.success) {
        const issue = parsed.error.issues[0]
        throw new AgentProtocolError(`hello.skills.${i}${issue.path.length > 0 ? '.' + issue.path.join('.') : ''}: ${issue.message}`)
      }
      return picked as SkillInit
    })
    const ids = new Set(hello.skills.map(s => s.id))
    if (ids.size !== hello.skills.length) throw new AgentProtocolError('hello.skills names a skill twice')
  }
  return hello
}

/**
 * Start an external agent program and host it: spawn `command` (no shell),
 * wait for its hello, host the agent with the card (skills from the card or
 * the hello), send the welcome and serve its skills, each task forwarded to
 * the program. Rejects with a typed error (AGENT_START_FAILED,
 * AGENT_START_TIMEOUT, UNSUPPORTED_PROTOCOL, SKILL_MISMATCH,
 * AGENT_PROTOCOL_ERROR, or the host's error) after killing the program.
 */
export async function startExternalAgent (node: IoaNode, init: ExternalAgentInit): Promise<ExternalAgent> {
  if (init == null || typeof init !== 'object') throw new TypeError('startExternalAgent needs an init object')
  const { command } = init
  if (!Array.isArray(command) || command.length === 0 || command.some(a => typeof a !== 'string') || command[0] === '') {
    throw new TypeError('command must be a non-empty list of strings')
  }
  if (init.card == null || typeof init.card !== 'object') throw new TypeError('card is required')
  const limits = limitsOf(init)
  const agent = new ExternalAgentProcess(node, init, limits)
  await agent.start()
  return agent
}
