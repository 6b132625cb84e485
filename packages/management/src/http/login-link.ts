/**
 * A new login link without a restart (spec/management.md 2.2, "A new login
 * link"): `POST /api/v1/login-link` answers a new one-time login URL to a
 * caller with the operator's authority, either the operator's token (or
 * session), or a delegation chain rooted at the operator's key granting
 * `ioa.manage.login` to this node, its leaf short-lived and used once (what
 * `ioa login --http <url> --key <operator key>` sends). `GET
 * /api/v1/login-link` tells a client what to address its leaf to.
 */
import { tokenCid } from '@ioa/collab'
import { decodeToken } from '@ioa/collab/wire'
import { authorize } from '../protocol/auth.js'
import { MAX_CHAIN_TOKENS } from '../protocol/auth.js'
import { REFUSALS } from './errors.js'
import type { Refusal } from './errors.js'
import type { Token } from '@ioa/collab'
import type { Did } from '@ioa/interconnect'

/** The capability a login-link request's chain must grant */
export const LOGIN_CAPABILITY = 'ioa.manage.login'

/** Who may ask for a new login link with a delegation chain (`ManagementServerInit.loginAuthority`) */
export interface LoginAuthority {
  /** This node's did: the leaf's audience */
  node: Did
  /** The operator: the root the chain must have (without one, only the token can ask) */
  operator?: Did
  /** Revocations checked on the chain */
  isRevoked?: (cid: string, issuers: readonly Did[]) => boolean | Promise<boolean>
  /**
   * Tolerance of the chain's `exp` / `nbf` checks, ms
   *
   * @default 30_000
   */
  clockSkew?: number
  /**
   * Longest time to expiry a leaf may have, ms (a leaf is used once; the
   * server remembers it until it expires)
   *
   * @default 300_000
   */
  maxLoginProofTtl?: number
  /**
   * Leaves remembered as used; past it a new request is refused until the
   * oldest expires
   *
   * @default 1_024
   */
  maxUsedProofs?: number
}

/** Defaults of {@link LoginAuthority} */
export const LOGIN_AUTHORITY_DEFAULTS = Object.freeze({ clockSkew: 30_000, maxLoginProofTtl: 300_000, maxUsedProofs: 1_024 })

/** A refusal of a login-link request, with the code of the check that failed */
export class LoginLinkRefusal extends Error {
  constructor (readonly refusal: Refusal) {
    super(refusal.message)
  }
}

/** The checks of a login-link request's chain; each leaf once */
export class LoginProofs {
  /** CIDs of the leaves used, with their expiry */
  private readonly used = new Map<string, number>()

  constructor (private readonly authority: LoginAuthority) {}

  /** What a client addresses its leaf to (the public `GET`) */
  describe (): { node: Did, capability: string, maxTtl: number } {
    return { node: this.authority.node, capability: LOGIN_CAPABILITY, maxTtl: this.authority.maxLoginProofTtl ?? LOGIN_AUTHORITY_DEFAULTS.maxLoginProofTtl }
  }

  /** Check a request body `{ proofs: [token string, …] }`; throws `LoginLinkRefusal` */
  async check (body: Uint8Array | undefined): Promise<Token[]> {
    const a = this.authority
    if (a.operator == null) throw new LoginLinkRefusal(REFUSALS.noLoginAuthority)
    const proofs = parseBody(body)
    const now = Date.now()
    for (const [cid, exp] of this.used) if (exp + (a.clockSkew ?? LOGIN_AUTHORITY_DEFAULTS.clockSkew) < now) this.used.delete(cid)
    const leaf = proofs[0]
    const maxTtl = a.maxLoginProofTtl ?? LOGIN_AUTHORITY_DEFAULTS.maxLoginProofTtl
    if (leaf.payload.exp - now > maxTtl) throw new LoginLinkRefusal({ ...REFUSALS.loginProofTooLong, message: `The leaf token expires in ${leaf.payload.exp - now} ms: at most ${maxTtl} ms` })
    const cid = (await tokenCid(leaf)).toString()
    if (this.used.has(cid)) throw new LoginLinkRefusal(REFUSALS.loginProofUsed)
    if (this.used.size >= (a.maxUsedProofs ?? LOGIN_AUTHORITY_DEFAULTS.maxUsedProofs)) throw new LoginLinkRefusal({ status: 429, code: 'TOO_MANY_REQUESTS', message: 'Too many login links asked for: try again later' })
    try {
      // no connection authenticates the caller: the leaf's own signature does (its issuer is the caller)
      await authorize(proofs, { operator: a.operator, node: a.node, caller: leaf.payload.iss, method: 'login', clockSkew: a.clockSkew, isRevoked: a.isRevoked })
    } catch (err: any) {
      throw new LoginLinkRefusal({ status: 401, code: typeof err?.code === 'string' ? err.code : 'UNAUTHORIZED', message: String(err?.message ?? err) })
    }
    this.used.set(cid, leaf.payload.exp)
    return proofs
  }
}

function parseBody (body: Uint8Array | undefined): Token[] {
  let value: unknown
  try {
    value = JSON.parse(new TextDecoder().decode(body ?? new Uint8Array()))
  } catch {
    throw new LoginLinkRefusal(REFUSALS.badRequest)
  }
  const list = (value as { proofs?: unknown } | null)?.proofs
  if (value == null || typeof value !== 'object' || Object.keys(value).some(k => k !== 'proofs') ||
    !Array.isArray(list) || list.length === 0 || list.length > MAX_CHAIN_TOKENS || !list.every(t => typeof t === 'string' && t.length <= 65_536)) {
    throw new LoginLinkRefusal(REFUSALS.badRequest)
  }
  try {
    return (list as string[]).map(t => decodeToken(new Uint8Array(Buffer.from(t, 'base64url'))))
  } catch (err: any) {
    throw new LoginLinkRefusal({ status: 400, code: typeof err?.code === 'string' ? err.code : 'INVALID_TOKEN', message: String(err?.message ?? err) })
  }
}
