/**
 * Signed request envelopes: who asks whom to run which skill on which body,
 * under which delegation chain. Wire format: `spec/collab-tasks.md`, section 2.
 *
 * ```
 * signing-bytes = "ioa:envelope:v1" %x0A || dag-cbor(payload)
 * envelope      = { payload, sig }        ; sig = Ed25519 by payload.from
 * ```
 */
import * as dagCbor from '@ipld/dag-cbor'
import { domainSeparated, isCapability } from '@ioa/interconnect'
import { TooManyRequestsError } from '@ioa/transport'
import { base32 } from 'multiformats/bases/base32'
import { CID } from 'multiformats/cid'
import { create as createDigest } from 'multiformats/hashes/digest'
import { sha256 } from 'multiformats/hashes/sha2'
import { equals as bytesEqual } from 'uint8arrays/equals'
import { toString as uint8ToString } from 'uint8arrays/to-string'
import { DEFAULT_CLOCK_SKEW, capabilityFor, checkToken, isEd25519Did as isDid, verifyCheckedChain } from './delegation.js'
import { defaultVerificationCache, tokenMemoOf } from './verification-cache.js'
import type { VerificationCache } from './verification-cache.js'
import {
  EnvelopeExpiredError, InvalidEnvelopeError, InvalidSignatureError, ReplayError, SessionRequiredError, UnauthorizedError
} from '../errors.js'
import { nativeCrypto, signWith } from './ed25519.js'
import { envelopePayloadBytes, envelopePayloadLength } from './envelope-bytes.js'
import { ReplayCache } from './replay-cache.js'
import { isMap } from '../shape.js'
import type { CheckedToken, Capability, Token, VerifiedChain } from './delegation.js'
import type { Did, Identity } from '@ioa/interconnect'

export { ReplayCache }
export type { ReplayCacheInit, ReplayCacheStats, ReplayOutcome } from './replay-cache.js'

/** Domain-separation prefix of envelope signatures */
export const ENVELOPE_PREFIX = 'ioa:envelope:v1\n'
const PREFIX_BYTES = new TextEncoder().encode(ENVELOPE_PREFIX)

export const ENVELOPE_LIMITS = Object.freeze({
  /** Most tokens an envelope carries (the leaf and its proofs) */
  maxProofs: 16,
  /** Largest DAG-CBOR encoding of a whole envelope, in bytes */
  maxEnvelopeBytes: 65_536,
  /** Longest validity (exp - iat) of an envelope, in ms */
  maxTtl: 600_000,
  /** Nonce length bounds, in characters */
  minNonce: 8,
  maxNonce: 128,
  /** Longest task id, in characters */
  maxTaskId: 128
})

/** Task ids: letters, digits, `.`, `_`, `:`, `-`; 1–128 characters */
export const TASK_ID_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/

/** Default validity of a new envelope, in ms */
export const DEFAULT_ENVELOPE_TTL = 60_000

export interface EnvelopePayload {
  v: 1
  /** The sending agent; signs the envelope; must be the audience of the leaf token */
  from: Did
  /** The receiving agent */
  to: Did
  /** The capability invoked */
  skill: string
  /** The task id the request creates or addresses */
  task: string
  /** Random, unique per (from, envelope) */
  nonce: string
  /** Issued at, ms since the epoch */
  iat: number
  /** Not accepted after this time, ms since the epoch */
  exp: number
  /** CID (string, CIDv1 dag-cbor sha2-256) of the DAG-CBOR request body */
  body: string
  /** Delegation tokens: the leaf (audience `from`, or an invocation token from `from` to `to`) first, then its proofs */
  proofs: Token[]
}

export interface Envelope {
  payload: EnvelopePayload
  sig: Uint8Array
}

/**
 * A session-mode envelope (spec 2.6): the payload without a signature; the
 * sender's session binding on the connection vouches for it
 */
export interface UnsignedEnvelope {
  payload: EnvelopePayload
  sig?: undefined
}

