/**
 * The demo's three scenarios, run as `npm run demo -- --json` does: every node
 * is its own OS process (`ioa start`), the driver is this test's child
 * process. Asserts the outcomes the issues name: a booking made once, a
 * payment within the driver's cap under a chain rooted at the driver, a drone
 * dispatched within the deadline, a takeover after the robot went silent;
 * and a team that moves a festival day: the venue chosen by a call for
 * proposals, its tasks done, a nested team concluded, the killed bus
 * operator removed, the conversation concluded `done` (issue 13).
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
interface DemoSummary { ok: boolean, dashboard: string | null, duration: number, processes: number, scenarios: ScenarioSummary[], error?: string }

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

describe('npm run demo -- --json (the three scenarios across OS processes)', () => {
  // the bound covers the runner's own: 90 s for the processes to be ready, then
  // 40 s (car), 60 s (home) and 60 s (festival) at most; a passing run takes about a minute
  it('completes the three scenarios, exits 0, and the outcomes hold', { timeout: 300_000 }, async () => {
    const { code, summary } = await runDemo()
    const explain = JSON.stringify(summary.scenarios.map(s => ({ name: s.name, status: s.status, error: s.error, failed: s.checks.filter(c => !c.ok) })))
    expect(summary.ok, explain).toBe(true)
    expect(code).toBe(0)
    // the seed plus at least 5 node processes
    expect(summary.processes).toBeGreaterThanOrEqual(6)
    // the phone served the dashboard: its one-time login URL
    expect(summary.dashboard).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/login\?token=[A-Za-z0-9_-]{43}$/)
    expect(summary.scenarios.map(s => s.name)).toEqual(['car-assistant', 'home-security', 'festival-move'])
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

    const festival = summary.scenarios[2].outcome
    expect(festival.venue).toBe('Dock Hall')
    expect(festival.proposals).toHaveLength(2)
    expect(festival.members).toBe(5)
    expect(festival.states).toEqual(expect.arrayContaining(['sync', 'paused', 'discussion']))
    expect(festival.turns).toBeLessThanOrEqual(festival.maxTurns)
    expect(festival.tasks.forecast).toBe(true)
    expect(festival.tasks.shuttles.map((r: any) => r.route).sort()).toEqual(['A', 'B'])
    expect(festival.tasks.tickets).toBe(2400)
    expect(festival.subteam).toMatchObject({ outcome: 'done', members: 2 })
    expect(festival.killed).toMatchObject({ killed: true, removed: true })
    expect(festival.killed.reassigned).toBeGreaterThanOrEqual(1)
    expect(festival.outcome).toBe('done')
  })
})
