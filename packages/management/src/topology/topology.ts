/**
 * A management agent's topology (`spec/management.md`, "Management
 * protocol" 6): it watches every connected peer that serves
 * `/ioa/manage/1.0.0` (with the operator's authority), dials the peers the
 * watched nodes report (finder.ts) so that the whole domain is watched, keeps each node's
 * last verified snapshot, and offers the whole as a snapshot and as a
 * stream of typed events. Logs on `ioa:management:topology`.
 */
import { TopologyOverflowError } from '../errors.js'
import { ManagementCredentials, watchNode } from '../protocol/client.js'
import { MANAGEMENT_PROTOCOL } from '../protocol/service.js'
import { peerDid } from '../protocol/snapshot.js'
import { PeerFinder } from './finder.js'
import { checkGrant } from './grant.js'
import { assemble, linkKey, linksOf, nodeOf } from './model.js'
import type { ManagedNode } from '../protocol/managed-node.js'
import type { SignedSnapshot } from '../protocol/snapshot.js'
import type { TopologyEvent, TopologyLink, TopologyNode, TopologySnapshot } from './model.js'
import type { Token } from '@ioa/collab'
import type { Did } from '@ioa/interconnect'
import type { Logger, PeerId } from '@libp2p/interface'

export interface TopologyInit {
  /**
   * The operator's grant to this node (a token addressed to the node's did
   * granting `ioa.manage.*`, leaf first); none when the node key is the
   * operator's own. Checked at creation: addressed to another key, not
   * granting `ioa.manage.watch`, or expired throws `InvalidGrantError`
   *
   * @default []
   */
  proofs?: Token[]
  /**
   * Heartbeat interval asked of each watched node, in ms (100 to 20_000): a
   * node silent for three of them plus 10 s is gone (a node that stops
   * closes its connections, and is gone at once)
   *
   * @default 5_000
   */
  heartbeat?: number
  /**
   * Only nodes of these domains are kept (the others are not watched further)
   *
   * @default every domain
   */
  domains?: string[]
  /**
   * Most nodes watched at once; more peers are not watched (and logged)
   *
   * @default 256
   */
  maxNodes?: number
  /**
   * After a watch ends with an error while its peer is still connected, watch
   * again after this long, in ms
   *
   * @default 5_000
   */
  retryDelay?: number
  /**
   * How often connected peers not watched are tried again, in ms: a peer
   * whose management protocol started after it was identified is found so
   * (libp2p's identify tells protocols at connection time only)
   *
   * @default 30_000
   */
  rescanInterval?: number
  /**
   * Events a subscriber of `events()` may leave unread; past it its stream
   * ends with `TOPOLOGY_OVERFLOW` (it can start again from `snapshot()`)
   *
   * @default 1_000
   */
  maxQueuedEvents?: number
  /**
   * Dial the peers that watched nodes report in their snapshots'
   * `connections`, and the peers of the node's peer store known to serve
   * the management protocol, so that nodes not connected to this one are
   * watched too; `false`: only connected peers
   *
   * @default true
   */
  discover?: boolean
  /**
   * Dials of reported peers at once
   *
   * @default 4
   */
  maxDials?: number
  /**
   * Reported peers remembered as candidates to dial, in all
   *
   * @default 1_024
   */
  maxCandidates?: number
  /**
   * Candidates one watched node's snapshots may add (a node reporting made-up
   * peers costs the agent at most this many dials per `rescanInterval`)
   *
   * @default 64
   */
  maxCandidatesPerNode?: number
  /**
   * Time of one dial of a reported peer, in ms
   *
   * @default 10_000
   */
  dialTimeout?: number
}

/** Defaults of {@link TopologyInit} */
export const TOPOLOGY_DEFAULTS = Object.freeze({
  heartbeat: 5_000,
  maxNodes: 256,
  retryDelay: 5_000,
  rescanInterval: 30_000,
  maxQueuedEvents: 1_000,
  maxDials: 4,
  maxCandidates: 1_024,
  maxCandidatesPerNode: 64,
  dialTimeout: 10_000
})

/** Codes after which a watch is not tried again on the same connection (the node will keep refusing) */
const FINAL = new Set(['UNAUTHORIZED', 'NOT_OPERATOR', 'WRONG_AUDIENCE', 'NO_OPERATOR', 'ESCALATION', 'PRINCIPAL_MISMATCH', 'PROTOCOL_NOT_SUPPORTED', 'INVALID_NODE_SNAPSHOT'])

interface Watched {
  peer: PeerId
  did: Did
  controller: AbortController
  node?: TopologyNode
  links: Set<string>
}

interface Subscriber {
  queue: TopologyEvent[]
  wake?: () => void
  failed?: Error
}

