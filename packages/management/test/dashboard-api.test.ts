/**
 * The dashboard's data API on the management HTTP server (spec/management.md
 * 2.6), over real sockets on loopback: the timeline's long-poll answers when
 * an entry comes, holds the last `maxEvents`, refuses a bad query (400
 * BAD_QUERY) and readers beyond `maxWaits` (429 TOO_MANY_WAITS), answers
 * waiting readers when it closes; the page's files are open, with their
 * CSP, and say so when the page is not built.
 */
import { mkdtemp, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { defaultLogger } from '@libp2p/logger'
import { Registry } from 'prom-client'
import { afterEach, describe, expect, it } from 'vitest'
import { serveDashboard, startManagementServer } from '../src/index.js'
import type { Dashboard, DashboardInit, DashboardNode, ManagementServer, SubmittedTask, TimelineEntry } from '../src/index.js'
import type { ExecutorEvent } from '@ioa/collab'

const open: Array<{ server: ManagementServer, dashboard: Dashboard }> = []
afterEach(async () => {
  for (const { server, dashboard } of open.splice(0)) {
    dashboard.close()
    await server.close()
  }
})

const TOPOLOGY = { at: 1, nodes: [], agents: [], capabilities: [], domains: [], gateways: [], links: [] }

async function start (init: DashboardInit = {}, teams?: DashboardNode['teams']): Promise<{ server: ManagementServer, dashboard: Dashboard, emit: (e: ExecutorEvent) => void, submitted: (e: SubmittedTask) => void }> {
  const listeners = new Set<(e: ExecutorEvent) => void>()
  const ends = new Set<(e: SubmittedTask) => void>()
  const node = { teams, events: { onTask: (l: (e: ExecutorEvent) => void) => { listeners.add(l); return () => listeners.delete(l) } } } as unknown as DashboardNode
  const server = await startManagementServer({ listen: '127.0.0.1:0', registry: new Registry(), logger: defaultLogger() })
  const dashboard = await serveDashboard(server, node, {
    ...init,
    topology: () => TOPOLOGY,
    onSubmitted: (l) => { ends.add(l); return () => { ends.delete(l) } },
    log: defaultLogger().forComponent('test')
  })
  open.push({ server, dashboard })
  return { server, dashboard, emit: (e) => { for (const l of listeners) l(e) }, submitted: (e) => { for (const l of ends) l(e) } }
}

/** Resolves once `n` timeline readers wait */
async function waiting (d: Dashboard, n: number): Promise<void> {
  while (d.waiting < n) await new Promise(resolve => setTimeout(resolve, 10))
}

const completed = (taskId: string): ExecutorEvent => ({ type: 'task-completed', duration: 7, agent: 'did:key:zA' as any, caller: 'did:key:zC' as any, root: 'did:key:zR' as any, skill: 'demo.echo', taskId, at: Date.now() })

async function get (s: ManagementServer, path: string): Promise<{ status: number, body: any }> {
  const res = await fetch(`${s.url}${path}`, { headers: { authorization: `Bearer ${s.token}` } })
  return { status: res.status, body: await res.json() }
}

describe('dashboard data API', () => {
  it('a waiting reader gets the entry as it comes; the timeline holds the last maxEvents', async () => {
    const { server, dashboard, emit, submitted } = await start({ maxEvents: 3 })
    expect(await get(server, '/api/v1/timeline?after=0')).toEqual({ status: 200, body: { seq: 0, events: [] } })
    const reader = get(server, '/api/v1/timeline?after=0&wait=20000')
    await waiting(dashboard, 1)
    emit(completed('t1'))
    const got = await reader
    expect(got.status).toBe(200)
    expect(got.body.seq).toBe(1)
    expect(got.body.events).toEqual([{ seq: 1, at: expect.any(Number), kind: 'task', side: 'server', type: 'completed', skill: 'demo.echo', taskId: 't1', agent: 'did:key:zA', caller: 'did:key:zC', duration: 7 }])
    // a task submitted from this node, as it ends
    submitted({ skill: 'travel.route', outcome: 'lapsed', duration: 12, at: 5 })
    expect((await get(server, '/api/v1/timeline?after=1')).body.events).toEqual([{ seq: 2, at: 5, kind: 'task', side: 'client', type: 'lapsed', skill: 'travel.route', duration: 12 }])
    for (const id of ['t3', 't4', 't5']) emit(completed(id))
    const all = await get(server, '/api/v1/timeline?after=0')
    expect(all.body.seq).toBe(5)
    expect(all.body.events.map((e: TimelineEntry) => e.seq)).toEqual([3, 4, 5])
    expect((await get(server, '/api/v1/timeline?after=3&limit=1')).body.events.map((e: TimelineEntry) => e.seq)).toEqual([4])
    // a reader from before a restart (its number above the newest) reads from the oldest held
    expect((await get(server, '/api/v1/timeline?after=99')).body.events.map((e: TimelineEntry) => e.seq)).toEqual([3, 4, 5])
  })

  it('the messages of the node\'s teams\' conversations go to the timeline', async () => {
    const message = { payload: { v: 1, team: 'team-1', from: 'did:key:zF', id: 'm1', type: 'assign', body: {}, ts: 42 }, sig: new Uint8Array() }
    const teams = {
      teams: () => [{
        id: 'team-1',
        async * events () { yield { type: 'message', seq: 1, epoch: 0, message } as any }
      }],
      // no new team; ends when the dashboard closes
      async * events ({ signal }: { signal?: AbortSignal } = {}) {
        await new Promise(resolve => signal?.addEventListener('abort', resolve))
        yield * []
      }
    }
    const { server } = await start({}, teams as any)
    const got = await get(server, '/api/v1/timeline?after=0&wait=10000')
    expect(got.body.events).toEqual([{ seq: 1, at: 42, kind: 'conversation', team: 'team-1', type: 'assign', from: 'did:key:zF' }])
  })

  it('refuses a bad query (400 BAD_QUERY) and readers beyond maxWaits (429 TOO_MANY_WAITS); closing answers the waiting', async () => {
    const { server, dashboard } = await start({ maxWaits: 1, maxWait: 30_000 })
    for (const q of ['after=-1', 'after=x', 'wait=30001', 'limit=0', 'limit=201']) {
      const r = await get(server, `/api/v1/timeline?${q}`)
      expect(r.status, q).toBe(400)
      expect(r.body.error.code).toBe('BAD_QUERY')
    }
    const first = get(server, '/api/v1/timeline?after=0&wait=30000')
    await waiting(dashboard, 1)
    const second = await get(server, '/api/v1/timeline?after=0&wait=30000')
    expect(second.status).toBe(429)
    expect(second.body.error.code).toBe('TOO_MANY_WAITS')
    dashboard.close()
    expect(await first).toEqual({ status: 200, body: { seq: 0, events: [] } })
  })

  it('the data API needs the operator; the page\'s files are open, with a CSP; an unbuilt page says so', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ioa-dash-'))
    await writeFile(join(dir, 'index.html'), '<!doctype html><title>t</title>')
    const { server } = await start({ assets: dir })
    expect((await fetch(`${server.url}/api/v1/timeline`)).status).toBe(401)
    expect((await fetch(`${server.url}/api/v1/topology`)).status).toBe(401)
    expect(await get(server, '/api/v1/topology')).toEqual({ status: 200, body: { source: 'agent', topology: TOPOLOGY } })
    const page = await fetch(`${server.url}/`)
    expect(page.status).toBe(200)
    expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8')
    expect(page.headers.get('content-security-policy')).toMatch(/default-src 'none'; script-src 'self'/)
    const script = await fetch(`${server.url}/dashboard.js`)
    expect(script.status).toBe(503)
    expect((await script.json()).error.code).toBe('DASHBOARD_NOT_BUILT')
    const empty = await start({ assets: join(dir, 'none') })
    const unbuilt = await fetch(`${empty.server.url}/`)
    expect(unbuilt.status).toBe(503)
    expect(await unbuilt.text()).toContain('npm run build')
  })
})
