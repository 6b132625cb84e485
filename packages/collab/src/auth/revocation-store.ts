/**
 * The revocation store: the records a node knows, datastore-backed, with an
 * in-memory index, bounded by revocation-limits.ts (spec/collab-delegation.md 7)
 */
import { Key } from 'interface-datastore'
import { CID } from 'multiformats/cid'
import { sha256 } from 'multiformats/hashes/sha2'
import { CollabError, InvalidTokenError } from '../errors.js'
import { RevocationLimits } from './revocation-limits.js'
import { DAG_CBOR, decodeRevocation, encodeRevocation, revocationCid, verifyRevocation } from './revocation.js'
import type { RevocationLimitsInit } from './revocation-limits.js'
import type { Token } from './delegation.js'
import type { Revocation } from './revocation.js'
import type { Did } from '@ioa/interconnect'
import type { ComponentLogger, Logger } from '@libp2p/interface'
import type { Datastore } from 'interface-datastore'

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

