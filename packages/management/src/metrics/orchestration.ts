/**
 * Orchestrator metrics: steps by outcome, failovers, and the run's duration
 * (`gen_ai.workflow.duration` in its Prometheus form), counted from the
 * orchestrator's events. An orchestrator's runs are event streams with no
 * listener of their own, so its run methods are wrapped on the instance.
 */
import { counter, histogram, DURATION_BUCKETS } from './registry-metrics.js'
import type { OrchestratorEvent } from '@ioa/collab'
import type { Counter, Histogram, Registry } from 'prom-client'

/** The part of an orchestrator whose runs are counted */
export interface MeteredOrchestrator {
  run(goal: any, options?: any): AsyncGenerator<OrchestratorEvent, void, undefined>
  resume(runId: string, options?: any): AsyncGenerator<OrchestratorEvent, void, undefined>
  runToCompletion(goal: any, options?: any): Promise<unknown>
  resumeToCompletion(runId: string, options?: any): Promise<unknown>
}

export class OrchestratorMetrics {
  private readonly steps: Counter
  private readonly failovers: Counter
  private readonly workflow: Histogram

  constructor (registry: Registry, private readonly network: string) {
    this.steps = counter(registry, 'ioa_orchestrator_steps_total', 'Orchestrator steps, by outcome (started, completed, failed, retried)', ['network', 'outcome'])
    this.failovers = counter(registry, 'ioa_orchestrator_failovers_total', 'Subtasks an orchestrator moved to another provider', ['network'])
    this.workflow = histogram(registry, 'gen_ai_workflow_duration_seconds', 'Duration of orchestrator runs (gen_ai.workflow.duration), by outcome', ['network', 'outcome'], DURATION_BUCKETS)
  }

  /** Count one event of a run that started at `t0` (performance.now()) */
  event (e: OrchestratorEvent, t0: number): void {
    const network = this.network
    switch (e.type) {
      case 'step-started': this.steps.inc({ network, outcome: 'started' }); return
      case 'step-completed': this.steps.inc({ network, outcome: 'completed' }); return
      case 'step-failed': this.steps.inc({ network, outcome: 'failed' }); return
      case 'step-retry': this.steps.inc({ network, outcome: 'retried' }); return
      case 'failover': this.failovers.inc({ network }); return
      case 'completed':
      case 'failed':
        this.workflow.observe({ network, outcome: e.type }, (performance.now() - t0) / 1000)
        return
      case 'canceled':
        if (e.stepId == null) this.workflow.observe({ network, outcome: 'canceled' }, (performance.now() - t0) / 1000)
    }
  }

  /** Count the runs of `o` (its run methods are replaced on the instance) */
  meter (o: MeteredOrchestrator): void {
    const count = (e: OrchestratorEvent, t0: number): void => { this.event(e, t0) }
    const wrap = (name: 'run' | 'resume'): void => {
      const original = o[name].bind(o)
      o[name] = async function * (arg: any, options?: any) {
        const t0 = performance.now()
        for await (const e of original(arg, options)) {
          count(e, t0)
          yield e
        }
      }
    }
    const wrapToCompletion = (name: 'runToCompletion' | 'resumeToCompletion'): void => {
      const original = o[name].bind(o)
      o[name] = async (arg: any, options?: any) => {
        const t0 = performance.now()
        const onEvent = options?.onEvent
        return await original(arg, { ...options, onEvent: (e: OrchestratorEvent) => { count(e, t0); onEvent?.(e) } })
      }
    }
    wrap('run')
    wrap('resume')
    wrapToCompletion('runToCompletion')
    wrapToCompletion('resumeToCompletion')
  }
}
