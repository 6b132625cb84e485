/**
 * The dashboard in a real browser (spec/management.md 2.6): three nodes of
 * a domain over TCP, one a management agent with the management HTTP server;
 * Debian's Chromium, driven by playwright-core, opens the login URL and the
 * page shows the nodes (graph elements and table rows) and their agents; a
 * task submitted from another node appears live in the timeline; the page
 * logs no console error. The data API refuses a request without the token
 * (401) and a foreign Host header (421). Skipped, saying so, only when no
 * Chromium is installed (CI installs Debian's `chromium`).
 */
import { existsSync } from 'node:fs'
import { request } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { delegate } from '@ioa/collab'
import { createIdentity } from '@ioa/interconnect'
import { createManagement } from '@ioa/management'
import { createIoaNode } from '@ioa/node'
import { chromium } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Token } from '@ioa/collab'
import type { HostedAgent } from '@ioa/interconnect'
import type { IoaNode } from '@ioa/node'
import type { Browser } from 'playwright-core'

const CHROMIUM = [process.env.CHROMIUM_PATH, '/usr/lib/chromium/chromium', '/usr/bin/chromium', '/usr/bin/chromium-browser'].find(p => p != null && p !== '' && existsSync(p))
if (CHROMIUM == null) console.warn('test/dashboard.test.ts skipped: no Chromium found (apt-get install chromium, or set CHROMIUM_PATH)')

const TCP = { transports: ['tcp' as const], allow: ['/ip4/127.0.0.1'] }
const FAST = { minInterval: 50, pollInterval: 100 }
const HOUR = 3_600_000

/** GET `path` of the server with these headers (node:http, so that `Host` can be set) */
async function get (url: string, path: string, headers: Record<string, string>): Promise<{ status: number, body: any }> {
  return new Promise((resolve, reject) => {
    const req = request(new URL(path, url), { headers }, res => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => { resolve({ status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(chunks).toString() || 'null') }) })
    })
    req.on('error', reject)
    req.end()
  })
}

describe.skipIf(CHROMIUM == null)('dashboard in Chromium', () => {
  let agent: IoaNode
  let a: IoaNode
  let b: IoaNode
  let echo: HostedAgent
  let car: HostedAgent
  let grant: Token
  let browser: Browser

  beforeAll(async () => {
    const operator = await createIdentity()
    const agentKey = await createIdentity()
    const manage = await delegate(operator, { audience: agentKey.did, capabilities: [{ skill: 'ioa.manage.*' }], expiresAt: Date.now() + HOUR })
    agent = await createIoaNode({
      domain: 'acme',
      transport: { ...TCP, privateKey: agentKey.privateKey },
      management: { http: '127.0.0.1:0' },
      layers: [createManagement({ operator: operator.did, role: 'agent', ...FAST, topology: { proofs: [manage], heartbeat: 300, retryDelay: 200, rescanInterval: 300 } })]
    })
    const join = { domain: 'acme', transport: TCP, bootstrap: [agent.addresses()[0]] }
    a = await createIoaNode({ ...join, layers: [createManagement({ operator: operator.did, ...FAST })] })
    b = await createIoaNode({ ...join, layers: [createManagement({ operator: operator.did, ...FAST })] })
    echo = await agent.host({ key: 'echo', name: 'Echo', skills: [{ id: 'demo.echo', name: 'Echo' }], handlers: { 'demo.echo': async (input: unknown) => input } })
    await a.host({ key: 'maps', name: 'Maps', skills: [{ id: 'travel.route', name: 'Route' }] })
    car = await b.host({ key: 'car', name: 'Car', skills: [{ id: 'car.drive', name: 'Drive' }] })
    const user = await createIdentity()
    grant = await delegate(user, { audience: car.did, capabilities: [{ skill: 'demo.*' }], expiresAt: Date.now() + HOUR })
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] })
  }, 120_000)

  afterAll(async () => {
    await browser?.close()
    for (const n of [b, a, agent]) await n?.stop()
  }, 60_000)

  it('shows the nodes and agents, a submitted task appears live in the timeline, no console errors', async () => {
    const http = agent.management?.http
    expect(http).toBeDefined()
    if (http == null) return
    expect((await fetch(`${http.url}/dashboard.js`)).status, 'the dashboard page is not built: run npm run build').toBe(200)
    const page = await browser.newPage({ viewport: { width: 1400, height: 1100 } })
    const errors: string[] = []
    page.on('console', m => { if (m.type() === 'error') errors.push(`console: ${m.text()}`) })
    page.on('pageerror', e => { errors.push(`pageerror: ${e.message}`) })

    await page.goto(http.loginUrl)
    expect(new URL(page.url()).pathname).toBe('/')
    // the three nodes, as table rows and as graph elements (the graph's node ids are peer ids)
    for (const n of [agent, a, b]) {
      await page.locator(`#nodes tbody tr[data-did="${n.nodeIdentity.did}"]`).waitFor({ timeout: 45_000 })
    }
    await page.waitForFunction((peers: string[]) => {
      const cy = (window as any).ioaDashboard?.cy
      return cy != null && peers.every(p => cy.getElementById(p).length === 1)
    }, [agent, a, b].map(n => n.transport.peerId.toString()), { timeout: 30_000 })
    await page.locator(`#agents tbody tr[data-did="${echo.did}"]`).waitFor({ timeout: 30_000 })
    expect(await page.locator('#agents tbody').innerText()).toContain('travel.route')
    expect(await page.locator('#intents h2').innerText()).toMatch(/Intents/)

    // a task served by the dashboard's node, submitted from another node: live in the timeline
    const done = await b.tasks.submitAndWait(car.identity, echo.did, { skill: 'demo.echo', input: { hello: 'dashboard' }, proofs: [grant] }, { signal: AbortSignal.timeout(30_000) })
    expect(done.state).toBe('completed')
    const row = page.locator(`#timeline li.completed[data-task="${done.id}"]`)
    await row.waitFor({ timeout: 30_000 })
    expect(await row.innerText()).toContain('demo.echo')
    await page.locator(`#timeline li.started[data-task="${done.id}"]`).waitFor({ timeout: 5_000 })

    await page.screenshot({ path: join(tmpdir(), 'ioa-dashboard.png'), fullPage: true })
    expect(errors).toEqual([])
    await page.close()
  }, 180_000)

  it('the data API needs the token (401) and refuses a foreign Host (421); the page itself is open', async () => {
    const http = agent.management?.http
    if (http == null) throw new Error('no management HTTP server')
    const port = new URL(http.url).port
    const anonymous = await get(http.url, '/api/v1/topology', {})
    expect(anonymous.status).toBe(401)
    expect(anonymous.body.error.code).toBe('UNAUTHORIZED')
    expect((await get(http.url, '/api/v1/timeline?after=0', {})).status).toBe(401)
    const rebound = await get(http.url, '/api/v1/topology', { host: `attacker.example:${port}`, authorization: `Bearer ${http.token}` })
    expect(rebound.status).toBe(421)
    expect(rebound.body.error.code).toBe('MISDIRECTED_HOST')
    const bearer = await get(http.url, '/api/v1/topology', { authorization: `Bearer ${http.token}` })
    expect(bearer.status).toBe(200)
    expect(bearer.body.source).toBe('agent')
    const page = await fetch(`${http.url}/`)
    expect(page.status).toBe(200)
    expect(page.headers.get('content-security-policy')).toContain("script-src 'self'")
  })
})
