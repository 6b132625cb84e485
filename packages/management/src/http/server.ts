/**
 * The management HTTP server (spec/management.md 2): `GET /metrics` in
 * Prometheus text, the operator's login, and the API routes the management
 * plane adds (`route`). node:http, loopback by default, every request's
 * `Host` and `Origin` checked, everything but `/metrics` on loopback behind
 * the operator's token; bounded in connections (per node and per remote
 * address), header and body size, and time. Logs on `ioa:management:http`.
 */
import { createServer } from 'node:http'
import { LOGIN_LINK_DEFAULTS, OperatorAuth } from './auth.js'
import { LoginLinkRefusal, LoginProofs } from './login-link.js'
import { hostAllowed, isLoopback, originAllowed, parseHttpAddress } from './address.js'
import { HttpListenError, REFUSALS } from './errors.js'
import type { Refusal } from './errors.js'
import type { LoginAuthority } from './login-link.js'
import type { ComponentLogger, Logger } from '@libp2p/interface'
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import type { Registry } from 'prom-client'

/** Options of the management HTTP server; every limit is per server, and connections also per remote address */
export interface ManagementServerInit {
  /**
   * `host:port` to listen on (`127.0.0.1:9464`, `[::1]:0`); port 0 picks a free one
   *
   * @default '127.0.0.1:9464'
   */
  listen?: string
  /** The registry whose metrics `GET /metrics` serves */
  registry: Registry
  logger: ComponentLogger
  /**
   * The operator's token (32-128 base64url characters)
   *
   * @default 32 random bytes, new at every start
   */
  token?: string
  /**
   * Host names (besides IP addresses and `localhost`) a request's `Host`
   * header may name, e.g. the name of a reverse proxy in front of the server
   *
   * @default []
   */
  allowedHosts?: string[]
  /**
   * Open connections at once; more are closed as they come
   *
   * @default 64
   */
  maxConnections?: number
  /**
   * Open connections from one remote address at once
   *
   * @default 16
   */
  maxConnectionsPerAddress?: number
  /**
   * Largest request body, bytes (`413 REQUEST_TOO_LARGE` beyond)
   *
   * @default 65_536
   */
  maxRequestBytes?: number
  /**
   * Largest request head (request line and headers), bytes (`431` beyond)
   *
   * @default 16_384
   */
  maxHeaderBytes?: number
  /**
   * Time to receive a request's headers, ms (at most `requestTimeout`)
   *
   * @default 10_000
   */
  headersTimeout?: number
  /**
   * Time to receive a whole request, ms
   *
   * @default 30_000
   */
  requestTimeout?: number
  /**
   * How long an idle keep-alive connection stays open, ms
   *
   * @default 5_000
   */
  keepAliveTimeout?: number
  /**
   * Who may ask for a new login link with a delegation chain from the
   * operator's key (`POST /api/v1/login-link`, spec/management.md 2.2);
   * without it only the operator's token (or session) can
   *
   * @default none
   */
  loginAuthority?: LoginAuthority
  /**
   * New login links not yet expired at once; the oldest goes first
   *
   * @default 8
   */
  maxLoginLinks?: number
  /**
   * Lifetime of a new login link, ms
   *
   * @default 600_000
   */
  loginLinkTtl?: number
}

/** The defaults of `ManagementServerInit`'s limits */
export const HTTP_DEFAULTS = {
  listen: '127.0.0.1:9464',
  maxConnections: 64,
  maxConnectionsPerAddress: 16,
  maxRequestBytes: 65_536,
  maxHeaderBytes: 16_384,
  headersTimeout: 10_000,
  requestTimeout: 30_000,
  keepAliveTimeout: 5_000,
  maxLoginLinks: 8,
  loginLinkTtl: 600_000
} as const

/** What a route answers: a status (200), and a body: a string (text/plain unless `type` says), bytes, or a value sent as JSON */
export interface RouteResponse {
  status?: number
  type?: string
  headers?: Record<string, string>
  body: unknown
}

/** A request to a route: the parsed URL and, for POST, the body (at most `maxRequestBytes`) */
export interface RouteRequest {
  readonly method: string
  readonly url: URL
  readonly headers: IncomingMessage['headers']
  readonly body?: Uint8Array
  /** The remote address of the request's connection (for log lines) */
  readonly remoteAddress?: string
}

