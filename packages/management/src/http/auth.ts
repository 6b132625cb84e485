/**
 * The operator's authority on the management HTTP server
 * (spec/management.md 2.2): a random token made when the server starts,
 * shown once in the login URL `ioa start` prints; the login URL exchanges
 * it for a session cookie (for the page) once only, and the API takes it as
 * `Authorization: Bearer <token>`. Tokens and cookies are compared in
 * constant time.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto'
import type { IncomingMessage } from 'node:http'

/** The session cookie's name */
export const SESSION_COOKIE = 'ioa_session'

const digest = (s: string): Buffer => createHash('sha256').update(s).digest()

/** Is `given` equal to `secret`, compared in constant time */
function same (given: string | undefined, secret: Buffer): boolean {
  return given != null && given.length <= 512 && timingSafeEqual(digest(given), secret)
}

/** A new secret: 32 random bytes in base64url (43 characters) */
export function newSecret (): string {
  return randomBytes(32).toString('base64url')
}

/** The value of cookie `name` in a `Cookie` header */
function cookie (header: string | undefined, name: string): string | undefined {
  if (header == null) return undefined
  for (const part of header.split(';')) {
    const i = part.indexOf('=')
    if (i > 0 && part.slice(0, i).trim() === name) return part.slice(i + 1).trim()
  }
  return undefined
}

/** What a login with a token came to: a new session, a link used before, or a wrong token */
export type LoginResult = 'session' | 'used' | 'wrong'

/** The operator's token and the session it is exchanged for */
export class OperatorAuth {
  readonly token: string
  private readonly tokenDigest: Buffer
  private readonly session: string
  private readonly sessionDigest: Buffer
  /** The login link was used: it gave its one session cookie */
  private loggedIn = false

  constructor (token: string = newSecret()) {
    if (typeof token !== 'string' || !/^[A-Za-z0-9_-]{32,128}$/.test(token)) throw new TypeError('The operator token must be 32-128 base64url characters')
    this.token = token
    this.tokenDigest = digest(token)
    this.session = newSecret()
    this.sessionDigest = digest(this.session)
  }

  /** Is this the operator's token? */
  private isToken (given: string | null | undefined): boolean {
    return same(given ?? undefined, this.tokenDigest)
  }

  /** A login with `given` (the login URL's token): a session the first time only (`used` after) */
  login (given: string | null | undefined): LoginResult {
    if (!this.isToken(given)) return 'wrong'
    if (this.loggedIn) return 'used'
    this.loggedIn = true
    return 'session'
  }

  /** Do the request's headers carry the session cookie? */
  hasSession (headers: IncomingMessage['headers']): boolean {
    return same(cookie(headers.cookie, SESSION_COOKIE), this.sessionDigest)
  }

  /** Does the request carry the operator's authority (bearer token or session cookie)? */
  authorized (req: IncomingMessage): boolean {
    const auth = req.headers.authorization
    if (auth != null && /^Bearer /i.test(auth)) return same(auth.slice(7).trim(), this.tokenDigest)
    return this.hasSession(req.headers)
  }

  /** The `Set-Cookie` header of a login */
  sessionCookie (): string {
    return `${SESSION_COOKIE}=${this.session}; HttpOnly; SameSite=Strict; Path=/`
  }
}