export interface EnvelopeInit {
  to: Did
  skill: string
  task: string
  /** The request body (any DAG-CBOR value); only its CID goes into the envelope */
  body: unknown
  /**
   * The DAG-CBOR encoding of `body`, when the caller has it already: the CID
   * is hashed from these bytes instead of encoding `body` again
   */
  bodyBytes?: Uint8Array
  /** Leaf token first */
  proofs: Token[]
  /** @default random 16 bytes, base64url */
  nonce?: string
  /** @default Date.now() */
  issuedAt?: number
  /** @default issuedAt + 60_000 */
  expiresAt?: number
}

/** Random bytes drawn from the CSPRNG in blocks, handed out 16 at a time (each byte once) */
const NONCE_POOL = 4096
let noncePool = new Uint8Array(0)
let nonceOffset = 0

/** Random nonce: 16 bytes, base64url */
export function randomNonce (): string {
  if (nonceOffset + 16 > noncePool.length) {
    noncePool = globalThis.crypto.getRandomValues(new Uint8Array(NONCE_POOL))
    nonceOffset = 0
  }
  const bytes = noncePool.subarray(nonceOffset, nonceOffset + 16)
  nonceOffset += 16
  return uint8ToString(bytes, 'base64url')
}

/** CID (CIDv1, dag-cbor, sha2-256) of the DAG-CBOR encoding of a body, as a string */
export async function bodyCid (body: unknown): Promise<string> {
  return (await nameBody(encodeBody(body))).cid
}

function encodeBody (body: unknown): Uint8Array {
  try {
    return dagCbor.encode(body)
  } catch (err: any) {
    throw new InvalidEnvelopeError(`Body is not DAG-CBOR encodable: ${err?.message ?? err}`)
  }
}

/** A body's CID string and the sha-256 digest it names */
interface BodyName {
  cid: string
  digest: Uint8Array
}

/**
 * The CID (CIDv1, dag-cbor, sha2-256) of a body already encoded, and its
 * digest: the digest in one call into node:crypto, the CID's bytes written
 * by hand, in base32 as `CID.toString` writes it
 */
async function nameBody (bytes: Uint8Array): Promise<BodyName> {
  const digest = await bodyDigestOfBytes(bytes)
  const cidBytes = new Uint8Array(BODY_CID_PREFIX.length + digest.byteLength)
  cidBytes.set(BODY_CID_PREFIX)
  cidBytes.set(digest, BODY_CID_PREFIX.length)
  return { cid: base32.encode(cidBytes), digest: cidBytes.subarray(BODY_CID_PREFIX.length) }
}

/** @internal `bodyCid` of a body already encoded (DAG-CBOR) */
export async function bodyCidOfBytes (bytes: Uint8Array): Promise<string> {
  return (await nameBody(bytes)).cid
}

function withPrefix (body: Uint8Array): Uint8Array {
  return domainSeparated(PREFIX_BYTES, body)
}

/** The bytes an envelope signature covers */
export function envelopeSigningBytes (payload: EnvelopePayload): Uint8Array {
  return withPrefix(dagCbor.encode(payload))
}

/**
 * Bytes the DAG-CBOR encoding of `{ payload, sig }` (64-byte sig) adds to the
 * payload's own encoding: map header, `sig` key and value (the shorter key
 * first), `payload` key
 */
const ENVELOPE_OVERHEAD = 1 + 4 + 2 + 64 + 8

/** @internal An envelope made to be sent, with the DAG-CBOR encoding of its payload (the bytes signed, or vouched for by a session) */
export interface EncodedEnvelope<E extends Envelope | UnsignedEnvelope> {
  envelope: E
  payloadBytes: Uint8Array
}

/**
 * Create and sign an envelope for a request body
 */
export async function createEnvelope (sender: Identity, init: EnvelopeInit): Promise<Envelope> {
  return (await createEncodedEnvelope(sender, init)).envelope
}