export type RouteHandler = (req: RouteRequest) => RouteResponse | Promise<RouteResponse>

export interface RouteOptions {
  /**
   * Serve without the operator's token (only when the server listens on
   * loopback; on any other address every route needs the token)
   *
   * @default false
   */
  open?: boolean
  /**
   * Serve to anyone who passes the Host and Origin checks, on any address
   * (the dashboard's static files, which hold no data)
   *
   * @default false
   */
  public?: boolean
}

/** A running management HTTP server */
export interface ManagementServer {
  /** `http://host:port` it listens on */
  readonly url: string
  /** The URL that logs the operator in (it carries the token: show it to the operator only) */
  readonly loginUrl: string
  /** The operator's token (`Authorization: Bearer <token>`) */
  readonly token: string
  /** A new one-time login URL (valid `loginLinkTtl`), as `POST /api/v1/login-link` answers */
  newLoginLink(): { login: string, expiresAt: number }
  /** Add a route (`GET` or `POST`, an exact path such as `/api/v1/topology`) */
  route(method: 'GET' | 'POST', path: string, handler: RouteHandler, options?: RouteOptions): void
  close(): Promise<void>
}

interface Route {
  handler: RouteHandler
  /** `operator`: the token or session; `loopback`: open when the server listens on loopback; `public`: the handler checks */
  access: 'operator' | 'loopback' | 'public'
}

function positive (name: string, value: number | undefined, fallback: number): number {
  const v = value ?? fallback
  if (!Number.isInteger(v) || v < 1 || v > 2_147_483_647) throw new TypeError(`${name} must be a positive integer, got ${String(value)}`)
  return v
}

