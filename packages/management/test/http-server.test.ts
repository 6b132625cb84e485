/**
 * The management HTTP server's guards (spec/management.md 2.2), over real
 * sockets on loopback: the Host check against DNS rebinding (421), the
 * operator's token (401) as a Bearer header or through the login URL's
 * cookie, cross-origin requests (403), unknown paths and methods (404,
 * 405), bodies too large (413), connections per remote address, and
 * `/metrics` open on loopback only.
 */
import { request } from 'node:http'
import { connect } from 'node:net'
import { once } from 'node:events'
import { defaultLogger } from '@libp2p/logger'
import { Counter, Registry } from 'prom-client'
import { afterEach, describe, expect, it } from 'vitest'
import { startManagementServer } from '../src/index.js'
import type { ManagementServer, ManagementServerInit } from '../src/index.js'

const servers: ManagementServer[] = []
afterEach(async () => {
  for (const s of servers.splice(0)) await s.close()
})

async function server (init: Partial<ManagementServerInit> = {}): Promise<ManagementServer> {
  const registry = new Registry()
  new Counter({ name: 'ioa_test_total', help: 'a test counter', registers: [registry] }).inc(3)
  const s = await startManagementServer({ listen: '127.0.0.1:0', registry, logger: defaultLogger(), ...init })
  servers.push(s)
  s.route('GET', '/api/v1/echo', (req) => ({ body: { path: req.url.pathname } }))
  s.route('POST', '/api/v1/echo', (req) => ({ body: { bytes: req.body?.byteLength } }))
  return s
}

interface Reply { status: number, headers: Record<string, string | string[] | undefined>, body: string }

/** One HTTP request with exactly these headers (fetch would not send a chosen Host) */
async function call (url: string, path: string, options: { method?: string, headers?: Record<string, string>, body?: string } = {}): Promise<Reply> {
  const u = new URL(url)
  return await new Promise((resolve, reject) => {
    const req = request({ host: u.hostname.replace(/^\[|\]$/g, ''), port: u.port, path, method: options.method ?? 'GET', headers: { host: u.host, ...options.headers }, agent: false }, res => {
      let body = ''
      res.setEncoding('utf8').on('data', (c: string) => { body += c })
      res.on('end', () => { resolve({ status: res.statusCode ?? 0, headers: res.headers, body }) })
    })
    req.on('error', reject)
    req.end(options.body)
  })
}

const codeOf = (r: Reply): string => JSON.parse(r.body).error.code

