/**
 * The gossip index (spec `interconnect.md` 12.3): for every announcer peer
 * its latest capability snapshot, and for every capability name (and each
 * of its prefixes, as the DHT records are) the peers that announce it.
 *
 * Bounded: at most `maxAnnouncers` announcers and `maxNames` indexed names
 * in total (a snapshot weighs the names it indexes, prefixes included);
 * beyond either bound the least recently updated announcers are dropped. A
 * snapshot's ttl is clamped to `maxTtl`. Expired snapshots are never
 * returned and are swept by `prune`.
 */
import { BoundedMap } from '@ioa/transport/internal'
import { capabilityPrefixes } from '../capability.js'
import type { SignedEntry } from './signed-entry.js'
import type { CapabilitySnapshot } from './snapshot.js'

export interface CapabilityIndexInit {
  maxAnnouncers: number
  maxNames: number
  maxTtl: number
  /** Called with the names whose set of announcers changed */
  onChange?(names: Iterable<string>): void
}

interface Entry {
  seq: number
  expiresAt: number
  /** Indexed names: the capabilities and their prefixes */
  names: Set<string>
  /** The announcer's addresses from its snapshot (those naming another peer left out) */
  addrs: string[]
  /** The snapshot as its announcer signed it, to hand on in index answers (section 12.6) */
  signed?: SignedEntry
}

/** What happened to a snapshot given to `apply` */
export type ApplyResult = 'stored' | 'stale'

export interface CapabilityIndexStats {
  /** Announcers held (withdrawn ones until their ttl ends included) */
  announcers: number
  /** Names indexed, prefixes included, over all announcers */
  names: number
  /** Announcers dropped to stay within the bounds */
  evicted: number
}

/** Does `addr` leave out a peer id, or name `peer`? (`/p2p/<other>` is not the announcer's to list) */
function ownAddress (addr: string, peer: string): boolean {
  const at = addr.lastIndexOf('/p2p/')
  return at < 0 || addr.slice(at + 5) === peer
}

export class CapabilityIndex {
  private readonly entries: BoundedMap<string, Entry>
  private readonly byName = new Map<string, Set<string>>()
  private readonly init: CapabilityIndexInit

  constructor (init: CapabilityIndexInit) {
    this.init = init
    this.entries = new BoundedMap<string, Entry>({
      maxEntries: init.maxAnnouncers,
      maxWeight: init.maxNames,
      // an empty snapshot (a withdrawal) is held too: it blocks replays of older ones
      weigh: e => Math.max(1, e.names.size),
      onEvict: (peer, e) => { this.unindex(peer, e) }
    })
  }

  /** Is `seq` not newer than what the index holds of `peer`? */
  isStale (peer: string, seq: number, now = Date.now()): boolean {
    const e = this.entries.peek(peer)
    return e != null && e.expiresAt > now && seq <= e.seq
  }

  /** Store a snapshot of `peer` unless it is stale (replace semantics) */
  apply (peer: string, snapshot: CapabilitySnapshot, now = Date.now(), signed?: SignedEntry): ApplyResult {
    if (this.isStale(peer, snapshot.seq, now)) return 'stale'
    const names = new Set<string>()
    for (const c of snapshot.caps) {
      for (const p of capabilityPrefixes(c)) names.add(p)
    }
    const old = this.entries.peek(peer)
    if (old != null) {
      this.entries.delete(peer)
      this.unindex(peer, old, names)
    }
    const addrs = (snapshot.addrs ?? []).filter(a => ownAddress(a, peer))
    const entry: Entry = { seq: snapshot.seq, expiresAt: now + Math.min(snapshot.ttl, this.init.maxTtl), names, addrs, ...(signed != null ? { signed } : {}) }
    const added: string[] = []
    for (const n of names) {
      let peers = this.byName.get(n)
      if (peers == null) {
        peers = new Set()
        this.byName.set(n, peers)
      }
      if (!peers.has(peer)) {
        peers.add(peer)
        added.push(n)
      }
    }
    if (!this.entries.set(peer, entry)) {
      // heavier than the whole index: keep nothing of it
      this.unindex(peer, entry)
    }
    if (added.length > 0) this.init.onChange?.(added)
    return 'stored'
  }

  /** Forget `peer` */
  remove (peer: string): void {
    const e = this.entries.peek(peer)
    if (e == null) return
    this.entries.delete(peer)
    this.unindex(peer, e)
  }

  /** The addresses `peer` listed in its unexpired snapshot */
  addresses (peer: string, now = Date.now()): string[] {
    const e = this.entries.peek(peer)
    return e != null && e.expiresAt > now ? e.addrs : []
  }

  /** Peers whose unexpired snapshot announces `capability` or a name below it */
  peers (capability: string, now = Date.now()): string[] {
    const out: string[] = []
    for (const peer of this.byName.get(capability) ?? []) {
      const e = this.entries.peek(peer)
      if (e != null && e.expiresAt > now) out.push(peer)
    }
    return out
  }

  /** The signed snapshots of the unexpired announcers of `capability` (those held without a signature left out) */
  signed (capability: string, now = Date.now()): Array<{ peer: string, entry: SignedEntry }> {
    const out: Array<{ peer: string, entry: SignedEntry }> = []
    for (const peer of this.byName.get(capability) ?? []) {
      const e = this.entries.peek(peer)
      if (e?.signed != null && e.expiresAt > now) out.push({ peer, entry: e.signed })
    }
    return out
  }

  /** Drop every expired snapshot */
  prune (now = Date.now()): void {
    for (const [peer, e] of [...this.entries.entries()]) {
      if (e.expiresAt <= now) this.remove(peer)
    }
  }

  stats (): CapabilityIndexStats {
    return { announcers: this.entries.size, names: this.byName.size === 0 ? 0 : this.countNames(), evicted: this.entries.evictions }
  }

  clear (): void {
    this.entries.clear()
    this.byName.clear()
  }

  private countNames (): number {
    let n = 0
    for (const peers of this.byName.values()) n += peers.size
    return n
  }

  /** Take `peer` off the names of `e` (except those in `keep`) */
  private unindex (peer: string, e: Entry, keep?: Set<string>): void {
    const removed: string[] = []
    for (const n of e.names) {
      const peers = this.byName.get(n)
      if (peers == null) continue
      if (keep?.has(n) === true) {
        continue
      }
      peers.delete(peer)
      if (peers.size === 0) this.byName.delete(n)
      removed.push(n)
    }
    if (removed.length > 0) this.init.onChange?.(removed)
  }
}