/** The topology of the nodes a management agent watches */
export interface Topology {
  /** The topology now */
  snapshot(): TopologySnapshot
  /** Its changes from now on; ends when the topology stops or the subscriber falls too far behind */
  events(options?: { signal?: AbortSignal }): AsyncGenerator<TopologyEvent, void, undefined>
  start(): Promise<void>
  stop(): Promise<void>
}

class DefaultTopology implements Topology {
  private readonly log: Logger
  private readonly credentials: ManagementCredentials
  private readonly watched = new Map<string, Watched>()
  private readonly linkReporters = new Map<string, { link: TopologyLink, by: Set<string> }>()
  private readonly subscribers = new Set<Subscriber>()
  private readonly settings: { heartbeat: number, maxNodes: number, retryDelay: number, rescanInterval: number, maxQueuedEvents: number, maxDials: number, maxCandidates: number, maxCandidatesPerNode: number, dialTimeout: number, domains?: Set<string> }
  private readonly finder?: PeerFinder
  /** Peers of a domain not watched (not dialled again), at most `maxCandidates` */
  private readonly excluded = new Set<string>()
  /** Earliest `exp` of the grant (Infinity without one): past it, no node will answer */
  private readonly grantExpires: number
  private grantLogged = false
  private readonly retries = new Set<ReturnType<typeof setTimeout>>()
  private selfTimer?: ReturnType<typeof setInterval>
  private rescanTimer?: ReturnType<typeof setInterval>
  private self?: Watched
  private started = false

  constructor (private readonly node: ManagedNode, init: TopologyInit = {}, private readonly ownSnapshot?: () => Promise<SignedSnapshot>) {
    this.log = node.logger.forComponent('ioa:management:topology')
    checkGrant(init.proofs ?? [], node.nodeIdentity.did)
    this.credentials = new ManagementCredentials({ identity: node.nodeIdentity, proofs: init.proofs })
    this.settings = {
      heartbeat: init.heartbeat ?? TOPOLOGY_DEFAULTS.heartbeat,
      maxNodes: init.maxNodes ?? TOPOLOGY_DEFAULTS.maxNodes,
      retryDelay: init.retryDelay ?? TOPOLOGY_DEFAULTS.retryDelay,
      rescanInterval: init.rescanInterval ?? TOPOLOGY_DEFAULTS.rescanInterval,
      maxQueuedEvents: init.maxQueuedEvents ?? TOPOLOGY_DEFAULTS.maxQueuedEvents,
      maxDials: init.maxDials ?? TOPOLOGY_DEFAULTS.maxDials,
      maxCandidates: init.maxCandidates ?? TOPOLOGY_DEFAULTS.maxCandidates,
      maxCandidatesPerNode: init.maxCandidatesPerNode ?? TOPOLOGY_DEFAULTS.maxCandidatesPerNode,
      dialTimeout: init.dialTimeout ?? TOPOLOGY_DEFAULTS.dialTimeout,
      ...(init.domains != null ? { domains: new Set(init.domains) } : {})
    }
    for (const k of ['heartbeat', 'maxNodes', 'retryDelay', 'rescanInterval', 'maxQueuedEvents', 'maxDials', 'maxCandidates', 'maxCandidatesPerNode', 'dialTimeout'] as const) {
      const v = this.settings[k]
      if (!Number.isInteger(v) || v < 1) throw new TypeError(`${k} must be a positive integer`)
    }
    const proofs = init.proofs ?? []
    this.grantExpires = proofs.length > 0 ? Math.min(...proofs.map(p => p.payload.exp)) : Infinity
    if (init.discover !== false) {
      const st = this.settings
      this.finder = new PeerFinder(node.transport, { ...st, retryAfter: st.rescanInterval }, node.logger.forComponent('ioa:management:topology:finder'), peer => {
        const key = peer.toString()
        return this.watched.has(key) || this.excluded.has(key) || peer.equals(this.node.transport.peerId) ||
          this.node.transport.getConnections(peer).length > 0 || this.grantExpired()
      })
    }
  }

  /** Has the operator's grant expired? (logged once: every node would refuse it) */
  private grantExpired (): boolean {
    if (Date.now() < this.grantExpires) return false
    if (!this.grantLogged) {
      this.grantLogged = true
      this.log.error('the operator\'s grant to this node expired at %s: no node is watched until the node is given a new one', new Date(this.grantExpires).toISOString())
    }
    return true
  }

