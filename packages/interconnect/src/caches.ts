/**
 * The interconnect's caches of lookup results and resolved routes, bounded
 * in entries and in bytes of cards (spec `interconnect.md` 7 and 10): a
 * flood of distinct lookups or agent ids only evicts the least recently
 * used entries.
 */
import { BoundedMap } from '@ioa/transport/internal'
import { cardSigningBytes } from './card.js'
import type { SignedCard } from './card.js'
import type { Did } from './identity.js'
import type { DiscoveredAgent } from './types.js'

export interface CacheBounds {
  maxCachedLookups: number
  maxCachedRoutes: number
  maxCacheBytes: number
  maxResultsPerLookup: number
}

export interface CachedLookup { at: number, results: DiscoveredAgent[] }
export interface CachedRoute { at: number, signed: SignedCard, peers: string[] }

export interface InterconnectCacheStats {
  /** Capabilities with cached lookup results (at most `maxCachedLookups`) */
  lookups: number
  /** Bytes of cards in the lookup cache (at most `maxCacheBytes`) */
  lookupBytes: number
  /** Agent ids with a cached route (at most `maxCachedRoutes`) */
  routes: number
  /** Bytes of cards in the route cache (at most `maxCacheBytes`) */
  routeBytes: number
  /** Agents with a record (at most `maxHistory`) */
  history: number
  /** Entries dropped from either cache to stay within the bounds */
  evictions: number
}

/** Bytes a cached card stands for: its signing bytes and signature */
export function cardWeight (signed: SignedCard): number {
  return cardSigningBytes(signed.card).byteLength + signed.sig.byteLength
}

export class InterconnectCaches {
  /** Lookup results by capability */
  readonly lookups: BoundedMap<string, CachedLookup>
  /** Resolved routes by agent id */
  readonly routes: BoundedMap<Did, CachedRoute>
  private readonly maxResults: number

  constructor (bounds: CacheBounds) {
    this.lookups = new BoundedMap({
      maxEntries: bounds.maxCachedLookups,
      maxWeight: bounds.maxCacheBytes,
      weigh: (e) => e.results.reduce((n, r) => n + cardWeight(r.signed), 0)
    })
    this.routes = new BoundedMap({
      maxEntries: bounds.maxCachedRoutes,
      maxWeight: bounds.maxCacheBytes,
      weigh: (e) => cardWeight(e.signed)
    })
    this.maxResults = bounds.maxResultsPerLookup
  }

  /** Keep the best `maxResultsPerLookup` results of a lookup (in place) */
  trim (results: DiscoveredAgent[]): void {
    if (results.length <= this.maxResults) return
    results.sort((a, b) => b.score - a.score)
    results.length = this.maxResults
  }

  /** Trim while a lookup runs, so its results stay bounded before they are cached */
  collect (results: DiscoveredAgent[], result: DiscoveredAgent): void {
    results.push(result)
    if (results.length >= 2 * this.maxResults) this.trim(results)
  }

  /**
   * Remember that `peer` served a valid card of its agent (discovery does, so
   * that a `resolve()` after a `discover()` needs no second DHT walk): the
   * newest card is kept, the peers are merged, the hosting peer first
   */
  addRoute (signed: SignedCard, peer: string, at: number): void {
    const did = signed.card.id
    const cached = this.routes.get(did)
    const peers = cached?.peers.filter(p => p !== peer) ?? []
    // a newer card stays; this peer still serves the agent
    const best = cached != null && cached.signed.card.issuedAt > signed.card.issuedAt ? cached.signed : signed
    if (peer === best.card.peer) peers.unshift(peer)
    else peers.push(peer)
    this.routes.set(did, { at, signed: best, peers })
  }

  stats (history: number): InterconnectCacheStats {
    return {
      lookups: this.lookups.size,
      lookupBytes: this.lookups.weight,
      routes: this.routes.size,
      routeBytes: this.routes.weight,
      history,
      evictions: this.lookups.evictions + this.routes.evictions
    }
  }

  clear (): void {
    this.lookups.clear()
    this.routes.clear()
  }
}
