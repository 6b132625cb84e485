/**
 * The delegation tokens a node's agents rely on: the chains of their
 * submits that an executor accepted (`node.submit`, a handler's
 * `ctx.call`, an orchestrator's steps). The node lists them in its
 * management snapshot's `proofs` (spec/management.md 1.2), so that
 * `ioa doctor` can warn before they expire. Kept by token CID, bounded:
 * expired tokens are dropped, and past `max` the soonest to expire go
 * first (a per-call token of `ctx.call` lives minutes; the grants behind
 * it live longer and stay). Logs on `ioa:node:held-tokens`.
 */
import { tokenCid } from '@ioa/collab'
import type { Token } from '@ioa/collab'
import type { Logger } from '@libp2p/interface'

/** Tokens kept at most, as many as a snapshot lists (spec/management.md 1.7) */
export const MAX_HELD_TOKENS = 64

export class HeldTokens {
  private readonly byCid = new Map<string, Token>()
  /** The CID of each token object seen (a chain sent again is not hashed again) */
  private readonly cids = new WeakMap<Token, string>()

  constructor (private readonly log: Logger, private readonly max = MAX_HELD_TOKENS) {
    if (!Number.isInteger(max) || max < 1 || max > MAX_HELD_TOKENS) throw new RangeError(`max must be an integer from 1 to ${MAX_HELD_TOKENS}`)
  }

  /**
   * Keep the tokens of an accepted submit's chain. Called on every submit:
   * a token seen before (its object, or its CID) costs two map lookups;
   * only a token not hashed yet is hashed, in the background (a failure is logged)
   */
  record (tokens: readonly Token[]): void {
    const now = Date.now()
    let unhashed: Token[] | undefined
    for (const t of tokens) {
      // only what a snapshot can list: a token with a numeric expiry still valid
      if (!Number.isSafeInteger(t?.payload?.exp) || t.payload.exp <= now) continue
      const cid = this.cids.get(t)
      if (cid != null) this.keep(cid, t)
      else (unhashed ??= []).push(t)
    }
    if (unhashed != null) this.hash(unhashed).catch((err: unknown) => { this.log.error('could not keep the tokens of a submit - %e', err) })
  }

  /** The tokens kept now that have not expired, soonest to expire first */
  list (now = Date.now()): Token[] {
    this.dropExpired(now)
    return [...this.byCid.values()].sort((x, y) => x.payload.exp - y.payload.exp)
  }

  private async hash (tokens: Token[]): Promise<void> {
    for (const t of tokens) {
      const cid = (await tokenCid(t)).toString()
      this.cids.set(t, cid)
      this.keep(cid, t)
    }
  }

  /** Keep `t` under `cid`; past `max`, drop the soonest to expire (expired ones first, as they expire soonest) */
  private keep (cid: string, t: Token): void {
    if (this.byCid.has(cid)) return
    this.byCid.set(cid, t)
    while (this.byCid.size > this.max) {
      let first: [string, Token] | undefined
      for (const e of this.byCid) {
        if (first == null || e[1].payload.exp < first[1].payload.exp || (e[1].payload.exp === first[1].payload.exp && e[0] < first[0])) first = e
      }
      if (first == null) break
      this.byCid.delete(first[0])
      this.log.trace('more than %d tokens held: dropped %s, expiring %s', this.max, first[0], new Date(first[1].payload.exp).toISOString())
    }
  }

  private dropExpired (now: number): void {
    for (const [cid, t] of this.byCid) if (t.payload.exp <= now) this.byCid.delete(cid)
  }
}