/** @internal `createEnvelope`, keeping the payload's encoding (a requester frames it as it is) */
export async function createEncodedEnvelope (sender: Identity, init: EnvelopeInit): Promise<EncodedEnvelope<Envelope>> {
  const { payload, bytes } = await envelopePayload(sender.did, init)
  const sig = await signWith(sender, withPrefix(bytes))
  return { envelope: { payload, sig }, payloadBytes: bytes }
}

/**
 * Create a session-mode envelope (spec 2.6): the same payload as
 * `createEnvelope`, not signed; valid only on a connection where `sender`
 * holds a session binding
 */
export async function createUnsignedEnvelope (sender: Did, init: EnvelopeInit): Promise<UnsignedEnvelope> {
  return (await createEncodedUnsignedEnvelope(sender, init)).envelope
}

/** @internal `createUnsignedEnvelope`, keeping the payload's encoding */
export async function createEncodedUnsignedEnvelope (sender: Did, init: EnvelopeInit): Promise<EncodedEnvelope<UnsignedEnvelope>> {
  const { payload, bytes } = await envelopePayload(sender, init)
  return { envelope: { payload }, payloadBytes: bytes }
}

/** A proof checked once: the caller's token object, what it held when checked, and the checked copy */
interface CheckedProof {
  payload: unknown
  sig: unknown
  checked: CheckedToken
}

/**
 * Proofs checked before, by the token object the caller passed: a requester
 * sends the same delegation with every task, and checking (and encoding) it
 * again each time cost a tenth of the task. A token is signed: one whose
 * `payload` or `sig` was replaced since is checked again; the fields inside
 * are taken as they were (a changed token would not verify anyway).
 */
const checkedProofs = new WeakMap<object, CheckedProof>()

function checkProof (value: unknown): CheckedToken {
  if (value == null || typeof value !== 'object') return checkToken(value)
  const known = checkedProofs.get(value)
  const { payload, sig } = value as { payload?: unknown, sig?: unknown }
  if (known != null && known.payload === payload && known.sig === sig) return known.checked
  const checked = checkToken(value)
  checkedProofs.set(value, { payload, sig, checked })
  return checked
}

/**
 * The DAG-CBOR encoding of a payload that `checkPayloadFields` accepted,
 * written around its proofs' checked encodings (`envelope-bytes.ts`, the
 * same writer a receiver uses): nothing is encoded twice
 */
function encodePayloadWith (payload: EnvelopePayload, proofs: CheckedToken[]): Uint8Array {
  const out = envelopePayloadBytes(payload, proofs.map(p => p.bytes))
  if (out.byteLength + ENVELOPE_OVERHEAD > ENVELOPE_LIMITS.maxEnvelopeBytes) throw new InvalidEnvelopeError(`Envelope exceeds ${ENVELOPE_LIMITS.maxEnvelopeBytes} bytes`)
  return out
}

/** An envelope payload from `from` and its DAG-CBOR encoding, checked as a receiver would */
async function envelopePayload (from: Did, init: EnvelopeInit): Promise<{ payload: EnvelopePayload, bytes: Uint8Array }> {
  const iat = init.issuedAt ?? Date.now()
  const named = await nameBody(init.bodyBytes ?? encodeBody(init.body))
  const body = named.cid
  const proofs = init.proofs.map(checkProof)
  const payload: EnvelopePayload = {
    v: 1,
    from,
    to: init.to,
    skill: init.skill,
    task: init.task,
    nonce: init.nonce ?? randomNonce(),
    iat,
    exp: init.expiresAt ?? iat + DEFAULT_ENVELOPE_TTL,
    body,
    proofs: proofs.map(p => p.token)
  }
  // refuse to sign what a receiver would refuse to accept (the same checks as
  // parseEnvelope; the proofs were just checked, the payload is encoded once)
  checkPayloadFields(payload as unknown as Record<string, unknown>, named.digest)
  return { payload, bytes: encodePayloadWith(payload, proofs) }
}

