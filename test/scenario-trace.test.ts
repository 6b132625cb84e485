/**
 * One trace across the car scenario's processes (issue 16, spec/management.md
 * 3): `npm run demo -- --json --only car-assistant` with every node exporting
 * over OTLP/HTTP (JSON) to a receiver this test runs on 127.0.0.1. The
 * goal's SERVER span on the car node and the spans of the maps, hotel
 * (inside the Riviera domain, through its gateway, which keeps the trace in
 * this scenario) and payment nodes are in ONE trace, each span a child of a
 * span of that trace.
 */
import { spawn } from 'node:child_process'
import { createServer } from 'node:http'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Server } from 'node:http'
import type { AddressInfo } from 'node:net'

const ROOT = fileURLToPath(new URL('..', import.meta.url))
/** Largest OTLP request body the receiver reads */
const MAX_BODY = 16 * 1024 * 1024

interface OtlpSpan { traceId: string, spanId: string, parentSpanId?: string, name: string, kind: number, attributes?: Array<{ key: string, value: Record<string, unknown> }> }
interface Received { service: string, span: OtlpSpan }

/** An OTLP/HTTP receiver: every span of every JSON export request, with its resource's service.name */
function receiver (): { server: Server, spans: Received[], bad: string[] } {
  const spans: Received[] = []
  const bad: string[] = []
  const server = createServer((req, res) => {
    let size = 0
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => {
      size += c.length
      if (size <= MAX_BODY) chunks.push(c)
    })
    req.on('end', () => {
      try {
        if (req.method !== 'POST' || req.url !== '/v1/traces') throw new Error(`${req.method} ${req.url}`)
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8'))
        for (const rs of body.resourceSpans ?? []) {
          const service = rs.resource?.attributes?.find((a: { key: string }) => a.key === 'service.name')?.value?.stringValue ?? '?'
          for (const ss of rs.scopeSpans ?? []) for (const span of ss.spans ?? []) spans.push({ service, span })
        }
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
      } catch (err) {
        bad.push((err as Error).message)
        res.writeHead(400).end()
      }
    })
  })
  return { server, spans, bad }
}

async function runCar (otlp: string): Promise<{ code: number | null, stdout: string, stderr: string }> {
  const child = spawn(process.execPath, ['--import', './scripts/polyfill.js', 'scripts/demo.js', '--json', '--only', 'car-assistant'], {
    cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, IOA_DEMO_OTLP: otlp }
  })
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (c: string) => { stdout += c })
  child.stderr.setEncoding('utf8').on('data', (c: string) => { stderr += c })
  const code = await new Promise<number | null>(resolve => child.once('exit', resolve))
  return { code, stdout, stderr }
}

describe('the car scenario across its processes, traced', () => {
  const { server, spans, bad } = receiver()
  let url: string

  beforeAll(async () => {
    await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`
  })

  afterAll(async () => {
    await new Promise(resolve => server.close(resolve))
  })

  it('yields one trace spanning the car, maps, hotel (through the gateway) and payment nodes', { timeout: 240_000 }, async () => {
    const { code, stdout, stderr } = await runCar(url)
    const summary = JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}')
    expect(summary.ok, `exit ${code}: ${JSON.stringify(summary.scenarios?.map((s: any) => ({ status: s.status, error: s.error, failed: s.checks?.filter((c: any) => c.ok !== true) })) ?? summary)} ${stderr.slice(-800)}`).toBe(true)
    expect(bad).toEqual([])
    // the goal, served by the car node: the root of the trace the driver started (the driver itself does not trace)
    const goal = spans.find(s => s.service === 'car' && s.span.name === 'invoke_agent vehicle.assistant.goal' && s.span.kind === 2)
    expect(goal, `spans received: ${spans.map(s => `${s.service}:${s.span.name}`).join(', ')}`).toBeDefined()
    const traceId = goal?.span.traceId
    const trace = spans.filter(s => s.span.traceId === traceId)
    const services = new Set(trace.map(s => s.service))
    for (const node of ['car', 'maps', 'riviera-hotel', 'payment']) expect(services, `services in the trace: ${[...services].join(', ')}`).toContain(node)
    // every span of the trace but its root has its parent in the trace
    const ids = new Set(trace.map(s => s.span.spanId))
    const orphans = trace.filter(s => s !== goal && (s.span.parentSpanId == null || s.span.parentSpanId === '' || !ids.has(s.span.parentSpanId)))
    expect(orphans.map(s => `${s.service}:${s.span.name}`)).toEqual([])
    // the run and its plan on the car node; the booking SERVER span on the hotel's node behind the gateway
    expect(trace.some(s => s.service === 'car' && s.span.name.startsWith('invoke_workflow '))).toBe(true)
    expect(trace.some(s => s.service === 'car' && s.span.name === 'plan')).toBe(true)
    expect(trace.some(s => s.service === 'riviera-hotel' && s.span.name === 'invoke_agent travel.hotel.book' && s.span.kind === 2)).toBe(true)
    expect(trace.some(s => s.service === 'payment' && s.span.name === 'invoke_agent payment.pay' && s.span.kind === 2)).toBe(true)
  })
})