/** Start the management HTTP server; throws `InvalidHttpAddressError` or `HttpListenError` */
export async function startManagementServer (init: ManagementServerInit): Promise<ManagementServer> {
  const log = init.logger.forComponent('ioa:management:http')
  const address = parseHttpAddress(init.listen ?? HTTP_DEFAULTS.listen)
  const limits = {
    maxConnections: positive('maxConnections', init.maxConnections, HTTP_DEFAULTS.maxConnections),
    maxConnectionsPerAddress: positive('maxConnectionsPerAddress', init.maxConnectionsPerAddress, HTTP_DEFAULTS.maxConnectionsPerAddress),
    maxRequestBytes: positive('maxRequestBytes', init.maxRequestBytes, HTTP_DEFAULTS.maxRequestBytes),
    maxHeaderBytes: positive('maxHeaderBytes', init.maxHeaderBytes, HTTP_DEFAULTS.maxHeaderBytes),
    headersTimeout: positive('headersTimeout', init.headersTimeout, HTTP_DEFAULTS.headersTimeout),
    requestTimeout: positive('requestTimeout', init.requestTimeout, HTTP_DEFAULTS.requestTimeout),
    keepAliveTimeout: positive('keepAliveTimeout', init.keepAliveTimeout, HTTP_DEFAULTS.keepAliveTimeout)
  }
  if (limits.headersTimeout > limits.requestTimeout) throw new TypeError(`headersTimeout (${limits.headersTimeout} ms) must not be above requestTimeout (${limits.requestTimeout} ms)`)
  const auth = new OperatorAuth(init.token, {
    maxLinks: positive('maxLoginLinks', init.maxLoginLinks, LOGIN_LINK_DEFAULTS.maxLinks),
    linkTtl: positive('loginLinkTtl', init.loginLinkTtl, LOGIN_LINK_DEFAULTS.linkTtl)
  })
  const loopback = isLoopback(address.host)
  const routes = new Map<string, Route>()
  const server = createServer({
    maxHeaderSize: limits.maxHeaderBytes,
    headersTimeout: limits.headersTimeout,
    requestTimeout: limits.requestTimeout,
    keepAliveTimeout: limits.keepAliveTimeout
  })
  server.maxConnections = limits.maxConnections
  limitPerAddress(server, limits.maxConnectionsPerAddress, log)

  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => {
      reject(new HttpListenError(`The management HTTP server could not listen on ${init.listen ?? HTTP_DEFAULTS.listen}: ${err.code ?? err.message}`, { cause: err }))
    })
    server.listen(address.port, address.host, () => { resolve() })
  })
  const port = (server.address() as AddressInfo).port
  const allowedHosts = new Set((init.allowedHosts ?? []).map(h => h.toLowerCase()))
  const hostPart = address.host.includes(':') ? `[${address.host}]` : address.host
  const url = `http://${hostPart}:${port}`

  routes.set('GET /metrics', {
    access: 'loopback',
    handler: async () => ({ type: init.registry.contentType, body: await init.registry.metrics() })
  })
  routes.set('GET /login', {
    access: 'public',
    handler: (req) => {
      // the link logs in once: a second use gets no cookie (a browser that holds the session goes on to the page)
      const result = auth.login(req.url.searchParams.get('token'))
      if (result === 'session') return { status: 303, headers: { location: '/', 'set-cookie': auth.sessionCookie() }, body: '' }
      if (result === 'used' && auth.hasSession(req.headers)) return { status: 303, headers: { location: '/' }, body: '' }
      const refusal = result === 'used' ? REFUSALS.loginUsed : REFUSALS.unauthorized
      log('refused a login from %s: %s', req.remoteAddress, refusal.code)
      return loginRefusal(refusal, req.headers.accept)
    }
  })

  // a new one-time login link: for the operator's token or session, or a chain from the operator's key
  const newLoginLink = (): { login: string, expiresAt: number } => {
    const { secret, expiresAt } = auth.newLink()
    return { login: `${url}/login?token=${secret}`, expiresAt }
  }
  const proofs = init.loginAuthority != null ? new LoginProofs(init.loginAuthority) : undefined
  if (proofs != null) routes.set('GET /api/v1/login-link', { access: 'public', handler: () => ({ body: proofs.describe() }) })
  routes.set('POST /api/v1/login-link', {
    access: 'public',
    handler: async (req) => {
      let how = 'the operator\'s token'
      if (!auth.authorized(req)) {
        if (proofs == null) {
          log('refused a login link to %s: %s', req.remoteAddress, REFUSALS.unauthorized.code)
          return refusalResponse(REFUSALS.unauthorized)
        }
        try {
          const chain = await proofs.check(req.body)
          how = `a chain of ${chain.length} token(s) from ${chain[0].payload.iss}`
        } catch (err) {
          if (!(err instanceof LoginLinkRefusal)) throw err
          log('refused a login link to %s: %d %s %s', req.remoteAddress, err.refusal.status, err.refusal.code, err.refusal.message)
          return refusalResponse(err.refusal)
        }
      }
      const link = newLoginLink()
      log('made a new login link for %s (%s), valid until %s', req.remoteAddress, how, new Date(link.expiresAt).toISOString())
      return { body: link }
    }
  })

  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    handle(req, res).catch((err: unknown) => {
      log.error('%s %s failed: %e', req.method, req.url?.slice(0, 200), err)
      if (!res.headersSent) send(res, refusalResponse(REFUSALS.internal))
      else res.destroy()
    })
  })
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
    log('bad request from %s: %s', socket.remoteAddress, err.code ?? err.message)
    if (socket.writable) socket.end(err.code === 'HPE_HEADER_OVERFLOW' ? 'HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n\r\n' : 'HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n')
    else socket.destroy()
  })

  const refuse = (req: IncomingMessage, res: ServerResponse, r: Refusal): void => {
    log('refused %s %s from %s: %d %s', req.method, (req.url ?? '').replace(/token=[^&]*/, 'token=…').slice(0, 200), req.socket.remoteAddress, r.status, r.code)
    send(res, refusalResponse(r))
    req.resume()
  }

  async function handle (req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (!hostAllowed(req.headers.host, port, allowedHosts)) { refuse(req, res, REFUSALS.misdirected); return }
    if (!originAllowed(req.headers.origin, port, allowedHosts) || req.headers['sec-fetch-site'] === 'cross-site') { refuse(req, res, REFUSALS.crossOrigin); return }
    const target = new URL(req.url ?? '/', url)
    const method = req.method === 'HEAD' ? 'GET' : (req.method ?? '')
    const route = routes.get(`${method} ${target.pathname}`)
    if (route == null) {
      const other = routes.has(`GET ${target.pathname}`) || routes.has(`POST ${target.pathname}`)
      refuse(req, res, other ? REFUSALS.method : REFUSALS.notFound)
      return
    }
    const allowed = route.access === 'public' || (route.access === 'loopback' && loopback) || auth.authorized(req)
    if (!allowed) { refuse(req, res, REFUSALS.unauthorized); return }
    const declared = Number(req.headers['content-length'] ?? 0)
    if (!(declared <= limits.maxRequestBytes)) { refuse(req, res, REFUSALS.tooLarge); return }
    const body = method === 'POST' ? await readBody(req, limits.maxRequestBytes) : undefined
    if (body === null) { refuse(req, res, REFUSALS.tooLarge); return }
    if (method !== 'POST') req.resume()
    send(res, await route.handler({ method, url: target, headers: req.headers, body, remoteAddress: req.socket.remoteAddress }), req.method === 'HEAD')
  }

  log('listening on %s (/metrics %s)', url, loopback ? 'open on loopback' : 'behind the token: not a loopback address')
  return {
    url,
    loginUrl: `${url}/login?token=${auth.token}`,
    token: auth.token,
    newLoginLink,
    route (method, path, handler, options = {}) {
      if (!/^\/[A-Za-z0-9._~/-]*$/.test(path)) throw new TypeError(`Invalid route path ${path}`)
      if (routes.has(`${method} ${path}`)) throw new TypeError(`Route ${method} ${path} exists`)
      routes.set(`${method} ${path}`, { handler, access: options.public === true ? 'public' : options.open === true ? 'loopback' : 'operator' })
    },
    async close () {
      server.closeAllConnections()
      await new Promise<void>(resolve => { server.close(() => { resolve() }) })
      log('closed')
    }
  }
}