describe('the management HTTP server', () => {
  it('serves /metrics without a token on loopback, in the Prometheus text format', async () => {
    const s = await server()
    expect(s.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/)
    const r = await call(s.url, '/metrics')
    expect(r.status).toBe(200)
    expect(r.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/)
    expect(r.body).toContain('ioa_test_total 3')
  })

  it('refuses a Host header that names another host (DNS rebinding) or port with 421, on every path', async () => {
    const s = await server()
    const port = new URL(s.url).port
    for (const host of [`evil.example:${port}`, `127.0.0.1.nip.io:${port}`, `127.0.0.1:${Number(port) + 1}`, '127.0.0.1']) {
      const r = await call(s.url, '/metrics', { headers: { host } })
      expect(r.status, host).toBe(421)
      expect(codeOf(r)).toBe('MISDIRECTED_HOST')
    }
    // the bound address, localhost and other IP literals of this port pass
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `LOCALHOST:${port}`, `[::1]:${port}`]) {
      expect((await call(s.url, '/metrics', { headers: { host } })).status, host).toBe(200)
    }
    // an authorized request with a bad Host is refused all the same
    expect((await call(s.url, '/api/v1/echo', { headers: { host: `evil.example:${port}`, authorization: `Bearer ${s.token}` } })).status).toBe(421)
  })

  it('takes a host name the operator allowed (a reverse proxy)', async () => {
    const s = await server({ allowedHosts: ['Metrics.Internal'] })
    const port = new URL(s.url).port
    expect((await call(s.url, '/metrics', { headers: { host: `metrics.internal:${port}` } })).status).toBe(200)
    expect((await call(s.url, '/metrics', { headers: { host: `other.internal:${port}` } })).status).toBe(421)
  })

  it('needs the operator token for everything but /metrics: 401 without it or with a wrong one, 200 with the Bearer token', async () => {
    const s = await server()
    const none = await call(s.url, '/api/v1/echo')
    expect(none.status).toBe(401)
    expect(none.headers['www-authenticate']).toBe('Bearer realm="ioa"')
    expect(codeOf(none)).toBe('UNAUTHORIZED')
    expect((await call(s.url, '/api/v1/echo', { headers: { authorization: `Bearer ${s.token}x` } })).status).toBe(401)
    expect((await call(s.url, '/api/v1/echo', { headers: { authorization: 'Bearer ' } })).status).toBe(401)
    const ok = await call(s.url, '/api/v1/echo', { headers: { authorization: `Bearer ${s.token}` } })
    expect(ok.status).toBe(200)
    expect(JSON.parse(ok.body)).toEqual({ path: '/api/v1/echo' })
    expect(s.token).toMatch(/^[A-Za-z0-9_-]{43}$/)
  })

  it('the login URL exchanges the token for a session cookie; a wrong token gets 401 and no cookie', async () => {
    const s = await server()
    const login = new URL(s.loginUrl)
    expect(login.searchParams.get('token')).toBe(s.token)
    const wrong = await call(s.url, '/login?token=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA')
    expect(wrong.status).toBe(401)
    expect(wrong.headers['set-cookie']).toBeUndefined()
    const r = await call(s.url, `${login.pathname}${login.search}`)
    expect(r.status).toBe(303)
    expect(r.headers.location).toBe('/')
    const cookie = String(r.headers['set-cookie']).split(';')[0]
    expect(String(r.headers['set-cookie'])).toMatch(/HttpOnly; SameSite=Strict; Path=\//)
    // the cookie is not the token
    expect(cookie).not.toContain(s.token)
    expect((await call(s.url, '/api/v1/echo', { headers: { cookie } })).status).toBe(200)
    expect((await call(s.url, '/api/v1/echo', { headers: { cookie: `${cookie}x` } })).status).toBe(401)
  })

  it('the login URL logs in once: a second use gets 401 LOGIN_USED and no cookie (a page for a browser); the session and the Bearer token go on', async () => {
    const s = await server()
    const login = new URL(s.loginUrl)
    const path = `${login.pathname}${login.search}`
    const first = await call(s.url, path)
    expect(first.status).toBe(303)
    const cookie = String(first.headers['set-cookie']).split(';')[0]

    const again = await call(s.url, path)
    expect(again.status).toBe(401)
    expect(codeOf(again)).toBe('LOGIN_USED')
    expect(again.headers['set-cookie']).toBeUndefined()
    // a browser (Accept: text/html) gets a page that says so
    const page = await call(s.url, path, { headers: { accept: 'text/html,application/xhtml+xml;q=0.9,*/*;q=0.8' } })
    expect(page.status).toBe(401)
    expect(page.headers['content-type']).toBe('text/html; charset=utf-8')
    expect(page.body).toContain('LOGIN_USED')
    expect(page.body).toContain('used already')
    expect(page.headers['set-cookie']).toBeUndefined()
    // a wrong token is still UNAUTHORIZED, not LOGIN_USED
    expect(codeOf(await call(s.url, '/login?token=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA'))).toBe('UNAUTHORIZED')

    // the browser that logged in goes on: its cookie works, and the link takes it to the page without a new cookie
    expect((await call(s.url, '/api/v1/echo', { headers: { cookie } })).status).toBe(200)
    const back = await call(s.url, path, { headers: { cookie } })
    expect(back.status).toBe(303)
    expect(back.headers.location).toBe('/')
    expect(back.headers['set-cookie']).toBeUndefined()
    // API clients keep the token as Bearer
    expect((await call(s.url, '/api/v1/echo', { headers: { authorization: `Bearer ${s.token}` } })).status).toBe(200)
  })

  it('refuses requests from another origin with 403, even with the cookie', async () => {
    const s = await server()
    const port = new URL(s.url).port
    const auth = { authorization: `Bearer ${s.token}` }
    const r = await call(s.url, '/api/v1/echo', { headers: { ...auth, origin: 'http://evil.example' } })
    expect(r.status).toBe(403)
    expect(codeOf(r)).toBe('CROSS_ORIGIN')
    expect((await call(s.url, '/api/v1/echo', { headers: { ...auth, 'sec-fetch-site': 'cross-site' } })).status).toBe(403)
    expect((await call(s.url, '/api/v1/echo', { headers: { ...auth, origin: `http://localhost:${port}` } })).status).toBe(200)
  })

  it('answers 404 for an unknown path, 405 for a wrong method, 413 for a body above maxRequestBytes', async () => {
    const s = await server({ maxRequestBytes: 1024 })
    const auth = { authorization: `Bearer ${s.token}` }
    expect(codeOf(await call(s.url, '/nothing', { headers: auth }))).toBe('NOT_FOUND')
    const m = await call(s.url, '/metrics', { method: 'POST', headers: auth })
    expect(m.status).toBe(405)
    expect(codeOf(m)).toBe('METHOD_NOT_ALLOWED')
    const small = await call(s.url, '/api/v1/echo', { method: 'POST', headers: auth, body: 'x'.repeat(1000) })
    expect(JSON.parse(small.body)).toEqual({ bytes: 1000 })
    const big = await call(s.url, '/api/v1/echo', { method: 'POST', headers: auth, body: 'x'.repeat(1025) })
    expect(big.status).toBe(413)
    expect(codeOf(big)).toBe('REQUEST_TOO_LARGE')
    // a head above maxHeaderBytes: 431
    const s2 = await server({ maxHeaderBytes: 2048 })
    expect((await call(s2.url, '/metrics', { headers: { 'x-pad': 'y'.repeat(4096) } })).status).toBe(431)
  })

  it('closes connections beyond maxConnectionsPerAddress from one address', async () => {
    const s = await server({ maxConnectionsPerAddress: 2 })
    const port = Number(new URL(s.url).port)
    const open = await Promise.all([0, 1].map(async () => {
      const socket = connect(port, '127.0.0.1')
      await once(socket, 'connect')
      return socket
    }))
    const third = connect(port, '127.0.0.1')
    third.on('error', () => {})
    await once(third, 'close')
    // the two held connections still work, and a new one does once one closes
    open[0].destroy()
    await once(open[0], 'close')
    await expect.poll(async () => (await call(s.url, '/metrics').catch(() => ({ status: 0 }))).status, { timeout: 10_000 }).toBe(200)
    open[1].destroy()
  })

  it('on an address other than loopback, /metrics needs the token too', async () => {
    const s = await server({ listen: '0.0.0.0:0' })
    const port = new URL(s.url).port
    const local = `http://127.0.0.1:${port}`
    expect((await call(local, '/metrics')).status).toBe(401)
    expect((await call(local, '/metrics', { headers: { authorization: `Bearer ${s.token}` } })).status).toBe(200)
  })

  it('refuses a bad listen address and a taken port with typed errors', async () => {
    await expect(server({ listen: 'example.com:80' })).rejects.toMatchObject({ name: 'InvalidHttpAddressError', code: 'INVALID_HTTP_ADDRESS' })
    await expect(server({ listen: '127.0.0.1:70000' })).rejects.toMatchObject({ code: 'INVALID_HTTP_ADDRESS' })
    const s = await server()
    await expect(server({ listen: `127.0.0.1:${new URL(s.url).port}` })).rejects.toMatchObject({ name: 'HttpListenError', code: 'HTTP_LISTEN_FAILED' })
    // options out of range are the caller's mistake
    await expect(server({ headersTimeout: 20_000, requestTimeout: 10_000 })).rejects.toThrow(/headersTimeout/)
    await expect(server({ maxConnections: 0 })).rejects.toThrow(/maxConnections/)
    await expect(server({ token: 'short' })).rejects.toThrow(/token/)
  })
})