function isTime (v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0
}

/**
 * Check the shape of a received envelope (no signature or chain check).
 * Throws `InvalidEnvelopeError` for anything malformed.
 */
export function parseEnvelope (raw: unknown): Envelope {
  // (signed: checkEnvelope refuses an envelope without sig unless asked not to)
  return checkEnvelope(raw).envelope as Envelope
}

/** @internal A parsed envelope, its proofs as checked tokens, and the DAG-CBOR encoding of its payload */
export interface CheckedEnvelope {
  /** Without `sig` only when checked with `unsigned` (a session-mode request) */
  envelope: Envelope | UnsignedEnvelope
  proofs: CheckedToken[]
  /** (written on first use: a session-mode request needs only its length) */
  readonly payloadBytes: Uint8Array
  /** The sha-256 digest `payload.body` names, when it is in canonical (base32) form */
  bodyDigest?: Uint8Array
}

/**
 * The field checks of an envelope payload (not of the tokens in `proofs`);
 * returns the sha-256 digest `body` names when `body` is in its canonical
 * form (base32, the form a receiver computes), else undefined. A sender
 * passes the digest of the CID it made (`bodyDigest`): it is not read back
 * from the string.
 */
function checkPayloadFields (payload: Record<string, unknown>, bodyDigest?: Uint8Array): Uint8Array | undefined {
  const { v, from, to, skill, task, nonce, iat, exp, body, proofs } = payload
  const keys = Object.keys(payload)
  if (keys.length > PAYLOAD_FIELDS.size || keys.some(k => !PAYLOAD_FIELDS.has(k))) {
    throw new InvalidEnvelopeError(`Unknown envelope payload fields: ${keys.filter(k => !PAYLOAD_FIELDS.has(k)).slice(0, 5).join(', ')}`)
  }
  if (v !== 1) throw new InvalidEnvelopeError('Unsupported envelope version')
  if (!isDid(from)) throw new InvalidEnvelopeError('envelope.from must be a did:key')
  if (!isDid(to)) throw new InvalidEnvelopeError('envelope.to must be a did:key')
  if (!isCapability(skill)) throw new InvalidEnvelopeError('envelope.skill must be a capability name')
  if (typeof task !== 'string' || !TASK_ID_PATTERN.test(task)) throw new InvalidEnvelopeError('envelope.task must match [A-Za-z0-9._:-]{1,128}')
  if (typeof nonce !== 'string' || nonce.length < ENVELOPE_LIMITS.minNonce || nonce.length > ENVELOPE_LIMITS.maxNonce) {
    throw new InvalidEnvelopeError(`envelope.nonce must be ${ENVELOPE_LIMITS.minNonce}-${ENVELOPE_LIMITS.maxNonce} characters`)
  }
  if (!isTime(iat) || !isTime(exp)) throw new InvalidEnvelopeError('envelope.iat and envelope.exp must be non-negative integers')
  if (exp <= iat) throw new InvalidEnvelopeError('envelope.exp must be after envelope.iat')
  if (exp - iat > ENVELOPE_LIMITS.maxTtl) throw new InvalidEnvelopeError(`Envelope validity exceeds ${ENVELOPE_LIMITS.maxTtl} ms`)
  if (typeof body !== 'string' || body.length > 128) throw new InvalidEnvelopeError('envelope.body must be a CID string')
  // (the sender knows the digest of the CID it just made)
  const digest = bodyDigest ?? canonicalBodyDigest(body)
  if (digest == null) {
    try {
      const cid = CID.parse(body)
      if (cid.version !== 1 || cid.code !== dagCbor.code || cid.multihash.code !== sha256.code) throw new Error('not a CIDv1 dag-cbor sha2-256')
    } catch (err: any) {
      throw new InvalidEnvelopeError(`envelope.body is not a dag-cbor CID: ${err?.message ?? err}`)
    }
  }
  if (!Array.isArray(proofs) || proofs.length > ENVELOPE_LIMITS.maxProofs) {
    throw new InvalidEnvelopeError(`envelope.proofs must be a list of at most ${ENVELOPE_LIMITS.maxProofs} tokens`)
  }
  return digest
}

