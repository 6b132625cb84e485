/**
 * Delegation tokens: chained, signed grants of capabilities from one principal
 * (a user, an agent, a domain) to another, each link narrower than the one
 * before. In the spirit of UCAN, in our own DAG-CBOR format.
 * Normative description: `spec/collab-delegation.md`.
 *
 * This file is the token (format, limits, signing, validation); attenuation
 * and chain verification are in chain.ts, re-exported here.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { domainSeparated, isCapability } from '@ioa/interconnect'
import { randomBytes } from '@libp2p/crypto'
import { base64url } from 'multiformats/bases/base64'
import { CID } from 'multiformats/cid'
import { sha256 } from 'multiformats/hashes/sha2'
import { equals as bytesEqual } from 'uint8arrays/equals'
import { InvalidSignatureError, InvalidTokenError } from '../errors.js'
import { definedKeys, isPlainMap, onlyKeys as strictKeys } from '../shape.js'
import { checkAgainstProofs } from './chain.js'
import { signWith } from './ed25519.js'
import { defaultVerificationCache } from './verification-cache.js'
import type { VerificationCache } from './verification-cache.js'
import type { KnownToken, TokenMemo } from './token-memo.js'
import type { Did, Identity } from '@ioa/interconnect'

/** Token format version (`v`) */
export const TOKEN_VERSION = 1

/** Domain separation: a token signature is over these bytes + DAG-CBOR(payload) */
export const TOKEN_SIG_PREFIX = 'ioa:ucan:v1\n'
const SIG_PREFIX_BYTES = new TextEncoder().encode(TOKEN_SIG_PREFIX)

/** Limits on tokens; a token that breaks one is `INVALID_TOKEN` */
export const TOKEN_LIMITS = Object.freeze({
  /** Largest encoded token (DAG-CBOR `{ payload, sig }`) */
  maxTokenBytes: 16_384,
  /** Capabilities per token (at least 1) */
  maxCapabilities: 16,
  /** Proofs (`prf`) per token */
  maxProofs: 8,
  /** Keys in one capability's `constraints` */
  maxConstraints: 32,
  /** Length of a constraint key */
  maxConstraintKey: 64,
  /** Nesting of lists and maps inside one constraint value */
  maxConstraintDepth: 8,
  /** Nonce length, in base64url characters */
  minNonce: 16,
  maxNonce: 64,
  /** Tokens a verifier accepts in the proof pool of one verification */
  maxPool: 128,
  /** Largest `maxDepth` a verifier accepts as an option */
  maxDepthLimit: 32
})

/** Default longest chain (tokens from the leaf to the root, both counted) */
export const DEFAULT_MAX_DEPTH = 8
/** Default tolerance of the `exp` / `nbf` checks, in ms */
export const DEFAULT_CLOCK_SKEW = 30_000

/** Multicodec of DAG-CBOR: the codec of a token CID */
const DAG_CBOR = 0x71

/**
 * What a token grants. `skill` is a capability name (`payment.pay`), a prefix
 * pattern (`travel.*`: `travel` and everything below it) or `*` (everything).
 * `constraints` narrow it: see {@link capabilityCovers}.
 */
export interface Capability {
  skill: string
  constraints?: Record<string, unknown>
}

/** The signed part of a token */
export interface TokenPayload {
  v: 1
  /** Who grants (signs) */
  iss: Did
  /** Who receives; only the audience can delegate further or invoke */
  aud: Did
  cap: Capability[]
  /** Not valid before (ms since the Unix epoch) */
  nbf?: number
  /** Not valid after (ms since the Unix epoch) */
  exp: number
  /** 16 random bytes, base64url without padding (22 characters) */
  nonce: string
  /** CIDs (strings) of the parent tokens this one is proven by; empty for a root token */
  prf: string[]
}

export interface Token {
  payload: TokenPayload
  /** Ed25519 signature of the issuer over `ioa:ucan:v1\n` + DAG-CBOR(payload) */
  sig: Uint8Array
}

