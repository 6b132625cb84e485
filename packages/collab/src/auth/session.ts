/**
 * Session bindings: the requester's agent key signs once per connection that
 * the requests it sends on this Noise-authenticated connection, between its
 * node (peer `requester`) and the executor's node (peer `executor`), are its
 * own until `exp`; the executor's per-connection `challenge` ties it to the
 * one connection. Wire format: `spec/collab-tasks.md`, section 2.6.
 *
 * ```
 * signing-bytes = "ioa:session:v1" %x0A || dag-cbor(payload)
 * binding       = { payload, sig }        ; sig = Ed25519 by payload.agent
 * ```
 */
import * as dagCbor from '@ipld/dag-cbor'
import { domainSeparated } from '@ioa/interconnect'
import { DEFAULT_CLOCK_SKEW, isEd25519Did as isDid } from './delegation.js'
import { signWith } from './ed25519.js'
import { defaultVerificationCache } from './verification-cache.js'
import { InvalidSessionError, InvalidSignatureError, SessionExpiredError } from '../errors.js'
import { isMap } from '../shape.js'
import type { VerificationCache } from './verification-cache.js'
import type { Did, Identity } from '@ioa/interconnect'

/** Domain-separation prefix of session binding signatures */
export const SESSION_PREFIX = 'ioa:session:v1\n'
const PREFIX_BYTES = new TextEncoder().encode(SESSION_PREFIX)

export const SESSION_LIMITS = Object.freeze({
  /** Challenge length bounds, in bytes (executors issue 16) */
  minChallenge: 16,
  maxChallenge: 64,
  /** Longest validity (exp - iat) of a binding the wire allows, in ms */
  maxTtl: 86_400_000,
  /** Longest peer id string, in characters */
  maxPeerId: 128,
  /** Largest DAG-CBOR encoding of a binding, in bytes */
  maxBindingBytes: 1_024
})

/** Default validity of a new binding, in ms */
export const DEFAULT_BINDING_TTL = 600_000

export interface SessionBindingPayload {
  v: 1
  /** The requesting agent; signs the binding */
  agent: Did
  /** Peer id (string) of the requester's node: the remote peer of the connection, as Noise authenticated it */
  requester: string
  /** Peer id (string) of the executor's node */
  executor: string
  /** The executor's challenge for this connection */
  challenge: Uint8Array
  /** Issued at, ms since the epoch */
  iat: number
  /** Not accepted after this time, ms since the epoch */
  exp: number
}

export interface SessionBinding {
  payload: SessionBindingPayload
  sig: Uint8Array
}

export interface BindingInit {
  requester: string
  executor: string
  challenge: Uint8Array
  /** @default Date.now() */
  issuedAt?: number
  /** @default issuedAt + 600_000 */
  expiresAt?: number
}

/** The bytes a binding signature covers */
export function bindingSigningBytes (payload: SessionBindingPayload): Uint8Array {
  return domainSeparated(PREFIX_BYTES, dagCbor.encode(payload))
}

function isTime (v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0
}

function isPeerText (v: unknown): v is string {
  return typeof v === 'string' && v.length > 0 && v.length <= SESSION_LIMITS.maxPeerId && /^[1-9A-HJ-NP-Za-km-z]+$/.test(v)
}

function checkPayload (payload: unknown): SessionBindingPayload {
  if (!isMap(payload)) throw new InvalidSessionError('Binding payload must be a map')
  const { v, agent, requester, executor, challenge, iat, exp, ...rest } = payload
  if (Object.keys(rest).length > 0) throw new InvalidSessionError(`Unknown binding payload fields: ${Object.keys(rest).slice(0, 5).join(', ')}`)
  if (v !== 1) throw new InvalidSessionError('Unsupported binding version')
  if (!isDid(agent)) throw new InvalidSessionError('binding.agent must be a did:key')
  if (!isPeerText(requester) || !isPeerText(executor)) throw new InvalidSessionError('binding.requester and binding.executor must be peer ids')
  if (!(challenge instanceof Uint8Array) || challenge.byteLength < SESSION_LIMITS.minChallenge || challenge.byteLength > SESSION_LIMITS.maxChallenge) {
    throw new InvalidSessionError(`binding.challenge must be ${SESSION_LIMITS.minChallenge}-${SESSION_LIMITS.maxChallenge} bytes`)
  }
  if (!isTime(iat) || !isTime(exp)) throw new InvalidSessionError('binding.iat and binding.exp must be non-negative integers')
  if (exp <= iat) throw new InvalidSessionError('binding.exp must be after binding.iat')
  if (exp - iat > SESSION_LIMITS.maxTtl) throw new InvalidSessionError(`Binding validity exceeds ${SESSION_LIMITS.maxTtl} ms`)
  return { v, agent, requester, executor, challenge, iat, exp }
}

