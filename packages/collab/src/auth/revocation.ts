/**
 * Revocation of delegation tokens: a signed record naming the CID of a token,
 * a datastore-backed store of the records a node knows, and a flooding
 * protocol (`/ioa/revocation/1.1.0`, and `1.0.0` for peers that predate the
 * record's `exp`) that spreads new records to every peer.
 * Normative description: `spec/collab-delegation.md`, sections 7 and 8.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { RateLimitedError, domainSeparated, isDid, verifyByDid } from '@ioa/interconnect'
import { ProtocolNotSupportedError, TokenBuckets } from '@ioa/transport'
import { Key } from 'interface-datastore'
import { CID } from 'multiformats/cid'
import { sha256 } from 'multiformats/hashes/sha2'
import { equals as bytesEqual } from 'uint8arrays/equals'
import { isTokenCid, tokenCid } from './delegation.js'
import { CollabError, InvalidSignatureError, InvalidTokenError, PrincipalMismatchError } from '../errors.js'
import { RevocationLimits } from './revocation-limits.js'
import type { RevocationLimitsInit } from './revocation-limits.js'
import type { Token } from './delegation.js'
import type { Did, Identity } from '@ioa/interconnect'
import type { RequestContext, TransportNode } from '@ioa/transport'
import type { ComponentLogger, Logger, PeerId } from '@libp2p/interface'
import type { Datastore } from 'interface-datastore'

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

const DAG_CBOR = 0x71

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

function isPlainMap (value: unknown): value is Record<string, unknown> {
  if (value == null || typeof value !== 'object' || Array.isArray(value)) return false
  const proto = Object.getPrototypeOf(value)
  return proto === Object.prototype || proto === null
}

function onlyKeys (map: Record<string, unknown>, allowed: readonly string[], what: string): void {
  const extra = Object.keys(map).filter(k => map[k] !== undefined && !allowed.includes(k))
  if (extra.length > 0) {
    throw new InvalidTokenError(`Unknown fields in ${what}: ${extra.slice(0, 5).join(', ')}`)
  }
}

function checkRevocation (value: unknown): { rev: Revocation, bytes: Uint8Array } {
  if (!isPlainMap(value)) throw new InvalidTokenError('Revocation must be a map { payload, sig }')
  onlyKeys(value, ['payload', 'sig'], 'revocation')
  const p = value.payload
  if (!isPlainMap(p)) throw new InvalidTokenError('Revocation payload must be a map')
  onlyKeys(p, ['v', 'iss', 'revoke', 'at', 'exp'], 'revocation payload')
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

// ---------------------------------------------------------------------------
// the store

export interface RevocationStoreInit extends RevocationLimitsInit {
  /** Datastore key prefix @default '/ioa/revocations' */
  prefix?: string
  /** Logs refused, expired and damaged records @default no logging */
  logger?: ComponentLogger
}

/**
 * The revocations a node knows, persisted in a datastore under
 * `<prefix>/<revocation CID>` (value: the encoded record) and cached in
 * memory so that {@link RevocationStore.isRevoked} answers synchronously.
 * Bounded: a quota per issuer and in total, with priority for trusted
 * issuers (`RevocationLimitsInit`); a record with `exp` is forgotten once
 * the revoked token has expired. Use {@link RevocationStore.open}, or the
 * constructor then `load()`.
 */
export class RevocationStore {
  private readonly datastore: Datastore
  private readonly prefix: string
  readonly limits: RevocationLimits
  private readonly log?: Logger
  /** revoked token CID -> revoker DID -> revocation CID -> record */
  private readonly byToken = new Map<string, Map<Did, Map<string, Revocation>>>()
  /** revocation CID -> record held */
  private readonly records = new Map<string, Revocation>()
  /** CIDs claimed by an `add` in progress or held (deduplication) */
  private readonly seen = new Set<string>()
  private loaded = false

  constructor (datastore: Datastore, init: RevocationStoreInit = {}) {
    this.datastore = datastore
    this.prefix = init.prefix ?? '/ioa/revocations'
    this.limits = new RevocationLimits(init)
    this.log = init.logger?.forComponent('ioa:collab:revocation-store')
  }

  /** Create a store and load what the datastore holds */
  static async open (datastore: Datastore, init: RevocationStoreInit = {}, options: { signal?: AbortSignal, now?: number } = {}): Promise<RevocationStore> {
    const store = new RevocationStore(datastore, init)
    await store.load(options)
    return store
  }