export interface DelegateInit {
  audience: Did
  capabilities: Capability[]
  /** ms since the Unix epoch */
  expiresAt: number
  /**
   * ms since the Unix epoch. When absent and a proof has `nbf`, the latest
   * `nbf` of the proofs is used (a child may not start before its parents).
   */
  notBefore?: number
  /** Parent tokens; their CIDs become `prf` */
  proofs?: Token[]
  /** Only for test vectors: a fixed nonce instead of 16 random bytes */
  nonce?: string
}

export interface VerifiedChain {
  /** Issuer of the root token(s): the principal the authority comes from */
  root: Did
  /** Audience of the leaf: who may use the capabilities */
  audience: Did
  /** The leaf's capabilities (all proven) */
  capabilities: Capability[]
  /** Earliest `exp` of every token verified */
  expiresAt: number
  /** Leaf first, root last: the provenance of the leaf's first capability */
  path: Token[]
  /** CIDs of `path`, same order */
  cids: string[]
}

export interface VerifyChainOptions {
  /** Current time, ms since the Unix epoch @default Date.now() */
  now?: number
  /** Tolerance of the `exp` / `nbf` checks, ms @default 30_000 */
  clockSkew?: number
  /** Longest chain, in tokens from leaf to root @default 8 */
  maxDepth?: number
  /**
   * Asked for every token verified (not only those of `path`). `issuers` are
   * the principals that may revoke this token: its issuer and the issuers of
   * every token it is proven by (see `RevocationStore.isRevoked`).
   */
  isRevoked?: (cid: string, issuers: readonly Did[]) => boolean | Promise<boolean>
  /** When given, the root issuer must be one of these */
  roots?: Did[]
  /**
   * Where the parsed keys and the tokens whose signature verified are kept
   * (only successes, by the token's CID)
   *
   * @default the process-wide `defaultVerificationCache`
   */
  verificationCache?: VerificationCache
  signal?: AbortSignal
}

// ---------------------------------------------------------------------------
// keys
//
// The parsed keys, verified signatures and canonical CIDs are kept in a
// `VerificationCache` (verification-cache.ts): the one of the owner that
// verifies, or for the free functions the process-wide default.

/** @internal Is `value` an Ed25519 did:key (what `isDid` checks), with the parsed key cached */
export function isEd25519Did (value: unknown): value is Did {
  return defaultVerificationCache.isEd25519Did(value)
}

// ---------------------------------------------------------------------------
// validation

const NONCE = /^[A-Za-z0-9_-]+$/

const invalidToken = (message: string): Error => new InvalidTokenError(message)

/** Unknown fields of a token, its payload or a capability are INVALID_TOKEN */
function onlyKeys (map: Record<string, unknown>, allowed: readonly string[], what: string): void {
  strictKeys(map, allowed, what, invalidToken)
}

function isTime (value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0
}

/** Is `skill` a valid pattern: `*`, a capability name, or a name followed by `.*`? */
export function isSkillPattern (skill: unknown): skill is string {
  if (typeof skill !== 'string') return false
  if (skill === '*') return true
  if (skill.endsWith('.*')) return isCapability(skill.slice(0, -2))
  return isCapability(skill)
}

/** A copy of a constraint value limited to JSON-like DAG-CBOR kinds */
function copyValue (value: unknown, depth: number, where: string): unknown {
  if (value === null || typeof value === 'boolean' || typeof value === 'string') return value
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new InvalidTokenError(`${where}: numbers must be finite`)
    if (Number.isInteger(value) && !Number.isSafeInteger(value)) {
      throw new InvalidTokenError(`${where}: integers must be within ±(2^53 - 1)`)
    }
    return value
  }
  if (depth >= TOKEN_LIMITS.maxConstraintDepth) {
    throw new InvalidTokenError(`${where}: nested more than ${TOKEN_LIMITS.maxConstraintDepth} levels`)
  }
  if (Array.isArray(value)) {
    return value.map((v, i) => copyValue(v, depth + 1, `${where}[${i}]`))
  }
  if (isPlainMap(value)) {
    const out: Record<string, unknown> = {}
    for (const k of definedKeys(value)) {
      if (k === '__proto__') throw new InvalidTokenError(`${where}: the key __proto__ is not allowed`)
      out[k] = copyValue(value[k], depth + 1, `${where}.${k}`)
    }
    return out
  }
  throw new InvalidTokenError(`${where}: only null, booleans, numbers, strings, lists and maps are allowed`)
}

