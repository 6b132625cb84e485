/**
 * Fields of the config's `management` section beyond its address
 * (spec/management.md 1.7 and 2.5): the HTTP server's and the dashboard's
 * limits (`management.http` as an object), and a management agent's grant
 * (`management.proofs`, `management.proofsFile`). The bounds of each limit
 * are here; their defaults are the management package's (`HTTP_DEFAULTS`,
 * `DASHBOARD_DEFAULTS`), which this file does not import: the management
 * package loads only when a node has a `management` section.
 */
import { readFile, stat } from 'node:fs/promises'
import { TOKEN_LIMITS } from '@ioa/collab/wire'
import { z } from 'zod'
import { HttpAddress, duration } from './config-fields.js'
import { decodeTokenText, tokenWords } from './token-text.js'
import { ConfigError } from './errors.js'
import type { NodeConfig } from './config.js'
import type { IoaManagementInit } from './management.js'
import type { Token } from '@ioa/collab'

/** `requestTimeout`'s default, ms (`HTTP_DEFAULTS.requestTimeout` of @ioa/management; a test keeps them equal) */
export const DEFAULT_REQUEST_TIMEOUT = 30_000

const count = (max: number): z.ZodNumber => z.number().int().min(1).max(max)

/** The dashboard's timeline limits (`DashboardInit`, spec/management.md 2.5) */
const DashboardLimits = z.object({
  /** Timeline entries held, the oldest go first @default 1000 */
  maxEvents: count(1_000_000).optional(),
  /** Entries in one timeline answer @default 200 */
  maxBatch: count(10_000).optional(),
  /** Longest `wait` a timeline reader may ask for, ms @default 25_000 */
  maxWait: duration(1, 600_000).optional(),
  /** Timeline readers waiting at once (429 beyond) @default 16 */
  maxWaits: count(10_000).optional()
}).strict()

/** `management.http` as an object: the address and the server's limits (`ManagementServerInit`, spec/management.md 2.5) */
const HttpServerConfig = z.object({
  /** `host:port` to listen on (2.1) */
  listen: HttpAddress,
  /** Host names besides IP literals and `localhost` that `Host` may name (a reverse proxy's) @default [] */
  allowedHosts: z.array(z.string().min(1).max(253).regex(/^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$/, 'a host name')).max(64).optional(),
  /** Open connections at once @default 64 */
  maxConnections: count(100_000).optional(),
  /** Open connections from one remote address @default 16 */
  maxConnectionsPerAddress: count(100_000).optional(),
  /** Largest request body, bytes @default 65_536 */
  maxRequestBytes: count(16_777_216).optional(),
  /** Largest request head, bytes @default 16_384 */
  maxHeaderBytes: z.number().int().min(1024).max(1_048_576).optional(),
  /** Time to receive a request's headers, ms (at most requestTimeout) @default 10_000 */
  headersTimeout: duration(100).optional(),
  /** Time to receive a whole request, ms @default 30_000 */
  requestTimeout: duration(100).optional(),
  /** An idle keep-alive connection closes after this, ms @default 5_000 */
  keepAliveTimeout: duration(100).optional(),
  /** New login links held at once, the oldest goes first (spec/management.md 2.2) @default 8 */
  maxLoginLinks: count(1_000).optional(),
  /** Lifetime of a new login link, ms @default 600_000 */
  loginLinkTtl: duration(1_000).optional(),
  /** Longest time to expiry of a login-link request's leaf token (`ioa login --http`), ms @default 300_000 */
  maxLoginProofTtl: duration(1_000).optional(),
  /** Leaf tokens of login-link requests remembered as used (429 beyond) @default 1_024 */
  maxUsedProofs: count(1_000_000).optional(),
  /** The dashboard's timeline limits @default the dashboard's */
  dashboard: DashboardLimits.optional()
}).strict().superRefine((h, ctx) => {
  const request = h.requestTimeout ?? DEFAULT_REQUEST_TIMEOUT
  if (h.headersTimeout != null && h.headersTimeout > request) {
    ctx.addIssue({ code: 'custom', path: ['headersTimeout'], message: `at most requestTimeout (${request} ms)` })
  }
})

export type HttpServerConfig = z.output<typeof HttpServerConfig>

/**
 * `management.http`: `host:port`, or an object with `listen` and the
 * server's limits (kept as given: `httpServerOf` reads either). A string's
 * errors name `management.http`, an object's the field inside it.
 */