/** Close connections beyond `max` from one remote address */
function limitPerAddress (server: Server, max: number, log: Logger): void {
  const open = new Map<string, number>()
  server.on('connection', (socket: Socket) => {
    const from = socket.remoteAddress ?? ''
    const n = (open.get(from) ?? 0) + 1
    if (n > max) {
      log('closed a connection from %s: %d open from that address already', from, max)
      socket.destroy()
      return
    }
    open.set(from, n)
    socket.once('close', () => {
      const left = (open.get(from) ?? 1) - 1
      if (left <= 0) open.delete(from)
      else open.set(from, left)
    })
  })
}

/** The body of a request, or null past `max` bytes */
async function readBody (req: IncomingMessage, max: number): Promise<Uint8Array | null> {
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of req) {
    size += (chunk as Buffer).byteLength
    if (size > max) return null
    chunks.push(chunk as Buffer)
  }
  return Buffer.concat(chunks)
}

/** A refusal of `/login`: a page for a browser (its `Accept` names text/html), else the JSON of every refusal */
function loginRefusal (r: Refusal, accept: string | undefined): RouteResponse {
  const json = refusalResponse(r)
  if (accept == null || !/\btext\/html\b/i.test(accept)) return json
  const page = `<!doctype html><meta charset="utf-8"><title>ioa: login refused</title><h1>Login refused</h1><p>${r.message.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')}</p><p><code>${r.code}</code></p>`
  return { ...json, type: 'text/html; charset=utf-8', body: page }
}

function refusalResponse (r: Refusal): RouteResponse {
  return {
    status: r.status,
    headers: r.status === 401 ? { 'www-authenticate': 'Bearer realm="ioa"' } : {},
    body: { error: { code: r.code, message: r.message } }
  }
}

function send (res: ServerResponse, r: RouteResponse, headOnly = false): void {
  let type = r.type
  let body: string | Uint8Array
  if (typeof r.body === 'string') {
    body = r.body
    type ??= 'text/plain; charset=utf-8'
  } else if (r.body instanceof Uint8Array) {
    body = r.body
    type ??= 'application/octet-stream'
  } else {
    body = JSON.stringify(r.body)
    type ??= 'application/json'
  }
  res.writeHead(r.status ?? 200, {
    'content-type': type,
    'content-length': Buffer.byteLength(body),
    'cache-control': 'no-store',
    'x-content-type-options': 'nosniff',
    'x-frame-options': 'DENY',
    ...r.headers
  })
  res.end(headOnly ? undefined : body)
}