/**
 * A copy of a constraints map (section 2.3): at most 32 keys of 1 to 64
 * characters, JSON-like values nested at most 8 levels, numeric `max…` /
 * `min…` bounds; also the rule of other records' constraint-like maps
 * (e.g. a proposal's `terms`). Throws `InvalidTokenError`
 */
export function parseConstraints (value: unknown, where: string): Record<string, unknown> {
  if (!isPlainMap(value)) throw new InvalidTokenError(`${where} must be a map`)
  const keys = definedKeys(value)
  if (keys.length > TOKEN_LIMITS.maxConstraints) {
    throw new InvalidTokenError(`${where} has more than ${TOKEN_LIMITS.maxConstraints} keys`)
  }
  const constraints: Record<string, unknown> = {}
  for (const k of keys) {
    if (k.length === 0 || k.length > TOKEN_LIMITS.maxConstraintKey || k === '__proto__') {
      throw new InvalidTokenError(`${where}: keys must be 1-${TOKEN_LIMITS.maxConstraintKey} characters`)
    }
    const v = copyValue(value[k], 0, `${where}.${k}`)
    if ((k.startsWith('max') || k.startsWith('min')) && typeof v !== 'number') {
      throw new InvalidTokenError(`${where}.${k}: a bound (max… / min…) must be a number`)
    }
    constraints[k] = v
  }
  return constraints
}

function parseCapability (value: unknown, where: string): Capability {
  if (!isPlainMap(value)) throw new InvalidTokenError(`${where} must be a map`)
  onlyKeys(value, ['skill', 'constraints'], where)
  if (!isSkillPattern(value.skill)) {
    throw new InvalidTokenError(`${where}.skill must be '*', a capability name or a name followed by '.*'`)
  }
  const cap: Capability = { skill: value.skill }
  if (value.constraints !== undefined) cap.constraints = parseConstraints(value.constraints, `${where}.constraints`)
  return cap
}

/** Is `s` a token CID in canonical string form (CIDv1, dag-cbor, sha2-256, base32)? */
export function isTokenCid (s: unknown): s is string {
  return defaultVerificationCache.isTokenCid(s)
}

function parsePayload (value: unknown): TokenPayload {
  if (!isPlainMap(value)) throw new InvalidTokenError('Token payload must be a map')
  onlyKeys(value, ['v', 'iss', 'aud', 'cap', 'nbf', 'exp', 'nonce', 'prf'], 'token payload')
  if (value.v !== TOKEN_VERSION) throw new InvalidTokenError(`Unsupported token version ${String(value.v)}`)
  if (!isEd25519Did(value.iss)) throw new InvalidTokenError('iss must be an Ed25519 did:key')
  if (!isEd25519Did(value.aud)) throw new InvalidTokenError('aud must be an Ed25519 did:key')
  if (!Array.isArray(value.cap) || value.cap.length === 0 || value.cap.length > TOKEN_LIMITS.maxCapabilities) {
    throw new InvalidTokenError(`cap must be a list of 1-${TOKEN_LIMITS.maxCapabilities} capabilities`)
  }
  const cap = value.cap.map((c, i) => parseCapability(c, `cap[${i}]`))
  if (!isTime(value.exp)) throw new InvalidTokenError('exp must be a non-negative integer (ms)')
  if (value.nbf !== undefined) {
    if (!isTime(value.nbf)) throw new InvalidTokenError('nbf must be a non-negative integer (ms)')
    if (value.nbf > value.exp) throw new InvalidTokenError('nbf is after exp')
  }
  if (typeof value.nonce !== 'string' || value.nonce.length < TOKEN_LIMITS.minNonce ||
    value.nonce.length > TOKEN_LIMITS.maxNonce || !NONCE.test(value.nonce)) {
    throw new InvalidTokenError(`nonce must be ${TOKEN_LIMITS.minNonce}-${TOKEN_LIMITS.maxNonce} base64url characters`)
  }
  if (!Array.isArray(value.prf) || value.prf.length > TOKEN_LIMITS.maxProofs) {
    throw new InvalidTokenError(`prf must be a list of at most ${TOKEN_LIMITS.maxProofs} token CIDs`)
  }
  for (const p of value.prf) {
    if (!isTokenCid(p)) throw new InvalidTokenError(`prf entry is not a token CID: ${String(p).slice(0, 80)}`)
  }
  if (new Set(value.prf).size !== value.prf.length) throw new InvalidTokenError('prf lists a proof twice')

  const payload: TokenPayload = {
    v: TOKEN_VERSION,
    iss: value.iss,
    aud: value.aud,
    cap,
    exp: value.exp,
    nonce: value.nonce,
    prf: [...value.prf]
  }
  if (value.nbf !== undefined) payload.nbf = value.nbf as number
  return payload
}

