/**
 * `execute_tool {tool}` spans (spec/management.md 3.2): a handler's tool
 * call (`SkillContext.tool`) runs inside an INTERNAL span, a child of the
 * task's SERVER span, with the GenAI attributes `gen_ai.operation.name`,
 * `gen_ai.tool.name`, `gen_ai.tool.type` and `gen_ai.tool.call.id`; a tool
 * that throws, or whose result says it failed (`isError`), ends it as an
 * error. `traceMcpClient` wraps an MCP client (the official
 * `@modelcontextprotocol/sdk` `Client`, or anything with its `callTool`) so
 * that each `callTool` is such a span. Without tracing the tool just runs.
 */
import { endSpanWithError } from './tracing.js'
import type { IoaSpan, IoaTracer } from './tracing.js'

/** Longest tool name, characters */
export const MAX_TOOL_NAME = 256

/** What a tool call's span says about it */
export interface ToolCallOptions<T = unknown> {
  /** `gen_ai.tool.call.id`: the id the model or the protocol gave the call @default none */
  callId?: string
  /** `gen_ai.tool.type`: `function`, `extension` (an agent-side tool calling an outside system, as an MCP server's) or `datastore` @default 'function' */
  type?: 'function' | 'extension' | 'datastore'
  /** `gen_ai.tool.description` @default none */
  description?: string
  /** Whether a result the tool returned is a failure (an MCP result with `isError`): the span gets `error.type` `tool_error` @default never */
  isError?: (result: T) => boolean
}

/** Runs tool calls in spans (a `SkillContext`) */
export interface ToolRunner {
  tool<T>(name: string, fn: () => T | Promise<T>, options?: ToolCallOptions<T>): Promise<T>
}

function checkName (name: unknown): asserts name is string {
  if (typeof name !== 'string' || name.length === 0 || name.length > MAX_TOOL_NAME) {
    throw new TypeError(`A tool name must be text of 1-${MAX_TOOL_NAME} characters`)
  }
}

/**
 * Run `fn` in an `execute_tool {name}` span under `parent` (the task's SERVER
 * span; none or a span that does not record: `fn` just runs). Returns or
 * throws what `fn` does.
 */
export async function runTool<T> (tracer: IoaTracer, parent: IoaSpan | undefined, name: string, fn: () => T | Promise<T>, options: ToolCallOptions<T> = {}): Promise<T> {
  checkName(name)
  if (typeof fn !== 'function') throw new TypeError('A tool call needs a function to run')
  if (parent == null || !parent.isRecording()) return await fn()
  const span = tracer.startSpan(`execute_tool ${name}`, 'internal', { span: parent }, () => ({
    'gen_ai.operation.name': 'execute_tool',
    'gen_ai.tool.name': name,
    'gen_ai.tool.type': options.type ?? 'function',
    ...(typeof options.callId === 'string' ? { 'gen_ai.tool.call.id': options.callId } : {}),
    ...(typeof options.description === 'string' ? { 'gen_ai.tool.description': options.description } : {})
  }))
  let result: T
  try {
    result = await fn()
  } catch (err) {
    endSpanWithError(span, err)
    throw err
  }
  if (options.isError?.(result) === true) span.setError('tool_error', `tool ${name} returned an error`)
  span.end()
  return result
}

/** The part of an MCP client that `traceMcpClient` wraps (the SDK `Client`'s `callTool`) */
export interface McpToolClient {
  callTool(params: { name: string, arguments?: Record<string, unknown>, _meta?: Record<string, unknown> } & Record<string, unknown>, ...rest: any[]): Promise<unknown>
}

export interface TraceMcpOptions {
  /** The `gen_ai.tool.call.id` of a call (the id of the model's tool call it answers) @default none */
  callIdOf?: (params: Parameters<McpToolClient['callTool']>[0]) => string | undefined
}

/**
 * `client` with its `callTool` traced: each call runs through
 * `runner.tool` (a handler's `SkillContext`) as an `execute_tool {name}`
 * span of type `extension`; a result with `isError: true` is recorded as
 * `tool_error`, a thrown error by its code or name. Other methods are the
 * client's own; `client` itself is not changed.
 */
export function traceMcpClient<C extends McpToolClient> (client: C, runner: ToolRunner, options: TraceMcpOptions = {}): C {
  const callTool: McpToolClient['callTool'] = async (params, ...rest) => {
    const callId = options.callIdOf?.(params)
    return await runner.tool(params?.name, async () => client.callTool(params, ...rest), {
      type: 'extension',
      ...(typeof callId === 'string' ? { callId } : {}),
      isError: (r) => (r as { isError?: unknown } | undefined)?.isError === true
    })
  }
  return new Proxy(client, {
    get (target, key, receiver) {
      if (key === 'callTool') return callTool
      const v = Reflect.get(target, key, receiver)
      return typeof v === 'function' ? v.bind(target) : v
    }
  })
}
