/**
 * The bounds of a revocation store (`spec/collab-delegation.md`, 7.4 and 10):
 * how many records each issuer may have held, in total for issuers that are
 * not trusted, and when each record may be forgotten (the revoked token's
 * `exp` plus the clock skew). Bookkeeping only: the store holds the records.
 */
import { RevocationQuotaError } from '../errors.js'
import { positiveInteger } from '../options.js'
import type { Did } from '@ioa/interconnect'

export interface RevocationLimitsInit {
  /**
   * The node's trusted roots: their records have priority (their own quota,
   * not counted against `maxRecords`)
   */
  roots?: Iterable<Did>
  /** Further issuers with priority, e.g. principals known to be under the roots */
  isTrusted?: (iss: Did) => boolean
  /**
   * Records held per issuer that is not trusted
   *
   * @default 1_000
   */
  maxRecordsPerIssuer?: number
  /**
   * Records held in total from issuers that are not trusted
   *
   * @default 20_000
   */
  maxRecords?: number
  /**
   * Records held per trusted issuer
   *
   * @default 10_000
   */
  maxRecordsPerTrustedIssuer?: number
  /**
   * Records held in total from trusted issuers
   *
   * @default 100_000
   */
  maxTrustedRecords?: number
  /**
   * A record with `exp` is forgotten once `exp + clockSkew` has passed (the
   * revoked token can no longer verify), in ms
   *
   * @default 30_000
   */
  clockSkew?: number
}

interface Held {
  iss: Did
  trusted: boolean
  /** forget after this time (`exp + skew`), or never */
  until: number
}

/** Quotas and expiry order of the records of one store, keyed by record CID */
export class RevocationLimits {
  readonly maxRecordsPerIssuer: number
  readonly maxRecords: number
  readonly maxRecordsPerTrustedIssuer: number
  readonly maxTrustedRecords: number
  readonly clockSkew: number
  private readonly roots: Set<Did>
  private readonly isTrustedFn?: (iss: Did) => boolean
  private readonly held = new Map<string, Held>()
  private readonly perIssuer = new Map<Did, number>()
  private untrusted = 0
  private trusted = 0
  /** record CIDs with an expiry, sorted by it; entries before `head` are done */
  private schedule: Array<{ cid: string, until: number }> = []
  private head = 0

  constructor (init: RevocationLimitsInit = {}) {
    this.maxRecordsPerIssuer = positiveInteger('maxRecordsPerIssuer', init.maxRecordsPerIssuer ?? 1_000)
    this.maxRecords = positiveInteger('maxRecords', init.maxRecords ?? 20_000)
    this.maxRecordsPerTrustedIssuer = positiveInteger('maxRecordsPerTrustedIssuer', init.maxRecordsPerTrustedIssuer ?? 10_000)
    this.maxTrustedRecords = positiveInteger('maxTrustedRecords', init.maxTrustedRecords ?? 100_000)
    this.clockSkew = init.clockSkew ?? 30_000
    if (!Number.isFinite(this.clockSkew) || this.clockSkew < 0) throw new RangeError('clockSkew must be >= 0')
    this.roots = new Set(init.roots ?? [])
    this.isTrustedFn = init.isTrusted
  }

  /** Is `iss` a trusted root, or trusted by `isTrusted`? */
  isTrusted (iss: Did): boolean {
    return this.roots.has(iss) || this.isTrustedFn?.(iss) === true
  }

  /** Records held: of trusted issuers, of the others */
  get counts (): { trusted: number, untrusted: number } {
    return { trusted: this.trusted, untrusted: this.untrusted }
  }

  /** Records held of one issuer */
  countOf (iss: Did): number {
    return this.perIssuer.get(iss) ?? 0
  }

  /** Is a record with this `exp` already forgettable at `now`? */
  expired (exp: number | undefined, now: number): boolean {
    return exp != null && exp + this.clockSkew < now
  }

  /**
   * Count a record against its issuer's quotas, or throw
   * `RevocationQuotaError` (nothing counted) when a quota is full
   */
  reserve (cid: string, iss: Did, exp: number | undefined): void {
    if (this.held.has(cid)) return
    const trusted = this.isTrusted(iss)
    const mine = this.countOf(iss)
    if (trusted) {
      if (mine >= this.maxRecordsPerTrustedIssuer) throw new RevocationQuotaError(`Trusted issuer ${iss} already has ${mine} revocations held`)
      if (this.trusted >= this.maxTrustedRecords) throw new RevocationQuotaError(`${this.trusted} revocations of trusted issuers held`)
    } else {
      if (mine >= this.maxRecordsPerIssuer) throw new RevocationQuotaError(`Issuer ${iss} already has ${mine} revocations held`)
      if (this.untrusted >= this.maxRecords) throw new RevocationQuotaError(`${this.untrusted} revocations of untrusted issuers held`)
    }
    const until = exp != null ? exp + this.clockSkew : Infinity
    this.held.set(cid, { iss, trusted, until })
    this.perIssuer.set(iss, mine + 1)
    if (trusted) this.trusted++
    else this.untrusted++
    if (until !== Infinity) this.scheduleAt(cid, until)
  }

  /** Undo `reserve` (the record was not stored, or is forgotten) */
  release (cid: string): void {
    const h = this.held.get(cid)
    if (h == null) return
    this.held.delete(cid)
    const n = this.countOf(h.iss) - 1
    if (n <= 0) this.perIssuer.delete(h.iss)
    else this.perIssuer.set(h.iss, n)
    if (h.trusted) this.trusted--
    else this.untrusted--
  }

  /** The record CIDs whose time ran out by `now`, released; taken from the front of the schedule */
  takeExpired (now: number): string[] {
    const out: string[] = []
    while (this.head < this.schedule.length && this.schedule[this.head].until < now) {
      const { cid, until } = this.schedule[this.head++]
      // a CID released and reserved again is scheduled again: only its current entry counts
      if (this.held.get(cid)?.until === until) {
        this.release(cid)
        out.push(cid)
      }
    }
    if (this.head > 1024 && this.head * 2 > this.schedule.length) {
      this.schedule = this.schedule.slice(this.head)
      this.head = 0
    }
    return out
  }

  private scheduleAt (cid: string, until: number): void {
    // binary search among the pending entries (records arrive rate-limited, so an insert is rare)
    let lo = this.head
    let hi = this.schedule.length
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (this.schedule[mid].until <= until) lo = mid + 1
      else hi = mid
    }
    this.schedule.splice(lo, 0, { cid, until })
  }
}