/**
 * The DAG-CBOR bytes of `{ payload, sig }` with a 64-byte sig: a map of two
 * entries, `sig` first (shorter key), then `payload`, whose value is the
 * payload's own encoding. Built by hand so that the payload is encoded once
 * for both the token bytes and the signing bytes.
 */
const TOKEN_HEAD = new Uint8Array([0xa2, 0x63, 0x73, 0x69, 0x67, 0x58, 0x40])
const PAYLOAD_KEY = new Uint8Array([0x67, 0x70, 0x61, 0x79, 0x6c, 0x6f, 0x61, 0x64])

function tokenBytes (sig: Uint8Array, body: Uint8Array): Uint8Array {
  const out = new Uint8Array(TOKEN_HEAD.length + 64 + PAYLOAD_KEY.length + body.length)
  out.set(TOKEN_HEAD)
  out.set(sig, TOKEN_HEAD.length)
  out.set(PAYLOAD_KEY, TOKEN_HEAD.length + 64)
  out.set(body, TOKEN_HEAD.length + 64 + PAYLOAD_KEY.length)
  return out
}

/** @internal */
export function withPrefix (body: Uint8Array): Uint8Array {
  return domainSeparated(SIG_PREFIX_BYTES, body)
}

/**
 * @internal A validated token: a clean copy, its encoding and the encoding
 * of its payload; `known` when it came from a memo (its CID is kept there)
 */
export interface CheckedToken { token: Token, bytes: Uint8Array, body: Uint8Array, known?: KnownToken }

/**
 * @internal Validate a token and encode it; with `memo`, a token checked
 * before (the same signature and payload) is not encoded again
 */
export function checkToken (value: unknown, memo?: TokenMemo): CheckedToken {
  if (!isPlainMap(value)) throw new InvalidTokenError('Token must be a map { payload, sig }')
  onlyKeys(value, ['payload', 'sig'], 'token')
  const sig = value.sig
  // a token checked before, received again: the same data is the same valid token (its copy, its bytes)
  const seen = memo != null && sig instanceof Uint8Array && sig.length === 64 ? memo.match(sig, value.payload) : undefined
  if (seen != null) {
    const { known } = seen
    return { token: { payload: seen.payload, sig: new Uint8Array(sig as Uint8Array) }, bytes: known.bytes, body: known.body, known }
  }
  const payload = parsePayload(value.payload)
  if (!(sig instanceof Uint8Array) || sig.length !== 64) {
    throw new InvalidSignatureError('Token signature must be 64 bytes')
  }
  // a private copy: not a Buffer from a shared pool, not a view of the caller's bytes
  const token: Token = { payload, sig: new Uint8Array(sig) }
  const known = memo?.get(token.sig, payload)
  if (known != null) return { token, bytes: known.bytes, body: known.body, known }
  let body: Uint8Array
  try {
    body = dagCbor.encode(payload)
  } catch (err: any) {
    throw new InvalidTokenError(`Token cannot be encoded: ${err?.message ?? err}`)
  }
  const bytes = tokenBytes(token.sig, body)
  if (bytes.byteLength > TOKEN_LIMITS.maxTokenBytes) {
    throw new InvalidTokenError(`Token is larger than ${TOKEN_LIMITS.maxTokenBytes} bytes`)
  }
  return memo != null ? { token, bytes, body, known: memo.set(token.sig, payload, bytes, body) } : { token, bytes, body }
}

/**
 * Validate a token received as a structure (for example inside a request
 * envelope) and return a clean copy. Throws `InvalidTokenError` (or
 * `InvalidSignatureError` for a signature that is not 64 bytes). Does not
 * verify the signature: `verifyChain` does.
 */
