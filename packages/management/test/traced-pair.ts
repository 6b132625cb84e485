/**
 * The fixture of the span suites: two TCP nodes (task-pair.ts), a `worker`
 * agent on the executor with `skills` and a `caller` on the requester, a
 * token caller → worker for `test.*`, and on each node its own tracing
 * (`createTracing` with an in-memory exporter) behind a task service.
 */
import { createTaskService, delegate } from '@ioa/collab'
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace-base'
import { startTaskPair } from '../../collab/test/task-pair.js'
import { createTracing } from '../src/index.js'
import type { TaskPair } from '../../collab/test/task-pair.js'
import type { Tracing } from '../src/index.js'
import type { Token, TaskService } from '@ioa/collab'
import type { HostedAgent } from '@ioa/interconnect'

export interface TracedPair extends TaskPair {
  worker: HostedAgent
  caller: HostedAgent
  token: Token
  tsE: TaskService
  tsR: TaskService
  spansE: InMemorySpanExporter
  spansR: InMemorySpanExporter
  tracingE: Tracing
  tracingR: Tracing
}

/** Start a traced pair; `closers` gets what stops it (run it in reverse) */
export async function startTracedPair (closers: Array<() => Promise<unknown>>, skills: string[]): Promise<TracedPair> {
  const pair = await startTaskPair(closers)
  const worker = await pair.icE.host({ key: 'worker', name: 'Worker', skills: skills.map(id => ({ id })) })
  const caller = await pair.icR.host({ key: 'caller', name: 'Caller', skills: [{ id: 'test.echo' }] })
  const token = await delegate(caller.identity, { audience: worker.did, capabilities: [{ skill: 'test.*' }], expiresAt: Date.now() + 3_600_000 })
  const spansE = new InMemorySpanExporter()
  const spansR = new InMemorySpanExporter()
  const tracingE = await createTracing({ exporter: spansE, serviceName: 'executor' })
  const tracingR = await createTracing({ exporter: spansR, serviceName: 'requester' })
  closers.push(async () => tracingE.shutdown(), async () => tracingR.shutdown())
  const tsE = createTaskService(pair.icE, { tracer: tracingE.tracer })
  const tsR = createTaskService(pair.icR, { tracer: tracingR.tracer })
  closers.push(async () => tsE.stop(), async () => tsR.stop())
  return { ...pair, worker, caller, token, tsE, tsR, spansE, spansR, tracingE, tracingR }
}