  /**
   * Load the persisted revocations into memory. Records that no longer
   * decode or verify are skipped; expired ones are deleted; records over a
   * quota (the quotas were lowered) are skipped.
   */
  async load (options: { signal?: AbortSignal, now?: number } = {}): Promise<void> {
    const now = options.now ?? Date.now()
    const expired: Key[] = []
    for await (const { key, value } of this.datastore.query({ prefix: this.prefix }, options)) {
      try {
        const rev = await verifyRevocation(decodeRevocation(value))
        const cid = (await revocationCid(rev)).toString()
        if (key.toString() !== `${this.prefix}/${cid}`) throw new InvalidTokenError('stored under another key')
        if (this.limits.expired(rev.payload.exp, now)) {
          expired.push(key)
          continue
        }
        this.limits.reserve(cid, rev.payload.iss, rev.payload.exp)
        this.index(cid, rev)
      } catch (err: any) {
        // a damaged or over-quota record is skipped, not fatal
        this.log?.('skipped stored revocation %s: %s', key.toString(), err?.message ?? err)
      }
    }
    for (const key of expired) await this.forget(key)
    this.loaded = true
  }

  private index (cid: string, rev: Revocation): void {
    this.seen.add(cid)
    this.records.set(cid, rev)
    let revokers = this.byToken.get(rev.payload.revoke)
    if (revokers == null) {
      revokers = new Map()
      this.byToken.set(rev.payload.revoke, revokers)
    }
    let mine = revokers.get(rev.payload.iss)
    if (mine == null) {
      mine = new Map()
      revokers.set(rev.payload.iss, mine)
    }
    mine.set(cid, rev)
  }

  private unindex (cid: string): void {
    const rev = this.records.get(cid)
    this.seen.delete(cid)
    if (rev == null) return
    this.records.delete(cid)
    const revokers = this.byToken.get(rev.payload.revoke)
    const mine = revokers?.get(rev.payload.iss)
    if (revokers == null || mine == null) return
    mine.delete(cid)
    if (mine.size === 0) revokers.delete(rev.payload.iss)
    if (revokers.size === 0) this.byToken.delete(rev.payload.revoke)
  }

  private async forget (key: Key): Promise<void> {
    try {
      await this.datastore.delete(key)
    } catch (err: any) {
      this.log?.error('could not delete expired revocation %s: %s', key.toString(), err?.message ?? err)
    }
  }

  /**
   * Forget the records whose revoked token has expired (`exp + clockSkew`
   * passed), in memory and in the datastore. `add` does this too.
   */
  async prune (now = Date.now()): Promise<number> {
    const cids = this.limits.takeExpired(now)
    for (const cid of cids) {
      this.unindex(cid)
      await this.forget(new Key(`${this.prefix}/${cid}`))
    }
    if (cids.length > 0) this.log?.('forgot %d expired revocations', cids.length)
    return cids.length
  }

  /**
   * Verify (signature; and authority when `path` is given) and store a
   * revocation. Resolves `true` when it was new to this store, `false` when
   * it was already held or its token has already expired (nothing stored).
   * Throws `RevocationQuotaError` (nothing stored) when its issuer, or the
   * store, holds its quota.
   */
  async add (rev: Revocation, options: { signal?: AbortSignal, path?: Token[], now?: number } = {}): Promise<boolean> {
    options.signal?.throwIfAborted()
    const now = options.now ?? Date.now()
    const clean = await verifyRevocation(rev, options.path)
    const bytes = encodeRevocation(clean)
    const cid = CID.createV1(DAG_CBOR, await sha256.digest(bytes)).toString()
    if (this.seen.has(cid)) return false
    await this.prune(now)
    if (this.seen.has(cid)) return false
    if (this.limits.expired(clean.payload.exp, now)) {
      this.log?.('revocation %s of %s: the token expired at %d, not stored', cid, clean.payload.revoke, clean.payload.exp)
      return false
    }
    // claim it (and its quota) before the next await, so concurrent adds of one record agree on which is new
    this.limits.reserve(cid, clean.payload.iss, clean.payload.exp)
    this.seen.add(cid)
    try {
      await this.datastore.put(new Key(`${this.prefix}/${cid}`), bytes, { signal: options.signal })
    } catch (err) {
      this.seen.delete(cid)
      this.limits.release(cid)
      throw err
    }
    this.index(cid, clean)
    return true
  }

