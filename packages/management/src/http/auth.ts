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

/** What a login with a token came to: a new session, a link used before, or a wrong (or expired) token */
export type LoginResult = 'session' | 'used' | 'wrong'

/** Bounds of the new login links (`newLink`) */
export interface LoginLinkLimits {
  /** Links made and not yet expired, at most; the oldest goes first */
  maxLinks: number
  /** Lifetime of a link, ms */
  linkTtl: number
}

/** Defaults of {@link LoginLinkLimits} */
export const LOGIN_LINK_DEFAULTS: LoginLinkLimits = Object.freeze({ maxLinks: 8, linkTtl: 600_000 })

/** The operator's token and the session it is exchanged for */
export class OperatorAuth {
  readonly token: string
  private readonly tokenDigest: Buffer
  private readonly session: string
  private readonly sessionDigest: Buffer
  /** The login link was used: it gave its one session cookie */
  private loggedIn = false
  /** New one-time links by the hex SHA-256 of their secret (a hash lookup on a digest tells nothing of the secret), oldest first */
  private readonly links = new Map<string, { expiresAt: number, used: boolean }>()

  constructor (token: string = newSecret(), private readonly limits: LoginLinkLimits = LOGIN_LINK_DEFAULTS) {
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
    if (!this.isToken(given)) return this.linkLogin(given)
    if (this.loggedIn) return 'used'
    this.loggedIn = true
    return 'session'
  }

  /**
   * A new one-time login secret (spec/management.md 2.2, "A new login
   * link"): it logs a browser in once within `linkTtl`; it is no `Bearer`
   * credential
   */
  newLink (now = Date.now()): { secret: string, expiresAt: number } {
    this.prune(now)
    while (this.links.size >= this.limits.maxLinks) this.links.delete(this.links.keys().next().value as string)
    const secret = newSecret()
    const expiresAt = now + this.limits.linkTtl
    this.links.set(digest(secret).toString('hex'), { expiresAt, used: false })
    return { secret, expiresAt }
  }

  private linkLogin (given: string | null | undefined, now = Date.now()): LoginResult {
    if (given == null || given.length > 512) return 'wrong'
    this.prune(now)
    const link = this.links.get(digest(given).toString('hex'))
    if (link == null) return 'wrong'
    if (link.used) return 'used'
    link.used = true
    return 'session'
  }

  private prune (now: number): void {
    for (const [k, l] of this.links) if (l.expiresAt <= now) this.links.delete(k)
  }

  /** Do the request's headers carry the session cookie? */
  hasSession (headers: IncomingMessage['headers']): boolean {
    return same(cookie(headers.cookie, SESSION_COOKIE), this.sessionDigest)
  }

  /** Does the request carry the operator's authority (bearer token or session cookie)? */
  authorized (req: { headers: IncomingMessage['headers'] }): boolean {
    const auth = req.headers.authorization
    if (auth != null && /^Bearer /i.test(auth)) return same(auth.slice(7).trim(), this.tokenDigest)
    return this.hasSession(req.headers)
  }

  /** The `Set-Cookie` header of a login */
  sessionCookie (): string {
    return `${SESSION_COOKIE}=${this.session}; HttpOnly; SameSite=Strict; Path=/`
  }
}
