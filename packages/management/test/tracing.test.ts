/**
 * Traces of tasks between separate nodes over TCP on 127.0.0.1
 * (spec/management.md 3), each node with its own tracer provider and an
 * in-memory exporter: a task gives a CLIENT span on the requester and a
 * SERVER span on the executor in one trace, with the GenAI and `ioa.*`
 * attributes; a handler's `ctx.call` continues the trace under the SERVER
 * span; a trace field whose traceparent is not a W3C one starts a new trace;
 * the tracing options are checked, naming the field.
 */
import { SpanKind, SpanStatusCode } from '@opentelemetry/api'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { collect, rejectionOf, until } from '../../../test/util.js'
import { createEnvelope } from '../../collab/src/auth/envelope.js'
import { resolvable } from '../../collab/test/task-pair.js'
import { createTracing } from '../src/index.js'
import { startTracedPair } from './traced-pair.js'
import type { Token, TaskService } from '@ioa/collab'
import type { HostedAgent } from '@ioa/interconnect'
import type { TransportNode } from '@ioa/transport'
import type { InMemorySpanExporter, ReadableSpan } from '@opentelemetry/sdk-trace-base'

const TASK_PROTOCOL_V2 = '/ioa/task/2.0.0'
const GIVEN = { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' }

function byTask (spans: ReadableSpan[], taskId: string, kind: SpanKind): ReadableSpan | undefined {
  return spans.find(s => s.attributes['ioa.task.id'] === taskId && s.kind === kind)
}

describe('task traces over TCP', () => {
  const closers: Array<() => Promise<unknown>> = []
  let executor: TransportNode
  let requester: TransportNode
  let worker: HostedAgent
  let caller: HostedAgent
  let token: Token
  let tsE: TaskService
  let tsR: TaskService
  let spansE: InMemorySpanExporter
  let spansR: InMemorySpanExporter

  beforeAll(async () => {
    const pair = await startTracedPair(closers, ['test.fast', 'test.chain'])
    ;({ executor, requester, worker, caller, token, tsE, tsR, spansE, spansR } = pair)
    await tsE.serve(worker.did, 'test.fast', (input) => input)
    // a handler's own call goes back to the requester's node: the trace follows it
    await tsE.serve(worker.did, 'test.chain', async (input, ctx) => ({ echoed: await ctx.call(caller.did, 'test.echo', input) }))
    await tsR.serve(caller.did, 'test.echo', (input) => input)
    await resolvable(pair.icR, worker.did)
    await resolvable(pair.icE, caller.did)
  })

  afterAll(async () => {
    for (const close of closers.reverse()) await close().catch(() => {})
  })

  it('a task gives a CLIENT span on the requester and a SERVER span on the executor, in one trace, with the attributes', async () => {
    const done = await tsR.submitAndWait(caller.identity, worker.did, { skill: 'test.fast', input: { n: 1 }, proofs: [token], taskId: 'traced-1' })
    expect(done.state).toBe('completed')
    const client = await until(() => byTask(spansR.getFinishedSpans(), 'traced-1', SpanKind.CLIENT), { what: 'the CLIENT span' })
    const server = await until(() => byTask(spansE.getFinishedSpans(), 'traced-1', SpanKind.SERVER), { what: 'the SERVER span' })
    expect(client.name).toBe('invoke_agent test.fast')
    expect(server.name).toBe('invoke_agent test.fast')
    expect(server.spanContext().traceId).toBe(client.spanContext().traceId)
    expect(server.parentSpanContext?.spanId).toBe(client.spanContext().spanId)
    expect(client.parentSpanContext).toBeUndefined()
    expect(client.attributes).toMatchObject({
      'gen_ai.operation.name': 'invoke_agent', 'gen_ai.agent.id': worker.did, 'ioa.skill': 'test.fast', 'ioa.task.state': 'completed', 'ioa.chain.depth': 1
    })
    expect(server.attributes).toMatchObject({
      'gen_ai.operation.name': 'invoke_agent',
      'gen_ai.agent.id': worker.did,
      'gen_ai.agent.name': 'Worker',
      'ioa.skill': 'test.fast',
      'ioa.caller': caller.did,
      'ioa.task.state': 'completed',
      'ioa.chain.depth': 1
    })
    expect(server.status.code).not.toBe(SpanStatusCode.ERROR)
    expect(server.resource.attributes['service.name']).toBe('executor')
    expect(client.resource.attributes['service.name']).toBe('requester')
  })

  it('continues a trace the caller gives; a handler\'s ctx.call continues it under the SERVER span', async () => {
    const done = await tsR.submitAndWait(caller.identity, worker.did, { skill: 'test.chain', input: 'hi', proofs: [token], taskId: 'traced-2' }, { trace: GIVEN })
    expect(done.result).toEqual({ echoed: 'hi' })
    const client = await until(() => byTask(spansR.getFinishedSpans(), 'traced-2', SpanKind.CLIENT), { what: 'the CLIENT span' })
    const server = await until(() => byTask(spansE.getFinishedSpans(), 'traced-2', SpanKind.SERVER), { what: 'the SERVER span' })
    expect(client.spanContext().traceId).toBe('4bf92f3577b34da6a3ce929d0e0e4736')
    expect(client.parentSpanContext?.spanId).toBe('00f067aa0ba902b7')
    expect(server.parentSpanContext?.spanId).toBe(client.spanContext().spanId)
    // the subtask: a CLIENT span on the executor's node under its SERVER span, a SERVER span back on the requester's
    const subClient = await until(() => spansE.getFinishedSpans().find(s => s.kind === SpanKind.CLIENT && s.parentSpanContext?.spanId === server.spanContext().spanId), { what: 'the subtask CLIENT span' })
    expect(subClient.name).toBe('invoke_agent test.echo')
    expect(subClient.attributes['ioa.chain.depth']).toBe(2)
    const subServer = await until(() => spansR.getFinishedSpans().find(s => s.kind === SpanKind.SERVER && s.parentSpanContext?.spanId === subClient.spanContext().spanId), { what: 'the subtask SERVER span' })
    expect(subServer.spanContext().traceId).toBe('4bf92f3577b34da6a3ce929d0e0e4736')
    expect(subServer.attributes['ioa.task.state']).toBe('completed')
  })

  it('a trace field whose traceparent is not a W3C one starts a new trace on the executor; the task runs', async () => {
    const body = { input: { n: 2 } }
    const envelope = await createEnvelope(caller.identity, { to: worker.did, skill: 'test.fast', task: 'untraced-1', body, proofs: [token] })
    const bad = { traceparent: '00-00000000000000000000000000000000-00f067aa0ba902b7-01' }
    const events = await collect(requester.services.messaging.stream<Record<string, any>>(executor.peerId, TASK_PROTOCOL_V2, 'submit', { envelope, body, trace: bad }, { timeout: 10_000 }))
    expect(events.at(-1)?.task?.state).toBe('completed')
    const server = await until(() => byTask(spansE.getFinishedSpans(), 'untraced-1', SpanKind.SERVER), { what: 'the SERVER span' })
    expect(server.parentSpanContext).toBeUndefined()
    expect(server.spanContext().traceId).not.toBe('00000000000000000000000000000000')
  })

  it('a failed task ends its spans as errors with the code', async () => {
    const err = await rejectionOf(tsR.submitAndWait(caller.identity, worker.did, { skill: 'test.missing', input: null, proofs: [token], taskId: 'traced-3' }))
    expect(err.code).toBe('NO_PROVIDER')
    const client = await until(() => byTask(spansR.getFinishedSpans(), 'traced-3', SpanKind.CLIENT), { what: 'the CLIENT span' })
    expect(client.status.code).toBe(SpanStatusCode.ERROR)
    expect(client.attributes['error.type']).toBe('NO_PROVIDER')
  })

  it('tracing options are checked, naming the field', async () => {
    for (const [init, field] of [
      [{}, 'otlp'],
      [{ otlp: 'not a url' }, 'otlp'],
      [{ otlp: 'ftp://127.0.0.1/v1/traces' }, 'otlp'],
      [{ otlp: 'http://127.0.0.1:4318/v1/traces', sampleRatio: 2 }, 'sampleRatio'],
      [{ otlp: 'http://127.0.0.1:4318/v1/traces', serviceName: '' }, 'serviceName']
    ] as const) {
      const e = await rejectionOf(createTracing(init))
      expect(e.name).toBe('InvalidTracingConfigError')
      expect(e.code).toBe('INVALID_TRACING_CONFIG')
      expect(e.message).toContain(field)
    }
  })
})