  async start (): Promise<void> {
    if (this.started) return
    this.started = true
    const t = this.node.transport
    t.addEventListener('peer:identify', this.onIdentify)
    t.addEventListener('connection:open', this.onConnection)
    // a peer that starts serving the protocol after identify ran tells it by identify push
    t.addEventListener('peer:update', this.onPeerUpdate)
    for (const c of t.getConnections()) this.consider(c.remotePeer)
    this.finder?.offerKnown(MANAGEMENT_PROTOCOL).catch((err: unknown) => { this.log.error('could not read the peer store - %e', err) })
    this.rescanTimer = setInterval(() => {
      for (const c of this.node.transport.getConnections()) this.watch(c.remotePeer, true)
      this.finder?.retry()
      this.finder?.offerKnown(MANAGEMENT_PROTOCOL).catch((err: unknown) => { this.log.error('could not read the peer store - %e', err) })
    }, this.settings.rescanInterval)
    this.rescanTimer.unref?.()
    if (this.ownSnapshot != null) {
      const own = this.node.nodeIdentity.did
      this.self = { peer: t.peerId, did: own, controller: new AbortController(), links: new Set() }
      const refresh = (): void => {
        this.ownSnapshot?.().then(s => { if (this.started && this.self != null) this.update(this.self, s, Date.now()) }, (err: unknown) => {
          this.log.error('could not read the own snapshot - %e', err)
        })
      }
      refresh()
      this.selfTimer = setInterval(refresh, this.settings.heartbeat)
      this.selfTimer.unref?.()
    }
    this.log('watching the peers that serve %s', MANAGEMENT_PROTOCOL)
  }

  async stop (): Promise<void> {
    if (!this.started) return
    this.started = false
    const t = this.node.transport
    t.removeEventListener('peer:identify', this.onIdentify)
    t.removeEventListener('connection:open', this.onConnection)
    t.removeEventListener('peer:update', this.onPeerUpdate)
    clearInterval(this.selfTimer)
    clearInterval(this.rescanTimer)
    for (const r of this.retries) clearTimeout(r)
    this.retries.clear()
    this.finder?.stop()
    for (const w of this.watched.values()) w.controller.abort()
    for (const s of this.subscribers) s.wake?.()
  }

  snapshot (): TopologySnapshot {
    const nodes = [...this.watched.values(), ...(this.self != null ? [this.self] : [])].flatMap(w => w.node != null ? [w.node] : [])
    return assemble(nodes, [...this.linkReporters.values()].map(r => r.link), Date.now())
  }

  async * events (options: { signal?: AbortSignal } = {}): AsyncGenerator<TopologyEvent, void, undefined> {
    const sub: Subscriber = { queue: [] }
    this.subscribers.add(sub)
    const onAbort = (): void => { sub.wake?.() }
    options.signal?.addEventListener('abort', onAbort)
    try {
      while (this.started && options.signal?.aborted !== true) {
        const e = sub.queue.shift()
        if (e != null) {
          yield e
          continue
        }
        if (sub.failed != null) throw sub.failed
        await new Promise<void>(resolve => { sub.wake = resolve })
        sub.wake = undefined
      }
    } finally {
      options.signal?.removeEventListener('abort', onAbort)
      this.subscribers.delete(sub)
    }
  }

  private emit (e: TopologyEvent): void {
    for (const s of this.subscribers) {
      if (s.failed != null) continue
      if (s.queue.length >= this.settings.maxQueuedEvents) {
        s.failed = new TopologyOverflowError(`More than ${this.settings.maxQueuedEvents} topology events were not read`)
        s.queue.length = 0
        this.log('a topology subscriber fell %d events behind: its stream ends', this.settings.maxQueuedEvents)
      } else {
        s.queue.push(e)
      }
      s.wake?.()
    }
  }

  private readonly onIdentify = (evt: CustomEvent<{ peerId: PeerId, protocols: string[] }>): void => {
    if (evt.detail.protocols.includes(MANAGEMENT_PROTOCOL)) this.consider(evt.detail.peerId, true)
  }

  private readonly onPeerUpdate = (evt: CustomEvent<{ peer: { id: PeerId, protocols: string[] } }>): void => {
    const { id, protocols } = evt.detail.peer
    if (protocols.includes(MANAGEMENT_PROTOCOL) && !this.watched.has(id.toString()) && this.node.transport.getConnections(id).length > 0) {
      this.consider(id, true)
    }
  }

  private readonly onConnection = (evt: CustomEvent<{ remotePeer: PeerId }>): void => {
    this.consider(evt.detail.remotePeer)
  }

  /** Watch `peer` if it serves the protocol (`known`: identify said so) and is not watched yet */
  private consider (peer: PeerId, known = false): void {
    const key = peer.toString()
    if (!this.started || this.watched.has(key) || peer.equals(this.node.transport.peerId)) return
    const check = known
      ? Promise.resolve(true)
      : this.node.transport.peerStore.get(peer).then(p => p.protocols.includes(MANAGEMENT_PROTOCOL), () => false)
    check.then(serves => {
      if (serves) this.watch(peer)
    }, (err: unknown) => { this.log.error('could not read the protocols of %p - %e', peer, err) })
  }