  /**
   * Is the token with CID `cid` revoked? With `issuers` (the principals that
   * may revoke it, as `verifyChain` passes them) only a revocation by one of
   * them counts. Without, any revocation with a valid signature counts: that
   * fails closed, but lets anyone revoke anything, so verifiers should pass
   * `issuers`. Throws until the store is loaded. An arrow function property:
   * it can be passed as `isRevoked` to `verifyChain` as it is.
   */
  readonly isRevoked = (cid: string, issuers?: Iterable<Did>): boolean => {
    if (!this.loaded) throw new CollabError('NOT_LOADED', 'RevocationStore.load() has not completed')
    const revokers = this.byToken.get(cid)
    if (revokers == null) return false
    if (issuers == null) return true
    for (const i of issuers) {
      if (revokers.has(i)) return true
    }
    return false
  }

  /** Is the revocation with this CID held? */
  has (revocationCid: string): boolean {
    return this.records.has(revocationCid)
  }

  /** The revocations held for a token, one per revoker */
  revocationsOf (tokenCid: string): Revocation[] {
    return [...(this.byToken.get(tokenCid)?.values() ?? [])].map(mine => mine.values().next().value as Revocation)
  }

  /** Number of revocations held */
  get size (): number {
    return this.records.size
  }
}

// ---------------------------------------------------------------------------
// flooding

export interface RevocationServiceInit {
  /**
   * Announces accepted from one peer: `requests` per `per` ms (token bucket);
   * more get `RATE_LIMITED`
   *
   * @default { requests: 100, per: 60_000 }
   */
  rateLimit?: { requests: number, per: number }
  /**
   * Timeout of one announce sent to one peer, ms (both attempts when the
   * peer speaks only 1.0.0)
   *
   * @default 5_000
   */
  announceTimeout?: number
  /** Announces sent at once while flooding @default 16 */
  concurrency?: number
  /** Peers whose rate is tracked; the least recently seen are forgotten beyond this @default 10_000 */
  maxTrackedPeers?: number
}

export interface PublishResult {
  /** The revocation was new to the local store */
  new: boolean
  /** Connected peers it was sent to */
  peers: number
  /** Peers that acknowledged it */
  delivered: number
  /**
   * Peers that speak only `/ioa/revocation/1.0.0`, to which the record was
   * not sent because it carries `exp` (they would refuse it)
   */
  skipped: number
}

export interface RevocationService {
  readonly store: RevocationStore
  /** Verify and store a revocation locally, then send it to every connected peer */
  publish(rev: Revocation, options?: { signal?: AbortSignal }): Promise<PublishResult>
  /** Stop serving the protocol and cancel floods in progress */
  stop(): Promise<void>
}

function positive (name: string, value: number): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw new TypeError(`${name} must be a positive number, got ${String(value)}`)
  }
  return value
}

/**
 * Serve `/ioa/revocation/1.1.0` and `/ioa/revocation/1.0.0` on `node`: an
 * `announce` carrying a revocation (its encoded bytes, or the record as a
 * map) is verified, stored, and when it is new to `store` sent on to every
 * connected peer except the sender, once: on 1.1.0, or on 1.0.0 to a peer
 * that speaks only that, unless the record carries `exp` (then it is skipped
 * for that peer, and logged). Both versions accept records with and without
 * `exp`. Answers `{ new: boolean }`; bad input gets a typed error
 * (`INVALID_TOKEN`, `INVALID_SIGNATURE`, `RATE_LIMITED`, `REVOCATION_QUOTA`).
 */
