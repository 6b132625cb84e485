/**
 * The dashboard on the management HTTP server (spec/management.md 2.6): the
 * page's static files (bundled at build time into dist/dashboard/, read from
 * disk when the dashboard is attached, never imported), and the data API the
 * page reads, behind the operator's authority: the topology and the timeline
 * of tasks and conversations (long-poll). Logs on `ioa:management:dashboard`.
 */
import { readFile } from 'node:fs/promises'
import { TaskCounts, snapshotContent } from '../protocol/managed-node.js'
import { followMessages } from '../metrics/teams.js'
import { assemble, linksOf, nodeOf } from '../topology/model.js'
import { Timeline, taskEntry } from './timeline.js'
import type { TimelineEntry } from './timeline.js'
import type { ManagedNode } from '../protocol/managed-node.js'
import type { ManagementServer, RouteResponse } from '../http/server.js'
import type { AttachedMetrics } from '../metrics/attach.js'
import type { MeteredTeams } from '../metrics/teams.js'
import type { TopologySnapshot } from '../topology/model.js'
import type { Logger } from '@libp2p/interface'

/** Options of the dashboard; its limits are per node, and `maxWaits` bounds the readers of all connections */
export interface DashboardInit {
  /**
   * Timeline entries held (the oldest go first)
   *
   * @default 1000
   */
  maxEvents?: number
  /**
   * Entries in one answer of `GET /api/v1/timeline`
   *
   * @default 200
   */
  maxBatch?: number
  /**
   * Longest `wait` a reader may ask for, ms
   *
   * @default 25_000
   */
  maxWait?: number
  /**
   * Readers waiting at once (`429 TOO_MANY_WAITS` beyond)
   *
   * @default 16
   */
  maxWaits?: number
  /**
   * Where the bundled page is (index.html, dashboard.js, dashboard.css)
   *
   * @default the package's dist/dashboard/
   */
  assets?: string | URL
}

/** The defaults of `DashboardInit` */
export const DASHBOARD_DEFAULTS = {
  maxEvents: 1000,
  maxBatch: 200,
  maxWait: 25_000,
  maxWaits: 16
} as const

/** What the dashboard reads of its node */
export interface DashboardNode extends ManagedNode {
  /** The node's teams: their conversations' messages go to the timeline */
  readonly teams?: MeteredTeams
}

/** A dashboard attached to a server */
export interface Dashboard {
  /** Entries in the timeline so far (the newest's number) */
  readonly seq: number
  /** Timeline readers waiting now */
  readonly waiting: number
  /** Stop following the node; readers waiting are answered */
  close(): void
}

/** The page's files: name, content type */
const ASSETS: Record<string, string> = {
  'index.html': 'text/html; charset=utf-8',
  'dashboard.js': 'text/javascript; charset=utf-8',
  'dashboard.css': 'text/css; charset=utf-8'
}

/** The page may load only its own files and talk only to its own server */
const CSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

const NOT_BUILT = '<!doctype html><meta charset="utf-8"><title>ioa dashboard</title><p>The dashboard is not built: run <code>npm run build</code> (it bundles packages/management/dashboard/ into dist/dashboard/).</p>'

function refusal (status: number, code: string, message: string): RouteResponse {
  return { status, body: { error: { code, message } } }
}

/** An integer query parameter in [0, max], the fallback when absent, else undefined */
function intParam (url: URL, name: string, fallback: number, max: number): number | undefined {
  const raw = url.searchParams.get(name)
  if (raw == null) return fallback
  if (!/^[0-9]{1,16}$/.test(raw)) return undefined
  const n = Number(raw)
  return n <= max ? n : undefined
}

function positive (name: string, value: number | undefined, fallback: number): number {
  const v = value ?? fallback
  if (!Number.isInteger(v) || v < 1 || v > 2_147_483_647) throw new TypeError(`${name} must be a positive integer, got ${String(value)}`)
  return v
}

/**
 * Serve the dashboard on `server`: `GET /` and the page's files (open), and
 * `GET /api/v1/topology` and `GET /api/v1/timeline` (the operator's).
 * `topology` gives a management agent's topology when the node runs one;
 * without it the page shows this node and its connections.
 */
