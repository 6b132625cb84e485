/**
 * Revocation of delegation tokens: a signed record naming the CID of a token,
 * a datastore-backed store of the records a node knows, and a flooding
 * protocol (`/ioa/revocation/1.1.0`, and `1.0.0` for peers that predate the
 * record's `exp`) that spreads new records to every peer.
 * Normative description: `spec/collab-delegation.md`, sections 7 and 8.
 *
 * This file is the record (format, signing, verification); the store is
 * revocation-store.ts, the flooding service revocation-service.ts.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { domainSeparated, isDid, verifyByDid } from '@ioa/interconnect'
import { CID } from 'multiformats/cid'
import { sha256 } from 'multiformats/hashes/sha2'
import { equals as bytesEqual } from 'uint8arrays/equals'
import { isTokenCid, tokenCid } from './delegation.js'
import { InvalidSignatureError, InvalidTokenError, PrincipalMismatchError } from '../errors.js'
import { isPlainMap, onlyKeys } from '../shape.js'
import type { Token } from './delegation.js'
import type { Did, Identity } from '@ioa/interconnect'

/** Protocol id of revocation flooding: records may carry `exp` */
export const REVOCATION_PROTOCOL = '/ioa/revocation/1.1.0'
/**
 * The previous version, still served: its peers refuse a record with `exp`,
 * so only records without it are sent to them
 */
export const REVOCATION_PROTOCOL_1_0 = '/ioa/revocation/1.0.0'
/** The versions served, newest first */
export const REVOCATION_PROTOCOLS = Object.freeze([REVOCATION_PROTOCOL, REVOCATION_PROTOCOL_1_0])
/** The one method of {@link REVOCATION_PROTOCOL} (and of 1.0.0) */
export const ANNOUNCE_METHOD = 'announce'

/** Domain separation: a revocation signature is over these bytes + DAG-CBOR(payload) */
export const REVOCATION_SIG_PREFIX = 'ioa:revoke:v1\n'
const SIG_PREFIX_BYTES = new TextEncoder().encode(REVOCATION_SIG_PREFIX)

export const REVOCATION_LIMITS = Object.freeze({
  /** Largest encoded revocation (DAG-CBOR `{ payload, sig }`) */
  maxRevocationBytes: 1024,
  /** Tokens accepted in the `path` given to `verifyRevocation` */
  maxPath: 128
})

/** @internal multicodec of DAG-CBOR (the CIDs of revocation records) */
export const DAG_CBOR = 0x71

export interface RevocationPayload {
  v: 1
  /** Who revokes: the issuer of the revoked token or of a token it is proven by */
  iss: Did
  /** CID (string) of the revoked token */
  revoke: string
  /** When the revocation was made, ms since the Unix epoch */
  at: number
  /**
   * The revoked token's `exp` (ms since the epoch): the record may be
   * forgotten once it has passed (plus the clock skew). Optional: records
   * without it are kept as long as the store keeps them
   */
  exp?: number
}

export interface Revocation {
  payload: RevocationPayload
  /** Ed25519 signature of `iss` over `ioa:revoke:v1\n` + DAG-CBOR(payload) */
  sig: Uint8Array
}

// ---------------------------------------------------------------------------
// the record

const invalidToken = (message: string): Error => new InvalidTokenError(message)

function checkRevocation (value: unknown): { rev: Revocation, bytes: Uint8Array } {
  if (!isPlainMap(value)) throw new InvalidTokenError('Revocation must be a map { payload, sig }')
  onlyKeys(value, ['payload', 'sig'], 'revocation', invalidToken)
  const p = value.payload
  if (!isPlainMap(p)) throw new InvalidTokenError('Revocation payload must be a map')
  onlyKeys(p, ['v', 'iss', 'revoke', 'at', 'exp'], 'revocation payload', invalidToken)
  if (p.v !== 1) throw new InvalidTokenError(`Unsupported revocation version ${String(p.v)}`)
  if (!isDid(p.iss)) throw new InvalidTokenError('Revocation iss must be an Ed25519 did:key')
  if (!isTokenCid(p.revoke)) throw new InvalidTokenError('Revocation revoke must be a token CID')
  if (typeof p.at !== 'number' || !Number.isSafeInteger(p.at) || p.at < 0) {
    throw new InvalidTokenError('Revocation at must be a non-negative integer (ms)')
  }
  if (p.exp !== undefined && (typeof p.exp !== 'number' || !Number.isSafeInteger(p.exp) || p.exp < 0)) {
    throw new InvalidTokenError('Revocation exp must be a non-negative integer (ms)')
  }
  if (!(value.sig instanceof Uint8Array) || value.sig.length !== 64) {
    throw new InvalidSignatureError('Revocation signature must be 64 bytes')
  }
  const payload: RevocationPayload = { v: 1, iss: p.iss, revoke: p.revoke, at: p.at, ...(p.exp !== undefined ? { exp: p.exp } : {}) }
  const rev: Revocation = { payload, sig: new Uint8Array(value.sig) }
  const bytes = dagCbor.encode(rev)
  if (bytes.byteLength > REVOCATION_LIMITS.maxRevocationBytes) {
    throw new InvalidTokenError(`Revocation is larger than ${REVOCATION_LIMITS.maxRevocationBytes} bytes`)
  }
  return { rev, bytes }
}

/** Validate a revocation received as a structure; returns a clean copy (signature not checked) */
export function parseRevocation (value: unknown): Revocation {
  return checkRevocation(value).rev
}