export const HttpConfig = z.unknown().transform((value, ctx): string | HttpServerConfig => {
  const result = typeof value === 'string' ? HttpAddress.safeParse(value) : HttpServerConfig.safeParse(value)
  if (result.success) return result.data
  // the issues as they are (parseConfig words them), under management.http
  for (const issue of result.error.issues) ctx.addIssue(issue as Parameters<typeof ctx.addIssue>[0])
  return z.NEVER
})

/** `management.http` as the object form */
export function httpServerOf (http: string | HttpServerConfig): HttpServerConfig {
  return typeof http === 'string' ? { listen: http } : http
}

/** One token of a grant: its base64url text, decoded to check it (the node decodes it again at start) */
const TokenText = z.string().min(1).max(32_768).superRefine((text, ctx) => {
  try {
    decodeTokenText(text)
  } catch (err: any) {
    ctx.addIssue({ code: 'custom', message: `not a delegation token: ${String(err?.message ?? err).slice(0, 200)}` })
  }
})

/** The fields of a management agent's grant in the `management` section */
export const GrantFields = {
  /** The operator's grant to this node's key (`ioa.manage.*`), leaf first, as token strings (`ioa delegate`'s output); only with `role: "agent"` @default [] */
  proofs: z.array(TokenText).min(1).max(TOKEN_LIMITS.maxPool).optional(),
  /** A file (relative to the config file) of those tokens, white-space separated (`ioa delegate --out`); only with `role: "agent"`, not with `proofs` @default none */
  proofsFile: z.string().min(1).max(4096).optional()
}

/**
 * The node's `management` options of a parsed config section: the HTTP
 * server's address and limits, the dashboard's, the grant's tokens (from
 * `proofs`; `proofsFile` is read when the node starts, see `readGrantFile`)
 */
export function managementOf (section: NonNullable<NodeConfig['management']>): IoaManagementInit {
  const { http, proofs, proofsFile: _, ...rest } = section
  const out: IoaManagementInit = { ...rest }
  if (http != null) {
    const { listen, allowedHosts, dashboard, maxLoginProofTtl, maxUsedProofs, ...httpLimits } = httpServerOf(http)
    out.http = listen
    if (allowedHosts != null) out.allowedHosts = allowedHosts
    if (maxLoginProofTtl != null || maxUsedProofs != null) {
      out.loginLimits = { ...(maxLoginProofTtl != null ? { maxLoginProofTtl } : {}), ...(maxUsedProofs != null ? { maxUsedProofs } : {}) }
    }
    if (Object.keys(httpLimits).length > 0) out.httpLimits = httpLimits
    if (dashboard != null) out.dashboard = dashboard
  }
  if (proofs != null) out.proofs = proofs.map(t => decodeTokenText(t))
  return out
}

/** Largest grant file, bytes: `maxPool` tokens of the largest size, as base64url, with a separator each */
const MAX_GRANT_FILE = TOKEN_LIMITS.maxPool * (Math.ceil(TOKEN_LIMITS.maxTokenBytes * 4 / 3) + 1)

/** The tokens of `management.proofsFile` (an absolute path once the config is loaded); throws `ConfigError` naming the field */
export async function readGrantFile (path: string): Promise<Token[]> {
  const field = 'management.proofsFile'
  let text: string
  try {
    const s = await stat(path)
    if (!s.isFile()) throw new Error('not a file')
    if (s.size > MAX_GRANT_FILE) throw new Error(`larger than ${MAX_GRANT_FILE} bytes`)
    text = await readFile(path, 'utf8')
  } catch (err: any) {
    throw new ConfigError(`Cannot read the management agent's grant ${path}: ${err?.code ?? err?.message ?? err}`, field, { cause: err })
  }
  const words = tokenWords(text)
  if (words.length === 0) throw new ConfigError(`The management agent's grant ${path} holds no token`, field)
  if (words.length > TOKEN_LIMITS.maxPool) throw new ConfigError(`The management agent's grant ${path} holds more than ${TOKEN_LIMITS.maxPool} tokens`, field)
  return words.map((w, i) => {
    try {
      return decodeTokenText(w)
    } catch (err: any) {
      throw new ConfigError(`Token ${i} of the management agent's grant ${path} is not a delegation token: ${String(err?.message ?? err).slice(0, 200)}`, field, { cause: err })
    }
  })
}
