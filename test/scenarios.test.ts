/**
 * The demo's two scenarios, run as `npm run demo -- --json` does: every node
 * is its own OS process (`ioa start`), the driver is this test's child
 * process. Asserts the outcomes the issue names: a booking made once, a
 * payment within the driver's cap under a chain rooted at the driver, a drone
 * dispatched within the deadline, and a takeover after the robot went silent.
 */
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'

const ROOT = fileURLToPath(new URL('..', import.meta.url))

interface Check { name: string, ok: boolean, detail?: string }
interface ScenarioSummary {
  name: string
  status: string
  nodes: number
  agents: number
  steps: unknown[]
  duration: number
  checks: Check[]
  outcome: any
  error?: string
}
interface DemoSummary { ok: boolean, duration: number, processes: number, scenarios: ScenarioSummary[], error?: string }

async function runDemo (): Promise<{ code: number | null, summary: DemoSummary, stderr: string }> {
  const child = spawn(process.execPath, ['--import', './scripts/polyfill.js', 'scripts/demo.js', '--json'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (c: string) => { stdout += c })
  child.stderr.setEncoding('utf8').on('data', (c: string) => { stderr += c })
  const code = await new Promise<number | null>(resolve => child.once('exit', resolve))
  const line = stdout.trim().split('\n').at(-1) ?? ''
  let summary: DemoSummary
  try {
    summary = JSON.parse(line)
  } catch {
    throw new Error(`demo printed no JSON summary (exit ${code}): ${stdout.slice(-500)} ${stderr.slice(-500)}`)
  }
  return { code, summary, stderr }
}

describe('npm run demo -- --json (both scenarios across OS processes)', () => {
  // the bound covers the runner's own: 90 s for the processes to be ready, then
  // 40 s (car) and 60 s (home) at most; a passing run takes about a minute
  it('completes both scenarios, exits 0, and the outcomes hold', { timeout: 240_000 }, async () => {
    const { code, summary } = await runDemo()
    const explain = JSON.stringify(summary.scenarios.map(s => ({ name: s.name, status: s.status, error: s.error, failed: s.checks.filter(c => !c.ok) })))
    expect(summary.ok, explain).toBe(true)
    expect(code).toBe(0)
    // the seed plus at least 5 node processes
    expect(summary.processes).toBeGreaterThanOrEqual(6)
    expect(summary.scenarios.map(s => s.name)).toEqual(['car-assistant', 'home-security'])
    for (const s of summary.scenarios) {
      expect(s).toMatchObject({ status: 'completed' })
      expect(typeof s.nodes).toBe('number')
      expect(s.agents).toBeGreaterThan(0)
      expect(Array.isArray(s.steps)).toBe(true)
      expect(s.steps.length).toBeGreaterThan(0)
      expect(s.duration).toBeGreaterThan(0)
      expect(s.checks.length).toBeGreaterThan(0)
      for (const c of s.checks) expect(c.ok, `${s.name}: ${c.name} — ${c.detail}`).toBe(true)
    }

    const car = summary.scenarios[0].outcome
    expect(car.bookings).toBe(1)
    expect(car.payments).toBe(1)
    expect(car.paidAmount).toBeLessThanOrEqual(car.cap)
    expect(car.paidAmount).toBe(car.booking.amount)
    expect(car.delegatedCap).toBeLessThanOrEqual(car.cap)
    expect(car.chainRoot).toBe(car.driver)
    expect(car.chainDepth).toBe(2)
    expect(car.failovers.some((f: any) => f.fromName === 'Budget Inns')).toBe(true)
    expect(car.booking.brand).toBe('Riviera Hotels')

    const home = summary.scenarios[1].outcome
    expect(home).not.toBeNull()
    expect(home.drone).toBeDefined()
    expect(home.drone.acceptedInMs).toBeLessThanOrEqual(home.drone.deadlineMs)
    expect(home.takeover).toBeDefined()
    expect(home.takeover.from).not.toBe(home.takeover.to)
    expect(home.takeover.silentForMs).toBeGreaterThan(0)
  })
})