const PAYLOAD_FIELDS: ReadonlySet<string> = new Set(['v', 'from', 'to', 'skill', 'task', 'nonce', 'iat', 'exp', 'body', 'proofs'])

/** CIDv1, dag-cbor, sha2-256 with a 32-byte digest: the bytes before the digest */
const BODY_CID_PREFIX = [0x01, dagCbor.code, sha256.code, 32]

/**
 * The digest a body CID string names when it is in the form a receiver
 * computes (base32 with its `b` prefix: one string per CID, the decoder
 * refuses stray bits) and is a CIDv1 dag-cbor sha2-256; else undefined
 */
function canonicalBodyDigest (body: string): Uint8Array | undefined {
  // 'b' and 36 bytes in base32 (58 characters)
  if (body.length !== 59 || body.charCodeAt(0) !== 0x62) return undefined
  let bytes: Uint8Array
  try {
    bytes = base32.baseDecode(body.slice(1))
  } catch {
    // not base32: the generic parse says why
    return undefined
  }
  if (bytes.length !== BODY_CID_PREFIX.length + 32) return undefined
  for (let i = 0; i < BODY_CID_PREFIX.length; i++) if (bytes[i] !== BODY_CID_PREFIX[i]) return undefined
  return bytes.subarray(BODY_CID_PREFIX.length)
}

/** @internal Options of `checkEnvelope` */
export interface CheckEnvelopeOptions {
  /** Accept an envelope without `sig` (session mode, spec 2.6) */
  unsigned?: boolean
  /** Whose token memo to use: tokens checked before are not encoded again */
  verificationCache?: VerificationCache
}

/**
 * @internal `parseEnvelope`, keeping the checked tokens and the payload's
 * encoding; with `unsigned`, an envelope without `sig` (session mode, spec
 * 2.6) is accepted too; with `verificationCache`, tokens checked before
 * (in its token memo) are not encoded again
 */
export function checkEnvelope (raw: unknown, options: CheckEnvelopeOptions = {}): CheckedEnvelope {
  if (!isMap(raw)) throw new InvalidEnvelopeError('Envelope must be a map')
  const { payload, sig, ...extra } = raw
  if (Object.keys(extra).length > 0) throw new InvalidEnvelopeError(`Unknown envelope fields: ${Object.keys(extra).slice(0, 5).join(', ')}`)
  const unsigned = options.unsigned === true && !('sig' in raw)
  if (!unsigned && (!(sig instanceof Uint8Array) || sig.length !== 64)) throw new InvalidEnvelopeError('Envelope signature must be 64 bytes')
  if (!isMap(payload)) throw new InvalidEnvelopeError('Envelope payload must be a map')
  const bodyDigest = checkPayloadFields(payload)
  const { v, from, to, skill, task, nonce, iat, exp, body, proofs } = payload as unknown as EnvelopePayload
  // each token is checked for shape and limits (INVALID_TOKEN); verifyChain checks the rest
  const memo = options.verificationCache != null ? tokenMemoOf(options.verificationCache) : undefined
  const checked = (proofs as unknown[]).map(t => checkToken(t, memo))
  const tokens: Token[] = checked.map(c => c.token)
  const env: Envelope | UnsignedEnvelope = {
    payload: { v, from, to, skill, task, nonce, iat, exp, body, proofs: tokens },
    ...(unsigned ? {} : { sig: sig as Uint8Array })
  }
  // the fields were checked (text, safe integers): the payload's encoding is
  // written around the tokens' own, and only when a signature needs it
  const tokenBytes = checked.map(c => c.bytes)
  if (envelopePayloadLength(env.payload, tokenBytes) + ENVELOPE_OVERHEAD > ENVELOPE_LIMITS.maxEnvelopeBytes) throw new InvalidEnvelopeError(`Envelope exceeds ${ENVELOPE_LIMITS.maxEnvelopeBytes} bytes`)
  let bytes: Uint8Array | undefined
  return {
    envelope: env,
    proofs: checked,
    get payloadBytes () { return (bytes ??= envelopePayloadBytes(env.payload, tokenBytes)) },
    ...(bodyDigest != null ? { bodyDigest } : {})
  }
}