export function parseToken (value: unknown): Token {
  return checkToken(value).token
}

/** The bytes a token signature covers: `ioa:ucan:v1\n` || DAG-CBOR(payload) */
export function tokenSigningBytes (payload: TokenPayload): Uint8Array {
  return withPrefix(dagCbor.encode(payload))
}

/** Encode a token for the wire or storage: DAG-CBOR `{ payload, sig }`, at most 16 KiB */
export function encodeToken (token: Token): Uint8Array {
  return checkToken(token).bytes
}

/**
 * Decode a token from bytes received from anywhere: bounded in size, strict
 * (no unknown fields at any level), canonical (the bytes must be exactly what
 * {@link encodeToken} produces). Throws `InvalidTokenError`.
 */
export function decodeToken (bytes: Uint8Array): Token {
  if (!(bytes instanceof Uint8Array)) throw new InvalidTokenError('Token must be bytes')
  if (bytes.byteLength > TOKEN_LIMITS.maxTokenBytes) {
    throw new InvalidTokenError(`Token is larger than ${TOKEN_LIMITS.maxTokenBytes} bytes`)
  }
  let value: unknown
  try {
    value = dagCbor.decode(bytes)
  } catch (err: any) {
    throw new InvalidTokenError(`Token is not valid DAG-CBOR: ${err?.message ?? err}`)
  }
  const checked = checkToken(value)
  if (!bytesEqual(checked.bytes, bytes)) {
    throw new InvalidTokenError('Token is not in canonical form')
  }
  return checked.token
}

/** @internal */
export async function cidOfBytes (bytes: Uint8Array): Promise<CID> {
  return CID.createV1(DAG_CBOR, await sha256.digest(bytes))
}

/** CIDv1, dag-cbor, sha2-256 of {@link encodeToken}; its string form goes into `prf` */
export async function tokenCid (token: Token): Promise<CID> {
  return cidOfBytes(encodeToken(token))
}

/** 16 random bytes, base64url without padding */
export function newNonce (): string {
  return base64url.baseEncode(randomBytes(16))
}

export interface DelegateOptions {
  signal?: AbortSignal
  /**
   * Check the new token against its proofs before signing it: each proof is
   * addressed to the issuer, the token's validity lies within theirs and its
   * capabilities are covered by theirs (`PrincipalMismatchError`,
   * `EscalationError` naming the constraint). The proofs' own chains are
   * verified by {@link verifyChain}, by whoever receives the token.
   *
   * @default true
   */
  verify?: boolean
}

/**
 * Sign a delegation from `issuer` to `init.audience`. The token is checked
 * against its proofs first (attenuation, principals, time; see
 * `options.verify`): a token that escalates its proof is never signed.
 */
export async function delegate (issuer: Identity, init: DelegateInit, options: DelegateOptions = {}): Promise<Token> {
  options.signal?.throwIfAborted()
  if (init == null || typeof init !== 'object') throw new InvalidTokenError('delegate() needs an init object')
  const proofs = init.proofs ?? []
  if (!Array.isArray(proofs)) throw new InvalidTokenError('proofs must be a list of tokens')
  const prf: string[] = []
  const parents: Token[] = []
  let latestNbf = 0
  for (const p of proofs) {
    const { token, bytes } = checkToken(p)
    prf.push((await cidOfBytes(bytes)).toString())
    parents.push(token)
    latestNbf = Math.max(latestNbf, token.payload.nbf ?? 0)
  }
  const nbf = init.notBefore ?? (latestNbf > 0 ? latestNbf : undefined)
  const payload = parsePayload({
    v: TOKEN_VERSION,
    iss: issuer.did,
    aud: init.audience,
    cap: init.capabilities,
    nbf,
    exp: init.expiresAt,
    nonce: init.nonce ?? newNonce(),
    prf
  })
  if (options.verify !== false) checkAgainstProofs(payload, parents)
  const sig = await signWith(issuer, tokenSigningBytes(payload))
  options.signal?.throwIfAborted()
  return checkToken({ payload, sig }).token
}

export { capabilityCovers, capabilityFor, skillCovers, verifyChain, verifyCheckedChain } from './chain.js'