/** The bytes a revocation signature covers: `ioa:revoke:v1\n` || DAG-CBOR(payload) */
export function revocationSigningBytes (payload: RevocationPayload): Uint8Array {
  return domainSeparated(SIG_PREFIX_BYTES, dagCbor.encode(payload))
}

/** DAG-CBOR `{ payload, sig }`, at most 1 KiB */
export function encodeRevocation (rev: Revocation): Uint8Array {
  return checkRevocation(rev).bytes
}

/** Decode a revocation from untrusted bytes: bounded, strict, canonical. Throws `InvalidTokenError` */
export function decodeRevocation (bytes: Uint8Array): Revocation {
  if (!(bytes instanceof Uint8Array)) throw new InvalidTokenError('Revocation must be bytes')
  if (bytes.byteLength > REVOCATION_LIMITS.maxRevocationBytes) {
    throw new InvalidTokenError(`Revocation is larger than ${REVOCATION_LIMITS.maxRevocationBytes} bytes`)
  }
  let value: unknown
  try {
    value = dagCbor.decode(bytes)
  } catch (err: any) {
    throw new InvalidTokenError(`Revocation is not valid DAG-CBOR: ${err?.message ?? err}`)
  }
  const checked = checkRevocation(value)
  if (!bytesEqual(checked.bytes, bytes)) throw new InvalidTokenError('Revocation is not in canonical form')
  return checked.rev
}

/** CIDv1, dag-cbor, sha2-256 of {@link encodeRevocation}: the identity used to deduplicate */
export async function revocationCid (rev: Revocation): Promise<CID> {
  return CID.createV1(DAG_CBOR, await sha256.digest(encodeRevocation(rev)))
}

export interface CreateRevocationOptions {
  /** @default Date.now() */
  at?: number
  /**
   * The record's `exp`: when stores may forget it. `null`: no `exp` (the
   * record is then readable by peers that predate the field)
   *
   * @default the revoked token's `exp`
   */
  exp?: number | null
  signal?: AbortSignal
}

/**
 * Revoke `token` as `identity`. The revocation is only honoured when
 * `identity` issued the token or one of the tokens it is proven by; that is
 * checked by whoever verifies a chain, not here.
 */
export async function createRevocation (identity: Identity, token: Token, options: CreateRevocationOptions = {}): Promise<Revocation> {
  options.signal?.throwIfAborted()
  const exp = options.exp === undefined ? token.payload.exp : options.exp
  const payload: RevocationPayload = {
    v: 1,
    iss: identity.did,
    revoke: (await tokenCid(token)).toString(),
    at: options.at ?? Date.now(),
    ...(exp != null ? { exp } : {})
  }
  const checked = checkRevocation({ payload, sig: new Uint8Array(64) })
  const sig = await identity.sign(revocationSigningBytes(checked.rev.payload))
  return checkRevocation({ payload: checked.rev.payload, sig }).rev
}

/**
 * The principals that may revoke the token with CID `cid`: its issuer and the
 * issuers of every token it is proven by, found by CID among `tokens`.
 * `undefined` when `cid` is not among `tokens`.
 */
export async function revocationAuthorities (cid: string, tokens: Token[]): Promise<Set<Did> | undefined> {
  if (!Array.isArray(tokens) || tokens.length > REVOCATION_LIMITS.maxPath) {
    throw new InvalidTokenError(`A chain of at most ${REVOCATION_LIMITS.maxPath} tokens is needed`)
  }
  const byCid = new Map<string, Token>()
  for (const t of tokens) byCid.set((await tokenCid(t)).toString(), t)
  if (!byCid.has(cid)) return undefined
  const out = new Set<Did>()
  const seen = new Set<string>()
  const queue = [cid]
  while (queue.length > 0) {
    const c = queue.shift() as string
    if (seen.has(c)) continue
    seen.add(c)
    const t = byCid.get(c)
    if (t == null) continue
    out.add(t.payload.iss)
    queue.push(...t.payload.prf)
  }
  return out
}

/**
 * Verify a revocation: structure and signature by `iss` always; and when the
 * verifier has the chain (`path`: the revoked token and the tokens it is
 * proven by, e.g. a `VerifiedChain.path`), that `iss` issued the revoked
 * token or one of its proofs. Returns a clean copy or throws
 * `InvalidTokenError`, `InvalidSignatureError`, or `PrincipalMismatchError`
 * (the revoker has no authority over the token).
 */
export async function verifyRevocation (rev: Revocation, path?: Token[]): Promise<Revocation> {
  const { rev: clean } = checkRevocation(rev)
  const p = clean.payload
  if (!await verifyByDid(p.iss, revocationSigningBytes(p), clean.sig)) {
    throw new InvalidSignatureError(`Revocation signature does not verify for ${p.iss}`)
  }
  if (path != null) {
    const authorities = await revocationAuthorities(p.revoke, path)
    if (authorities == null) throw new InvalidTokenError(`The revoked token ${p.revoke} is not in the given chain`)
    if (!authorities.has(p.iss)) {
      throw new PrincipalMismatchError(`${p.iss} neither issued token ${p.revoke} nor any token it is proven by`)
    }
  }
  return clean
}

export { RevocationStore } from './revocation-store.js'
export type { RevocationStoreInit } from './revocation-store.js'
export { createRevocationService } from './revocation-service.js'
export type { RevocationService, RevocationServiceInit, PublishResult } from './revocation-service.js'
