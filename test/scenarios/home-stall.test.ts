/**
 * The home scenario across OS processes with the standby robot R2 held still
 * for 1.5 s as it takes over (home-stall/scenario.js): the scheduler's delay
 * that made "R2 patrols after the takeover" flaky on a loaded machine. R2's
 * lease must outlast it, so every check of the scenario holds.
 */
import { fileURLToPath, pathToFileURL } from 'node:url'
import { describe, expect, it } from 'vitest'

const RUNNER = new URL('../../scenarios/lib/runner.js', import.meta.url)
/** The fixture, as a scenario name relative to scenarios/ (the runner joins it to that folder) */
const SCENARIO = '../test/scenarios/home-stall'

describe('home security when the scheduler holds the standby robot', () => {
  it('R2 held for 1.5 s as it takes over keeps its patrol; every check holds', { timeout: 150_000 }, async () => {
    const { runScenarios } = await import(pathToFileURL(fileURLToPath(RUNNER)).href)
    const lines: string[] = []
    const summary = await runScenarios({ scenarios: [SCENARIO], print: (l: string) => { lines.push(l) } })
    const explain = lines.join('\n')
    expect(summary.scenarios, explain).toHaveLength(1)
    const [s] = summary.scenarios
    expect(lines.some(l => l.includes('R2 held for 1500 ms')), explain).toBe(true)
    for (const c of s.checks) expect(c.ok, `${c.name}: ${c.detail}\n${explain}`).toBe(true)
    expect(s.status, explain).toBe('completed')
    expect(s.outcome.endedBy).toBe('takeover-complete')
    expect(s.outcome.patrol.assignments.map((a: any) => [a.name, a.state])).toEqual([['Patrol robot R1', 'lost'], ['Patrol robot R2', 'patrolling']])
  })
})
