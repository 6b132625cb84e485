/**
 * The planners' loggers (issue 10): each planner logs as
 * `ioa:collab:planner:<name>` through the logger of its init, or of the plan
 * call's context (the orchestrator passes its node's), and errors it used to
 * drop are logged.
 */
import { describe, expect, it } from 'vitest'
import { rejectionOf } from '../../../../test/util.js'
import { compositionPlanner } from '../../src/planning/planners/composition.js'
import { declarativePlanner } from '../../src/planning/planners/declarative.js'
import { llmPlanner } from '../../src/planning/planners/llm.js'
import type { ComponentLogger, Logger } from '@libp2p/interface'

function recorder (): { logger: ComponentLogger, lines: string[] } {
  const lines: string[] = []
  const logger: ComponentLogger = {
    forComponent (name: string): Logger {
      const line = (component: string, fmt: string, args: unknown[]): void => {
        lines.push([component, fmt, ...args.map(a => a instanceof Error ? a.message : String(a))].join(' '))
      }
      const log = ((fmt: string, ...args: unknown[]) => { line(name, fmt, args) }) as Logger
      log.error = (fmt: string, ...args: unknown[]) => { line(`${name}:error`, fmt, args) }
      log.trace = (fmt: string, ...args: unknown[]) => { line(`${name}:trace`, fmt, args) }
      log.enabled = true
      log.newScope = () => log
      return log
    }
  }
  return { logger, lines }
}

const TEMPLATES = { 'say hello': [{ id: 'hello', capability: 'test.hello', input: {} }] }

describe('planner logging', () => {
  it('the declarative planner logs the plan it made under ioa:collab:planner:declarative', async () => {
    const { logger, lines } = recorder()
    const plan = await declarativePlanner({ templates: TEMPLATES, logger }).plan({ intent: 'say hello', input: {} }, {})
    expect(lines.some(l => l.startsWith('ioa:collab:planner:declarative planned') && l.includes(plan.id))).toBe(true)
  })

  it('a plan call logs through its context logger when it has one, and a failure is logged and still thrown', async () => {
    const own = recorder()
    const ctx = recorder()
    const planner = declarativePlanner({ templates: TEMPLATES, logger: own.logger })
    const err = await rejectionOf(planner.plan({ intent: 'something else', input: {} }, { logger: ctx.logger }))
    expect(err.name).toBe('PlannerFailedError')
    expect(err.code).toBe('PLANNER_FAILED')
    expect(ctx.lines.some(l => l.startsWith('ioa:collab:planner:declarative could not plan') && l.includes('No template'))).toBe(true)
    expect(own.lines).toEqual([])
  })

  it('the composition planner logs under its own name', async () => {
    const { logger, lines } = recorder()
    const catalogue = [{ id: 'test.up', inputSchema: { type: 'object', required: ['a'], properties: { a: { type: 'string' } } }, outputSchema: { type: 'object', required: ['b'], properties: { b: { type: 'string' } } } }]
    await compositionPlanner({ catalogue, logger }).plan({ intent: 'b from a', input: { a: 'x' }, want: { type: 'object', required: ['b'] } }, {})
    expect(lines.some(l => l.startsWith('ioa:collab:planner:composition planned'))).toBe(true)
  })

  it('the LLM planner logs the error body it could not read (it used to drop it) and fails with the status', async () => {
    const { logger, lines } = recorder()
    const broken = new ReadableStream<Uint8Array>({ pull (controller) { controller.error(new Error('connection reset')) } })
    const fetch: typeof globalThis.fetch = async () => new Response(broken, { status: 500 })
    const err = await rejectionOf(llmPlanner({ url: 'http://127.0.0.1:1/v1', model: 'm', fetch, logger }).plan({ intent: 'anything', input: {} }, {}))
    expect(err.name).toBe('PlannerFailedError')
    expect(err.message).toContain('HTTP 500')
    expect(lines.some(l => l.startsWith('ioa:collab:planner:llm:trace') && l.includes('could not be read') && l.includes('connection reset'))).toBe(true)
    expect(lines.some(l => l.startsWith('ioa:collab:planner:llm could not plan'))).toBe(true)
  })
})