export interface VerifyEnvelopeOptions {
  /** The receiving agent: `payload.to` must equal it */
  self: Did
  replayCache: ReplayCache
  /**
   * The peer the envelope came from (a peer id string): its entries in the
   * replay cache count against `maxEntriesPerPeer`
   */
  peer?: string
  /** @default Date.now() */
  now?: number
  /** @default 30_000 */
  clockSkew?: number
  /** Longest envelope validity (exp - iat) accepted, in ms (at most ENVELOPE_LIMITS.maxTtl) @default 600_000 */
  maxTtl?: number
  /** Passed to `verifyChain` */
  maxDepth?: number
  /** Passed to `verifyChain`: `issuers` are the principals that may revoke the token */
  isRevoked?: (cid: string, issuers: readonly Did[]) => boolean | Promise<boolean>
  /** Passed to `verifyChain`: accepted root principals (default: any) */
  roots?: Did[]
  /**
   * Parsed keys and verified token signatures (passed to `verifyChain`; the
   * envelope's own signature is verified every time)
   *
   * @default the process-wide `defaultVerificationCache`
   */
  verificationCache?: VerificationCache
  /**
   * Session mode (spec 2.6): called for an envelope without `sig` in place of
   * check 4, throws unless the sender holds a valid binding on the
   * request's connection (`SESSION_REQUIRED`, `SESSION_EXPIRED`); without
   * it, an unsigned envelope is refused with `SESSION_REQUIRED`
   */
  session?: (from: Did) => void
}

export interface VerifiedEnvelope {
  chain: VerifiedChain
  /** The leaf capability covering `payload.skill` */
  capability: Capability
  /** The body CID (equal to `payload.body`) */
  bodyCid: string
}

/**
 * Verify a received envelope and its body: shape, `to`, time window,
 * signature, nonce not seen (replay cache), body CID, then the delegation
 * chain (`aud` of the leaf is `from`, or the leaf is issued by `from` to
 * `to`; a capability covers `skill`); only then is the nonce remembered.
 *
 * Errors: `INVALID_ENVELOPE`, `INVALID_TOKEN` (a malformed proof),
 * `ENVELOPE_EXPIRED`, `INVALID_SIGNATURE`, `REPLAY`, `UNAUTHORIZED`,
 * `TOO_MANY_REQUESTS` (the peer's replay-cache quota), and the chain errors of `verifyChain`
 * (`INVALID_TOKEN`, `TOKEN_EXPIRED`, `ESCALATION`, `REVOKED`, …).
 */
export async function verifyEnvelope (raw: unknown, body: unknown, options: VerifyEnvelopeOptions): Promise<VerifiedEnvelope> {
  const checked = checkEnvelope(raw, options.verificationCache != null ? { verificationCache: options.verificationCache } : {})
  return verifyCheckedEnvelope(checked, async () => bodyCid(body), options)
}

/**
 * @internal `verifyEnvelope` of an envelope checked by `checkEnvelope`;
 * `cidOfBody` gives the body's CID, or the sha-256 digest of its encoding
 * (asked for after the signature and nonce checks)
 */