  /** Watch `peer`; `probe`: it may not serve the protocol (a refusal of the protocol is then not logged) */
  private watch (peer: PeerId, probe = false): void {
    const key = peer.toString()
    if (!this.started || this.watched.has(key) || peer.equals(this.node.transport.peerId)) return
    const did = peerDid(peer)
    if (did == null || this.excluded.has(key) || this.grantExpired()) return
    if (this.watched.size >= this.settings.maxNodes) {
      this.log('not watching %p: already %d nodes (maxNodes)', peer, this.watched.size)
      return
    }
    const w: Watched = { peer, did, controller: new AbortController(), links: new Set() }
    this.watched.set(key, w)
    this.run(w, probe).catch((err: unknown) => { this.log.error('the watch of %p failed - %e', peer, err) })
  }

  private async run (w: Watched, probe: boolean): Promise<void> {
    let reason = 'its watch ended'
    let code: string | undefined
    try {
      const items = watchNode(this.node.transport.services.messaging, w.peer, w.did, this.credentials, { heartbeat: this.settings.heartbeat, signal: w.controller.signal })
      for await (const item of items) {
        if (item.type === 'snapshot') {
          if (this.settings.domains != null && !this.settings.domains.has(item.snapshot.payload.domain)) {
            reason = `its domain ${item.snapshot.payload.domain} is not watched`
            code = 'NOT_WATCHED'
            if (this.excluded.size < this.settings.maxCandidates) this.excluded.add(w.peer.toString())
            break
          }
          this.update(w, item.snapshot, item.receivedAt, item.now)
        } else if (w.node != null) {
          w.node.lastSeen = item.receivedAt
          w.node.clockOffset = item.receivedAt - item.now
        }
      }
    } catch (err: any) {
      code = typeof err?.code === 'string' ? err.code : undefined
      reason = `${code ?? err?.name ?? 'error'}: ${err?.message ?? err}`
      if (this.started && !(probe && code === 'PROTOCOL_NOT_SUPPORTED')) this.log('the watch of %p ended - %s', w.peer, reason)
    } finally {
      this.gone(w, reason)
    }
    const connected = this.node.transport.getConnections(w.peer).length > 0
    // an expired grant is refused by every node: watching again would only be refused again
    const expired = code === 'TOKEN_EXPIRED' && this.grantExpired()
    if (this.started && connected && !expired && code !== 'NOT_WATCHED' && (code == null || !FINAL.has(code))) {
      const retry = setTimeout(() => {
        this.retries.delete(retry)
        this.watch(w.peer)
      }, this.settings.retryDelay)
      retry.unref?.()
      this.retries.add(retry)
    }
  }

  private update (w: Watched, s: SignedSnapshot, receivedAt: number, now = s.payload.time): void {
    const added = w.node == null
    if (!added && w.node != null && w.node.seq === s.payload.seq) {
      w.node.lastSeen = receivedAt
      return
    }
    w.node = nodeOf(s.payload, now, receivedAt)
    this.emit(added ? { type: 'node-added', node: w.node } : { type: 'node-changed', node: w.node })
    this.setLinks(w, linksOf(s.payload))
    // the peers it is connected to are nodes of the domain this one may not see yet
    if (w !== this.self) this.finder?.offer(w.peer.toString(), s.payload)
  }

  private setLinks (w: Watched, links: TopologyLink[]): void {
    const next = new Map(links.map(l => [linkKey(l), l]))
    const reporter = w.peer.toString()
    for (const key of w.links) {
      if (next.has(key)) continue
      const r = this.linkReporters.get(key)
      r?.by.delete(reporter)
      if (r != null && r.by.size === 0) {
        this.linkReporters.delete(key)
        this.emit({ type: 'link-removed', link: r.link })
      }
    }
    for (const [key, link] of next) {
      if (w.links.has(key)) continue
      const r = this.linkReporters.get(key)
      if (r == null) {
        this.linkReporters.set(key, { link, by: new Set([reporter]) })
        this.emit({ type: 'link-added', link })
      } else {
        r.by.add(reporter)
      }
    }
    w.links = new Set(next.keys())
  }

  private gone (w: Watched, reason: string): void {
    if (this.watched.get(w.peer.toString()) !== w) return
    this.watched.delete(w.peer.toString())
    this.finder?.forget(w.peer.toString())
    this.setLinks(w, [])
    if (w.node != null) this.emit({ type: 'node-gone', did: w.did, peer: w.peer.toString(), reason })
  }
}

/**
 * The topology of the nodes `node` watches: every connected peer serving
 * the management protocol. `ownSnapshot` adds the node itself.
 */
export function createTopology (node: ManagedNode, init: TopologyInit = {}, ownSnapshot?: () => Promise<SignedSnapshot>): Topology {
  return new DefaultTopology(node, init, ownSnapshot)
}