/** Check the shape of a received binding (no signature check); `INVALID_SESSION` for anything malformed */
export function parseBinding (raw: unknown): SessionBinding {
  if (!isMap(raw)) throw new InvalidSessionError('Binding must be a map')
  const { payload, sig, ...extra } = raw
  if (Object.keys(extra).length > 0) throw new InvalidSessionError(`Unknown binding fields: ${Object.keys(extra).slice(0, 5).join(', ')}`)
  if (!(sig instanceof Uint8Array) || sig.byteLength !== 64) throw new InvalidSessionError('Binding signature must be 64 bytes')
  return { payload: checkPayload(payload), sig }
}

/** Sign a binding of `agent` for one connection (the executor's challenge names it) */
export async function createBinding (agent: Identity, init: BindingInit): Promise<SessionBinding> {
  const iat = init.issuedAt ?? Date.now()
  const payload = checkPayload({
    v: 1,
    agent: agent.did,
    requester: init.requester,
    executor: init.executor,
    challenge: init.challenge,
    iat,
    exp: init.expiresAt ?? iat + DEFAULT_BINDING_TTL
  })
  return { payload, sig: await signWith(agent, bindingSigningBytes(payload)) }
}

export interface VerifyBindingOptions {
  /** The connection's remote peer (authenticated by Noise): must be `payload.requester` */
  remotePeer: string
  /** This node's peer id: must be `payload.executor` */
  selfPeer: string
  /** The challenge this executor issued on the connection: must be `payload.challenge` */
  challenge: Uint8Array
  /** @default Date.now() */
  now?: number
  /** @default 30_000 */
  clockSkew?: number
  /** Longest binding validity (exp - iat) accepted, in ms @default SESSION_LIMITS.maxTtl */
  maxTtl?: number
  /** @default the process-wide `defaultVerificationCache` (parsed keys) */
  verificationCache?: VerificationCache
}

function sameBytes (a: Uint8Array, b: Uint8Array): boolean {
  if (a.byteLength !== b.byteLength) return false
  let diff = 0
  for (let i = 0; i < a.byteLength; i++) diff |= a[i] ^ b[i]
  return diff === 0
}

/**
 * Verify a received binding for the connection it arrived on (spec 2.6.3):
 * shape, peers, challenge, times, then the signature.
 *
 * Errors: `INVALID_SESSION` (malformed; another connection's challenge;
 * another requester or executor peer; issued in the future; too long),
 * `SESSION_EXPIRED`, `INVALID_SIGNATURE`.
 */
export async function verifyBinding (raw: unknown, options: VerifyBindingOptions): Promise<SessionBinding> {
  const binding = parseBinding(raw)
  const p = binding.payload
  const now = options.now ?? Date.now()
  const skew = options.clockSkew ?? DEFAULT_CLOCK_SKEW
  if (p.requester !== options.remotePeer) throw new InvalidSessionError('The binding names another requester peer')
  if (p.executor !== options.selfPeer) throw new InvalidSessionError('The binding names another executor peer')
  if (!sameBytes(p.challenge, options.challenge)) throw new InvalidSessionError('The binding is for another connection (challenge)')
  if (options.maxTtl != null && p.exp - p.iat > options.maxTtl) throw new InvalidSessionError(`Binding validity exceeds ${options.maxTtl} ms`)
  if (p.iat > now + skew) throw new InvalidSessionError('Binding issued in the future')
  if (p.exp + skew < now) throw new SessionExpiredError(`Binding expired at ${p.exp}`)
  const cache = options.verificationCache ?? defaultVerificationCache
  if (!await cache.verifySignature(p.agent, bindingSigningBytes(p), binding.sig)) {
    throw new InvalidSignatureError('Binding signature does not verify')
  }
  return binding
}
