/**
 * The labels of our metrics stay bounded whatever peers send
 * (spec/management.md 2.3): a served skill not hosted here is `other`, a
 * submitted skill keeps its name up to the bound, codes outside the code
 * grammar or past the bound are `other`; relay events count by outcome and
 * reason, lapsed leases and failed lookups by themselves; orchestrator runs
 * by their steps, failovers and duration.
 */
import { Registry } from 'prom-client'
import { describe, expect, it } from 'vitest'
import { IoaMetrics } from '../src/metrics/ioa-metrics.js'
import { BoundedLabel, SkillLabel, codeLabel } from '../src/metrics/labels.js'
import { OrchestratorMetrics } from '../src/metrics/orchestration.js'
import type { OrchestratorEvent } from '@ioa/collab'

describe('bounded labels', () => {
  it('a skill label takes hosted skills for served tasks, and up to the bound of submitted ones', () => {
    const skills = new SkillLabel(s => s === 'shop.quote', 2)
    expect(skills.served('shop.quote')).toBe('shop.quote')
    expect(skills.served('did:key:z6Mkattacker')).toBe('other')
    expect(skills.served(undefined)).toBe('other')
    expect(skills.asked('a.one')).toBe('a.one')
    expect(skills.asked('a.two')).toBe('a.two')
    expect(skills.asked('a.three')).toBe('other')
    expect(skills.asked('a.one')).toBe('a.one')
    expect(skills.asked('shop.quote')).toBe('shop.quote')
  })

  it('a code label takes codes of the grammar, the first ones up to its bound', () => {
    const codes = codeLabel(2)
    expect(codes.of('ESCALATION')).toBe('ESCALATION')
    expect(codes.of('12D3KooWpeer')).toBe('other')
    expect(codes.of('lower')).toBe('other')
    expect(codes.of(`A${'B'.repeat(64)}`)).toBe('other')
    expect(codes.of('REPLAY')).toBe('REPLAY')
    expect(codes.of('REVOKED')).toBe('other')
    expect(new BoundedLabel(0).of('x')).toBe('other')
  })
})

describe('IoaMetrics', () => {
  it('counts refusals by bounded code, relays by outcome and reason, lapsed leases and failed lookups', async () => {
    const registry = new Registry()
    const m = new IoaMetrics({ registry, network: 'domain', hosted: () => false, maxCodes: 3 })
    const base = { agent: 'did:key:z6Mkx', skill: 'x.y', taskId: 't', from: 'did:key:z6Mky', peer: '12D3KooWx' } as const
    m.task({ type: 'task-refused', code: 'REPLAY', message: '', peer: '12D3KooWx', at: 0 })
    m.task({ type: 'task-refused', code: 'not a code', message: '', peer: '12D3KooWx', at: 0 })
    m.task({ type: 'task-started', agent: 'did:key:z6Mkx', skill: 'not.hosted', taskId: 't', caller: 'did:key:z6Mky', root: 'did:key:z6Mky', at: 0 })
    m.relay({ type: 'relayed', ...base })
    m.relay({ type: 'relayed', ...base, refused: { code: 'POLICY_DENIED', message: '' } })
    m.relay({ type: 'refused', ...base, code: 'RATE_LIMITED', message: '' })
    m.submit('x.y', 'lapsed', 1.5)
    m.lookup(0.2, undefined)
    m.lookup(0.1, 0)
    const text = await registry.metrics()
    expect(text).toContain('ioa_tasks_refused_total{network="domain",code="REPLAY"} 1')
    expect(text).toContain('ioa_envelopes_refused_total{network="domain",code="REPLAY"} 1')
    expect(text).toContain('ioa_tasks_refused_total{network="domain",code="other"} 1')
    expect(text).toContain('ioa_tasks_served_total{network="domain",skill="other",state="working"} 1')
    expect(text).toContain('ioa_gateway_relays_total{network="domain",outcome="accepted"} 1')
    expect(text).toContain('ioa_gateway_relays_total{network="domain",outcome="refused"} 1')
    expect(text).toContain('ioa_gateway_refusals_total{network="domain",reason="RATE_LIMITED"} 1')
    expect(text).toContain('ioa_leases_lapsed_total{network="domain"} 1')
    expect(text).toContain('ioa_tasks_submitted_total{network="domain",skill="x.y",state="lapsed"} 1')
    expect(text).toContain('ioa_discovery_lookups_total{network="domain",outcome="failed"} 1')
    expect(text).toContain('ioa_discovery_lookups_total{network="domain",outcome="empty"} 1')
    expect(text).not.toMatch(/did:key|12D3KooW/)
    // a second node of the process finds the metrics registered and adds to them
    new IoaMetrics({ registry, hosted: () => false }).lookup(0.1, 2)
    expect(await registry.metrics()).toContain('ioa_discovery_lookups_total{network="public",outcome="found"} 1')
  })
})

describe('OrchestratorMetrics', () => {
  it('counts steps by outcome, failovers and the workflow duration of run, runToCompletion and resume', async () => {
    const registry = new Registry()
    const runs = new OrchestratorMetrics(registry, 'public')
    const events: OrchestratorEvent[] = [
      { type: 'step-started', runId: 'r', stepId: 's', capability: 'x.y', resumed: false },
      { type: 'failover', runId: 'r', stepId: 's', slot: 0, from: 'did:key:z6Mka', to: 'did:key:z6Mkb', error: { code: 'UNREACHABLE', message: '' }, previous: 'submitted' as any },
      { type: 'step-completed', runId: 'r', stepId: 's', result: 1, providers: [], replayed: false },
      { type: 'completed', runId: 'r', result: 1, steps: {} }
    ]
    const seen: string[] = []
    const o = {
      async * run (_goal: unknown) { yield * events },
      async * resume (_runId: string) { yield { type: 'failed', runId: 'r', error: { code: 'STEP_FAILED', message: '' }, steps: {} } as OrchestratorEvent },
      async runToCompletion (_goal: unknown, options?: { onEvent?: (e: OrchestratorEvent) => void }) { for (const e of events) options?.onEvent?.(e); return 'done' },
      async resumeToCompletion () { return 'done' }
    }
    runs.meter(o)
    for await (const e of o.run('goal')) seen.push(e.type)
    expect(seen).toEqual(['step-started', 'failover', 'step-completed', 'completed'])
    const got: string[] = []
    expect(await o.runToCompletion('goal', { onEvent: (e: OrchestratorEvent) => { got.push(e.type) } })).toBe('done')
    expect(got).toHaveLength(4)
    for await (const e of o.resume('r')) seen.push(e.type)
    const text = await registry.metrics()
    expect(text).toContain('ioa_orchestrator_steps_total{network="public",outcome="started"} 2')
    expect(text).toContain('ioa_orchestrator_steps_total{network="public",outcome="completed"} 2')
    expect(text).toContain('ioa_orchestrator_failovers_total{network="public"} 2')
    expect(text).toContain('gen_ai_workflow_duration_seconds_count{network="public",outcome="completed"} 2')
    expect(text).toContain('gen_ai_workflow_duration_seconds_count{network="public",outcome="failed"} 1')
    expect(text).not.toContain('did:key')
  })
})