export async function createRevocationService (node: TransportNode, store: RevocationStore, init: RevocationServiceInit = {}): Promise<RevocationService> {
  const rate = init.rateLimit ?? { requests: 100, per: 60_000 }
  const limiter = new TokenBuckets(
    positive('rateLimit.requests', rate.requests),
    positive('rateLimit.per', rate.per),
    Math.floor(positive('maxTrackedPeers', init.maxTrackedPeers ?? 10_000))
  )
  const announceTimeout = positive('announceTimeout', init.announceTimeout ?? 5_000)
  const concurrency = Math.floor(positive('concurrency', init.concurrency ?? 16))
  const messaging = node.services.messaging
  const log = node.logger.forComponent('ioa:collab:revocation')
  const controller = new AbortController()
  const floods = new Set<Promise<unknown>>()
  let stopped = false

  /** Did the peer list `protocol` in identify? Unknown peers: no */
  const speaks = async (peer: PeerId, protocol: string): Promise<boolean> => {
    try {
      return (await node.peerStore.get(peer)).protocols.includes(protocol)
    } catch (err: any) {
      log('protocols of %p unknown (%s): taken as not speaking %s', peer, err?.name ?? err, protocol)
      return false
    }
  }

  /**
   * Send a record to one peer on 1.1.0; when the peer does not speak it, on
   * 1.0.0 if the record has no `exp` (a 1.0.0 peer refuses the field), else
   * not at all ('skipped')
   */
  const announceTo = async (peer: PeerId, rev: Revocation, bytes: Uint8Array, signal: AbortSignal): Promise<'delivered' | 'skipped'> => {
    const deadline = Date.now() + announceTimeout
    try {
      await messaging.request(peer, REVOCATION_PROTOCOL, ANNOUNCE_METHOD, bytes, { timeout: announceTimeout, signal })
      return 'delivered'
    } catch (err: any) {
      if (err?.code !== ProtocolNotSupportedError.code) throw err
      // a peer that speaks neither version (as identify reported) is a failure, not a skip
      if (rev.payload.exp !== undefined && !await speaks(peer, REVOCATION_PROTOCOL_1_0)) throw err
    }
    if (rev.payload.exp !== undefined) {
      log('peer %p speaks only %s, which refuses a record with exp: revocation of %s by %s not sent to it',
        peer, REVOCATION_PROTOCOL_1_0, rev.payload.revoke, rev.payload.iss)
      return 'skipped'
    }
    await messaging.request(peer, REVOCATION_PROTOCOL_1_0, ANNOUNCE_METHOD, bytes, { timeout: Math.max(1, deadline - Date.now()), signal })
    return 'delivered'
  }

  const flood = async (rev: Revocation, except?: PeerId, signal?: AbortSignal): Promise<{ peers: number, delivered: number, skipped: number }> => {
    const bytes = encodeRevocation(rev)
    const targets = node.getPeers().filter(p => except == null || !p.equals(except))
    const combined = signal != null ? AbortSignal.any([signal, controller.signal]) : controller.signal
    let delivered = 0
    let skipped = 0
    let next = 0
    const worker = async (): Promise<void> => {
      while (next < targets.length && !combined.aborted) {
        const peer = targets[next++]
        try {
          if (await announceTo(peer, rev, bytes, combined) === 'delivered') delivered++
          else skipped++
        } catch (err: any) {
          // a peer that does not speak the protocol, is gone, or refuses: it
          // learns the revocation from another peer or not at all
          log('announce to %p failed: %s', peer, err?.code ?? err?.message ?? err)
        }
      }
    }
    await Promise.all(Array.from({ length: Math.min(concurrency, targets.length) }, worker))
    return { peers: targets.length, delivered, skipped }
  }

  const track = (p: Promise<unknown>): void => {
    floods.add(p)
    // a background flood has no caller to tell: its end is logged (publish's caller also gets it)
    p.catch((err: unknown) => { log('a revocation flood ended early: %e', err) }).finally(() => { floods.delete(p) })
  }

  const announced = async (payload: unknown, ctx: RequestContext): Promise<{ new: boolean }> => {
    if (stopped) throw new CollabError('STOPPED', 'Revocation service stopped')
    if (!limiter.take(ctx.peer.toString())) {
      log('peer %p is over its announce rate', ctx.peer)
      throw new RateLimitedError(`Peer ${ctx.peer.toString()} sent more than ${rate.requests} announces in ${rate.per} ms`)
    }
    let fresh: boolean
    let rev: Revocation
    try {
      rev = payload instanceof Uint8Array ? decodeRevocation(payload) : parseRevocation(payload)
      fresh = await store.add(rev, { signal: ctx.signal })
    } catch (err: any) {
      // refused: answered with its code, stored nowhere, forwarded to nobody
      log('refused announce from %p: %s %s', ctx.peer, err?.code ?? '', err?.message ?? err)
      throw err
    }
    if (fresh && !stopped) {
      // answer now; the flood goes on in the background
      track(flood(rev, ctx.peer))
    }
    return { new: fresh }
  }
  // one handler for both versions: 1.0.0 is lenient and also takes records with exp
  for (const protocol of REVOCATION_PROTOCOLS) await messaging.handle(protocol, ANNOUNCE_METHOD, announced)

  return {
    store,
    async publish (rev, options = {}) {
      if (stopped) throw new CollabError('STOPPED', 'Revocation service stopped')
      const fresh = await store.add(rev, options)
      const p = flood(rev, undefined, options.signal)
      track(p)
      return { new: fresh, ...await p }
    },
    async stop () {
      if (stopped) return
      stopped = true
      controller.abort(new CollabError('STOPPED', 'Revocation service stopped'))
      for (const protocol of REVOCATION_PROTOCOLS) {
        await messaging.unhandle(protocol, ANNOUNCE_METHOD).catch((err: any) => {
          log('could not unhandle %s: %s', protocol, err?.message ?? err)
        })
      }
      await Promise.allSettled([...floods])
    }
  }
}