export async function verifyCheckedEnvelope (checked: CheckedEnvelope, cidOfBody: () => Promise<string | Uint8Array>, options: VerifyEnvelopeOptions): Promise<VerifiedEnvelope> {
  const env = checked.envelope
  const p = env.payload
  const now = options.now ?? Date.now()
  const skew = options.clockSkew ?? DEFAULT_CLOCK_SKEW

  if (p.to !== options.self) throw new InvalidEnvelopeError('Envelope is addressed to another agent')
  if (options.maxTtl != null && p.exp - p.iat > options.maxTtl) throw new InvalidEnvelopeError(`Envelope validity exceeds ${options.maxTtl} ms`)
  if (p.iat > now + skew) throw new InvalidEnvelopeError('Envelope issued in the future')
  if (p.exp + skew < now) throw new EnvelopeExpiredError(`Envelope expired at ${p.exp}`)

  const cache = options.verificationCache ?? defaultVerificationCache
  if (env.sig == null) {
    // session mode: the sender's binding on this connection stands for the signature
    if (options.session == null) throw new SessionRequiredError('An unsigned envelope needs a session binding')
    options.session(p.from)
  } else if (!await cache.verifySignature(p.from, withPrefix(checked.payloadBytes), env.sig)) {
    throw new InvalidSignatureError('Envelope signature does not verify')
  }
  // a replay is refused before any further work; the nonce itself is only
  // remembered once the envelope is accepted (below), so envelopes that fail
  // their chain (e.g. without proofs, from fresh keys) take no cache entries
  if (options.replayCache.has(p.from, p.nonce, p.iat, now)) {
    throw new ReplayError('Envelope nonce already used')
  }
  const cid = await cidOfBody()
  if (!sameBody(cid, p.body, checked.bodyDigest)) throw new InvalidEnvelopeError('Body does not match envelope.body')

  if (p.proofs.length === 0) throw new UnauthorizedError(`No delegation for ${p.skill}`)
  const chain = await verifyCheckedChain(checked.proofs[0], checked.proofs.slice(1), {
    now,
    clockSkew: skew,
    ...(options.maxDepth != null ? { maxDepth: options.maxDepth } : {}),
    ...(options.isRevoked != null ? { isRevoked: options.isRevoked } : {}),
    ...(options.roots != null ? { roots: options.roots } : {}),
    verificationCache: cache
  })
  // the sender's own delegation, or an invocation token: a leaf issued by the
  // sender to this executor (the sender attenuates its authority for the call)
  if (chain.audience !== p.from && !(chain.audience === p.to && chain.path[0].payload.iss === p.from)) {
    throw new UnauthorizedError('The delegation was not granted to the sender')
  }
  const capability = capabilityFor(chain, p.skill)
  if (capability == null) throw new UnauthorizedError(`The delegation does not cover ${p.skill}`)
  // accepted: consume the nonce (a concurrent copy that got here first wins)
  const outcome = options.replayCache.take(p.from, p.nonce, p.iat, p.exp, now, options.peer)
  if (outcome === 'replay') throw new ReplayError('Envelope nonce already used')
  if (outcome === 'peer-quota') {
    throw new TooManyRequestsError(`The peer holds ${options.replayCache.maxEntriesPerPeer} replay-cache entries; retry when some expire`)
  }
  return { chain, capability, bodyCid: p.body }
}

/** Does a body's CID or sha-256 digest match `body`, the envelope's CID string (whose digest is `digest` when that string is canonical)? */
function sameBody (got: string | Uint8Array, body: string, digest: Uint8Array | undefined): boolean {
  if (typeof got === 'string') return got === body
  if (digest != null) return bytesEqual(got, digest)
  return CID.create(1, dagCbor.code, createDigest(sha256.code, got)).toString() === body
}

/** @internal The sha-256 digest of a body already encoded (DAG-CBOR): what `verifyCheckedEnvelope` compares with the envelope's body CID */
export async function bodyDigestOfBytes (bytes: Uint8Array): Promise<Uint8Array> {
  // one call into node:crypto where it has one (Node.js 20.12 and later), else the portable hasher
  const hash = nativeCrypto()?.hash
  if (hash != null) return hash('sha256', bytes, 'buffer')
  return (await sha256.digest(bytes)).digest
}
