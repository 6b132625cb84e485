/**
 * The spans of a `resubscribe` between separate nodes over TCP on
 * 127.0.0.1 (spec/management.md 3.1, 3.2), each node with its own tracer
 * provider and an in-memory exporter: `resubscribe()` with a trace gives a
 * CLIENT span `resubscribe` on the requester, a child of that trace, and a
 * SERVER span `resubscribe` on the executor, a child of the CLIENT span
 * (the request's `trace` carries it), both ending with the task's state; a
 * lease watch that resubscribes after its stream broke makes the same two
 * spans under the submit's CLIENT span.
 */
import { SpanKind } from '@opentelemetry/api'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { until } from '../../../test/util.js'
import { resolvable } from '../../collab/test/task-pair.js'
import { startTracedPair } from './traced-pair.js'
import type { Token, TaskEvent, TaskService } from '@ioa/collab'
import type { HostedAgent } from '@ioa/interconnect'
import type { TransportNode } from '@ioa/transport'
import type { InMemorySpanExporter, ReadableSpan } from '@opentelemetry/sdk-trace-base'

const GIVEN = { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' }

function resubscribeSpan (spans: ReadableSpan[], taskId: string, kind: SpanKind): ReadableSpan | undefined {
  return spans.find(s => s.name === 'resubscribe' && s.attributes['ioa.task.id'] === taskId && s.kind === kind)
}

describe('resubscribe spans over TCP', () => {
  const closers: Array<() => Promise<unknown>> = []
  let executor: TransportNode
  let requester: TransportNode
  let worker: HostedAgent
  let caller: HostedAgent
  let token: Token
  let tsR: TaskService
  let spansE: InMemorySpanExporter
  let spansR: InMemorySpanExporter
  const gates = new Map<string, { promise: Promise<void>, resolve: () => void }>()

  beforeAll(async () => {
    const pair = await startTracedPair(closers, ['test.slow'])
    ;({ executor, requester, worker, caller, token, tsR, spansE, spansR } = pair)
    const tsE = pair.tsE
    // each task runs until the test opens its gate
    await tsE.serve(worker.did, 'test.slow', async (input, ctx) => {
      let resolve = (): void => {}
      const gate = { promise: new Promise<void>(r => { resolve = r }), resolve: () => { resolve() } }
      gates.set(ctx.task.id, gate)
      await gate.promise
      return input
    })
    await resolvable(pair.icR, worker.did)
  })

  afterAll(async () => {
    for (const g of gates.values()) g.resolve()
    for (const close of closers.reverse()) await close().catch(() => {})
  })

  it('resubscribe() with a trace: a CLIENT span under it and a SERVER span under the CLIENT span, ending with the state', async () => {
    const taskId = 'resub-1'
    // a submit read up to its first event, then left
    for await (const e of tsR.submit(caller.identity, worker.did, { skill: 'test.slow', input: 'x', proofs: [token], taskId })) {
      if (e.type === 'status') break
    }
    await until(() => gates.get(taskId), { what: 'the handler to run' })
    const events: TaskEvent[] = []
    const reading = (async () => {
      for await (const e of tsR.resubscribe(worker.did, taskId, { trace: GIVEN })) events.push(e)
    })()
    await until(() => events.length > 0, { what: 'the first event of the resubscribe' })
    gates.get(taskId)?.resolve()
    await reading
    expect(events.at(-1)).toMatchObject({ type: 'status', task: { state: 'completed' } })

    const client = await until(() => resubscribeSpan(spansR.getFinishedSpans(), taskId, SpanKind.CLIENT), { what: 'the CLIENT span' })
    const server = await until(() => resubscribeSpan(spansE.getFinishedSpans(), taskId, SpanKind.SERVER), { what: 'the SERVER span' })
    expect(client.spanContext().traceId).toBe('4bf92f3577b34da6a3ce929d0e0e4736')
    expect(client.parentSpanContext?.spanId).toBe('00f067aa0ba902b7')
    expect(server.spanContext().traceId).toBe('4bf92f3577b34da6a3ce929d0e0e4736')
    expect(server.parentSpanContext?.spanId).toBe(client.spanContext().spanId)
    expect(client.attributes).toMatchObject({ 'gen_ai.agent.id': worker.did, 'ioa.task.id': taskId, 'ioa.task.state': 'completed' })
    expect(server.attributes).toMatchObject({
      'gen_ai.agent.id': worker.did, 'ioa.skill': 'test.slow', 'ioa.task.id': taskId, 'ioa.caller': caller.did, 'ioa.task.state': 'completed'
    })
    expect(server.resource.attributes['service.name']).toBe('executor')
  })

  it('a lease watch that resubscribes after its stream broke makes both spans under the submit\'s CLIENT span', async () => {
    const taskId = 'resub-2'
    const events: TaskEvent[] = []
    const reading = (async () => {
      for await (const e of tsR.submit(caller.identity, worker.did, { skill: 'test.slow', input: 'y', proofs: [token], taskId })) events.push(e)
    })()
    await until(() => gates.get(taskId), { what: 'the handler to run' })
    // (before the first event, a broken stream is submitted again; after it, resubscribed)
    await until(() => events.length > 0, { what: 'the first event' })
    // the connection breaks: the requester's lease watch resubscribes (and dials again)
    await requester.hangUp(executor.peerId)
    await until(() => requester.getConnections(executor.peerId).length > 0, { what: 'the requester to connect again', timeout: 30_000 })
    gates.get(taskId)?.resolve()
    await reading
    expect(events.at(-1)).toMatchObject({ type: 'status', task: { state: 'completed' } })

    const submit = await until(() => spansR.getFinishedSpans().find(s => s.name === 'invoke_agent test.slow' && s.attributes['ioa.task.id'] === taskId), { what: 'the submit\'s CLIENT span' })
    const client = await until(() => resubscribeSpan(spansR.getFinishedSpans(), taskId, SpanKind.CLIENT), { what: 'the CLIENT span' })
    const served = await until(() => resubscribeSpan(spansE.getFinishedSpans(), taskId, SpanKind.SERVER), { what: 'the SERVER span' })
    expect(client.parentSpanContext?.spanId).toBe(submit.spanContext().spanId)
    expect(client.spanContext().traceId).toBe(submit.spanContext().traceId)
    expect(served.parentSpanContext?.spanId).toBe(client.spanContext().spanId)
    expect(served.attributes['ioa.task.state']).toBe('completed')
  })
})
