/**
 * `execute_tool {tool}` spans (spec/management.md 3.2) in a real task over
 * TCP on 127.0.0.1 between two nodes, each with its own tracer and an
 * in-memory exporter: the executor's handler calls the tools of an MCP
 * server (the official SDK's `McpServer`, reached by its `Client` over the
 * SDK's in-memory transport) through `traceMcpClient(client, ctx)`, and a
 * local function through `ctx.tool`. The trace is CLIENT (requester) →
 * SERVER (executor) → execute_tool, with the GenAI attributes; a tool that
 * fails (an MCP result with `isError`, a function that throws) ends its span
 * as an error with `error.type`.
 */
import { traceMcpClient } from '@ioa/collab'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js'
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js'
import { SpanKind, SpanStatusCode } from '@opentelemetry/api'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { until } from '../../../test/util.js'
import { resolvable } from '../../collab/test/task-pair.js'
import { startTracedPair } from './traced-pair.js'
import type { SkillContext, TaskService, Token } from '@ioa/collab'
import type { HostedAgent } from '@ioa/interconnect'
import type { InMemorySpanExporter, ReadableSpan } from '@opentelemetry/sdk-trace-base'

/** An MCP server with a tool that adds and one that always fails, and a client connected to it in memory */
async function mcpPair (closers: Array<() => Promise<unknown>>): Promise<Client> {
  const server = new McpServer({ name: 'test-tools', version: '1.0.0' })
  server.registerTool('add', { description: 'Add two numbers', inputSchema: { a: z.number(), b: z.number() } }, async ({ a, b }) => ({
    content: [{ type: 'text', text: String(a + b) }]
  }))
  server.registerTool('jammed', { description: 'Always fails', inputSchema: {} }, async () => ({
    isError: true, content: [{ type: 'text', text: 'the tool is jammed' }]
  }))
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair()
  await server.connect(serverSide)
  const client = new Client({ name: 'ioa-test', version: '1.0.0' })
  await client.connect(clientSide)
  closers.push(async () => client.close(), async () => server.close())
  return client
}

function textOf (result: unknown): string {
  return ((result as { content?: Array<{ text?: string }> }).content ?? []).map(c => c.text ?? '').join('')
}

describe('execute_tool spans in a task over TCP', () => {
  const closers: Array<() => Promise<unknown>> = []
  let worker: HostedAgent
  let caller: HostedAgent
  let token: Token
  let tsR: TaskService
  let spansE: InMemorySpanExporter
  let spansR: InMemorySpanExporter

  beforeAll(async () => {
    const pair = await startTracedPair(closers, ['test.tools'])
    ;({ worker, caller, token, tsR, spansE, spansR } = pair)
    const tsE = pair.tsE
    const mcp = await mcpPair(closers)
    // #region mcp
    await tsE.serve(worker.did, 'test.tools', async (input, ctx: SkillContext) => {
      // mcp: a connected @modelcontextprotocol/sdk Client; each callTool is an execute_tool span
      const tools = traceMcpClient(mcp, ctx, { callIdOf: p => typeof p.arguments?.callId === 'string' ? p.arguments.callId : undefined })
      const sum = textOf(await tools.callTool({ name: 'add', arguments: { a: 2, b: 3 } }))
      const jammed = await tools.callTool({ name: 'jammed', arguments: {} }) as { isError?: boolean }
      const local = await ctx.tool('lookup', () => { throw Object.assign(new Error('no such row'), { code: 'NOT_FOUND' }) }, { callId: 'call-7' })
        .catch((err: Error & { code?: string }) => err.code)
      const badName = await ctx.tool('', () => 1).catch((err: Error) => err.name)
      return { sum, jammed: jammed.isError === true, local, badName, input }
    })
    // #endregion
    await resolvable(pair.icR, worker.did)
  })

  afterAll(async () => {
    for (const close of closers.reverse()) await close().catch(() => {})
  })

  it('a handler\'s MCP tool calls are execute_tool spans under the task\'s SERVER span, failures recorded', async () => {
    const done = await tsR.submitAndWait(caller.identity, worker.did, { skill: 'test.tools', input: 'x', proofs: [token], taskId: 'tools-1' })
    expect(done.state).toBe('completed')
    expect(done.result).toEqual({ sum: '5', jammed: true, local: 'NOT_FOUND', badName: 'TypeError', input: 'x' })

    const byTask = (spans: ReadableSpan[], kind: SpanKind): ReadableSpan | undefined => spans.find(s => s.attributes['ioa.task.id'] === 'tools-1' && s.kind === kind)
    const client = await until(() => byTask(spansR.getFinishedSpans(), SpanKind.CLIENT), { what: 'the CLIENT span' })
    const server = await until(() => byTask(spansE.getFinishedSpans(), SpanKind.SERVER), { what: 'the SERVER span' })
    expect(server.parentSpanContext?.spanId).toBe(client.spanContext().spanId)
    const tools = spansE.getFinishedSpans().filter(s => s.parentSpanContext?.spanId === server.spanContext().spanId)
    const named = (name: string): ReadableSpan => {
      const s = tools.find(t => t.name === name)
      expect(s, name).toBeDefined()
      return s as ReadableSpan
    }
    expect(tools.map(t => t.name).sort()).toEqual(['execute_tool add', 'execute_tool jammed', 'execute_tool lookup'])

    const add = named('execute_tool add')
    expect(add.kind).toBe(SpanKind.INTERNAL)
    expect(add.spanContext().traceId).toBe(client.spanContext().traceId)
    expect(add.attributes).toEqual({ 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': 'add', 'gen_ai.tool.type': 'extension' })
    expect(add.status.code).not.toBe(SpanStatusCode.ERROR)
    // the tool ran inside the task: its span is within the SERVER span's time
    expect(add.startTime[0] * 1e9 + add.startTime[1]).toBeGreaterThanOrEqual(server.startTime[0] * 1e9 + server.startTime[1])

    const jammed = named('execute_tool jammed')
    expect(jammed.attributes['error.type']).toBe('tool_error')
    expect(jammed.status.code).toBe(SpanStatusCode.ERROR)

    const lookup = named('execute_tool lookup')
    expect(lookup.attributes).toMatchObject({ 'gen_ai.tool.name': 'lookup', 'gen_ai.tool.type': 'function', 'gen_ai.tool.call.id': 'call-7', 'error.type': 'NOT_FOUND' })
    expect(lookup.status).toMatchObject({ code: SpanStatusCode.ERROR, message: 'no such row' })
    // the task itself completed: a failed tool is the handler's to handle
    expect(server.attributes['ioa.task.state']).toBe('completed')
  })
})
