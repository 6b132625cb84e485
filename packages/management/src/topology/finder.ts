/**
 * How a management agent finds the nodes of its domain it is not connected
 * to (`spec/management.md`, "Management protocol" 6): the peers that the
 * nodes it watches report in their snapshots' `connections` (with the
 * address of an outbound connection, which is the peer's listen address),
 * and the peers its own peer store knows to serve `/ioa/manage/1.0.0`. Each
 * candidate is dialled (a few at a time, each peer at most once per
 * `retryAfter`); once connected, the topology's usual watch takes it over.
 * Bounded: candidates in all, candidates one reporting node may add, dials
 * at once. Logs on `ioa:management:topology:finder`.
 */
import { anySignal } from 'any-signal'
import { multiaddr } from '@multiformats/multiaddr'
import { peerIdFromString } from '@libp2p/peer-id'
import type { SnapshotPayload } from '../protocol/snapshot.js'
import type { TransportNode } from '@ioa/transport'
import type { Logger, PeerId } from '@libp2p/interface'

interface FinderLimits {
  /** Dials at once */
  maxDials: number
  /** Candidates remembered in all */
  maxCandidates: number
  /** Candidates one reporting node's snapshot may add */
  maxCandidatesPerNode: number
  /** Time of one dial, ms */
  dialTimeout: number
  /** A peer is dialled again no sooner than this after its last try, ms */
  retryAfter: number
}

interface Candidate {
  peer: PeerId
  /** Listen addresses reported for it (outbound connections to it) */
  addrs: Set<string>
  /** The nodes that reported it */
  by: Set<string>
  /** When it was last tried (0: never) */
  tried: number
}

/** The dialling half of a management agent's discovery of its domain */
export class PeerFinder {
  private readonly candidates = new Map<string, Candidate>()
  /** The candidates each reporting node offered in its last snapshot */
  private readonly byReporter = new Map<string, Set<string>>()
  private readonly pending: string[] = []
  private active = 0
  private stopped = false
  private readonly controller = new AbortController()

  constructor (
    private readonly transport: TransportNode,
    private readonly limits: FinderLimits,
    private readonly log: Logger,
    /** Whether a peer needs no dial: it is watched, connected, or not to be watched */
    private readonly skip: (peer: PeerId) => boolean
  ) {}

  /** The peers `p` (a verified snapshot of `reporter`) is connected to, as candidates */
  offer (reporter: string, p: SnapshotPayload): void {
    const now = new Set(p.connections.map(c => c.peer))
    // what it no longer reports is no longer its candidate
    for (const peer of this.byReporter.get(reporter) ?? []) if (!now.has(peer)) this.drop(reporter, peer)
    for (const c of p.connections) {
      if (c.peer === p.peer) continue
      this.add(c.peer, reporter, c.direction === 'outbound' ? c.addr : undefined)
    }
  }

  /** Peers of the own peer store that said they serve `protocol` (known from an earlier identify), as candidates */
  async offerKnown (protocol: string): Promise<void> {
    const peers = await this.transport.peerStore.all({ filters: [p => p.protocols.includes(protocol)], limit: this.limits.maxCandidates })
    for (const p of peers) this.add(p.id.toString(), 'peer-store')
  }

  /** Try every candidate not tried within `retryAfter` (the topology's rescan) */
  retry (): void {
    const now = Date.now()
    for (const [key, c] of this.candidates) {
      if (now - c.tried >= this.limits.retryAfter) this.enqueue(key)
    }
  }

  /** Forget what `reporter` offered (it is gone); candidates no one else offered are dropped */
  forget (reporter: string): void {
    for (const peer of this.byReporter.get(reporter) ?? []) this.drop(reporter, peer)
    this.byReporter.delete(reporter)
  }

  private drop (reporter: string, peer: string): void {
    this.byReporter.get(reporter)?.delete(peer)
    const c = this.candidates.get(peer)
    c?.by.delete(reporter)
    if (c != null && c.by.size === 0) this.candidates.delete(peer)
  }

  stop (): void {
    this.stopped = true
    this.controller.abort()
    this.candidates.clear()
    this.byReporter.clear()
    this.pending.length = 0
  }

  /** Candidates now (for tests and logs) */
  size (): number {
    return this.candidates.size
  }

  private add (peer: string, reporter: string, addr?: string): void {
    if (this.stopped) return
    const mine = this.byReporter.get(reporter) ?? new Set<string>()
    let c = this.candidates.get(peer)
    if (!mine.has(peer) && mine.size >= this.limits.maxCandidatesPerNode) return
    if (c == null) {
      let id: PeerId
      try {
        id = peerIdFromString(peer)
      } catch (err) {
        this.log('%s reported a peer id that does not parse (%s) - %e', reporter, peer.slice(0, 80), err)
        return
      }
      if (this.skip(id) || this.candidates.size >= this.limits.maxCandidates) return
      c = { peer: id, addrs: new Set(), by: new Set(), tried: 0 }
      this.candidates.set(peer, c)
    }
    c.by.add(reporter)
    mine.add(peer)
    this.byReporter.set(reporter, mine)
    if (addr != null && c.addrs.size < 8) c.addrs.add(addr)
    if (Date.now() - c.tried >= this.limits.retryAfter) this.enqueue(peer)
  }

  private enqueue (key: string): void {
    if (this.pending.includes(key)) return
    this.pending.push(key)
    this.next()
  }

  private next (): void {
    while (!this.stopped && this.active < this.limits.maxDials && this.pending.length > 0) {
      const key = this.pending.shift() as string
      const c = this.candidates.get(key)
      if (c == null || this.skip(c.peer)) continue
      c.tried = Date.now()
      this.active++
      this.dial(c).finally(() => {
        this.active--
        this.next()
      }).catch((err: unknown) => { this.log.error('the dial of %p failed - %e', c.peer, err) })
    }
  }

  private async dial (c: Candidate): Promise<void> {
    const addrs = [...c.addrs].flatMap(a => {
      try {
        return [multiaddr(a)]
      } catch (err) {
        this.log('a reported address of %p does not parse (%s) - %e', c.peer, a.slice(0, 80), err)
        return []
      }
    })
    try {
      if (addrs.length > 0) await this.transport.peerStore.merge(c.peer, { multiaddrs: addrs })
      // without an address, libp2p asks its peer routing (the DHT) for one
      const signal = anySignal([this.controller.signal, AbortSignal.timeout(this.limits.dialTimeout)])
      try {
        await this.transport.dial(c.peer, { signal })
      } finally {
        signal.clear()
      }
      this.log('connected to %p, reported by %s', c.peer, [...c.by].join(', ').slice(0, 200))
    } catch (err: any) {
      if (!this.stopped) this.log('could not reach %p (reported by %d node(s)) - %s', c.peer, c.by.size, err?.code ?? err?.name ?? err?.message)
    }
  }
}