export async function serveDashboard (
  server: Pick<ManagementServer, 'route'>,
  node: DashboardNode,
  init: DashboardInit & {
    topology?: () => TopologySnapshot | undefined
    /** The tasks submitted from this node as they end (`attachMetrics`'s `onSubmitted`) */
    onSubmitted?: AttachedMetrics['onSubmitted']
    log: Logger
  }
): Promise<Dashboard> {
  const log = init.log
  const limits = {
    maxEvents: positive('maxEvents', init.maxEvents, DASHBOARD_DEFAULTS.maxEvents),
    maxBatch: positive('maxBatch', init.maxBatch, DASHBOARD_DEFAULTS.maxBatch),
    maxWait: positive('maxWait', init.maxWait, DASHBOARD_DEFAULTS.maxWait),
    maxWaits: positive('maxWaits', init.maxWaits, DASHBOARD_DEFAULTS.maxWaits)
  }
  const dir = init.assets ?? new URL('../../dashboard/', import.meta.url)
  const files = new Map<string, Buffer>()
  for (const name of Object.keys(ASSETS)) {
    try {
      files.set(name, await readFile(new URL(name, dir instanceof URL ? dir : `file://${dir.endsWith('/') ? dir : dir + '/'}`)))
    } catch (err) {
      log('the dashboard\'s %s is missing (not built?) - %s', name, (err as Error).message)
    }
  }

  const timeline = new Timeline(limits.maxEvents)
  const counts = new TaskCounts()
  const offTask = node.events.onTask(e => {
    counts.count(e)
    timeline.push(taskEntry(e))
  })
  const offSubmitted = init.onSubmitted?.(e => {
    timeline.push({ at: e.at, kind: 'task', side: 'client', type: e.outcome, skill: e.skill, duration: e.duration })
  })
  const stop = new AbortController()
  if (node.teams != null) {
    followMessages(node.teams, stop.signal, log, (team, m) => {
      timeline.push({ at: m.payload.ts, kind: 'conversation', team, type: m.payload.type, from: m.payload.from })
    })
  }

  for (const [name, type] of Object.entries(ASSETS)) {
    const path = name === 'index.html' ? '/' : `/${name}`
    server.route('GET', path, () => {
      const body = files.get(name)
      if (body == null) return name === 'index.html' ? { status: 503, type, body: NOT_BUILT } : refusal(503, 'DASHBOARD_NOT_BUILT', 'The dashboard is not built: run npm run build')
      return { type, headers: { 'content-security-policy': CSP }, body }
    }, { public: true })
  }

  server.route('GET', '/api/v1/topology', () => {
    const agentView = init.topology?.()
    if (agentView != null) return { body: { source: 'agent', topology: agentView } }
    const now = Date.now()
    const payload = { ...snapshotContent(node, counts, 'node'), seq: 0, time: now }
    return { body: { source: 'node', topology: assemble([nodeOf(payload, now, now)], linksOf(payload), now) } }
  })

  server.route('GET', '/api/v1/timeline', async (req) => {
    const after = intParam(req.url, 'after', 0, Number.MAX_SAFE_INTEGER)
    const wait = intParam(req.url, 'wait', 0, limits.maxWait)
    const limit = intParam(req.url, 'limit', limits.maxBatch, limits.maxBatch)
    if (after == null || wait == null || limit == null || limit < 1) {
      return refusal(400, 'BAD_QUERY', `after: an integer >= 0; wait: 0-${limits.maxWait} ms; limit: 1-${limits.maxBatch}`)
    }
    if (wait > 0 && timeline.seq === after) {
      if (timeline.waiting >= limits.maxWaits) {
        log('refused a timeline reader: %d wait already', limits.maxWaits)
        return refusal(429, 'TOO_MANY_WAITS', `${limits.maxWaits} readers wait already; poll again later`)
      }
      await timeline.wait(after, wait)
    }
    const events: TimelineEntry[] = timeline.read(after, limit)
    return { body: { seq: timeline.seq, events } }
  })

  log('dashboard served (%s)', files.size === Object.keys(ASSETS).length ? 'page bundled' : 'page not built')
  return {
    get seq () { return timeline.seq },
    get waiting () { return timeline.waiting },
    close () {
      offTask()
      offSubmitted?.()
      stop.abort()
      timeline.close()
    }
  }
}
