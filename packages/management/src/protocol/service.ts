/**
 * The serving side of `/ioa/manage/1.0.0` (`spec/management.md`,
 * "Management protocol"): `snapshot` answers the node's signed snapshot,
 * `watch` streams a new one whenever it changes, with heartbeats between.
 * The snapshot is signed once per change (and at most once per
 * `minInterval` for changes seen by watchers), never per request. Logs on
 * `ioa:management:protocol`.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { TokenExpiredError, tokenCid } from '@ioa/collab'
import { equals } from 'uint8arrays/equals'
import { BadManagementRequestError, TooManyWatchesError } from '../errors.js'
import { authorize, parseProofs } from './auth.js'
import { TaskCounts, snapshotContent } from './managed-node.js'
import { peerDid, signSnapshot } from './snapshot.js'
import type { ManagedNode } from './managed-node.js'
import type { SignedSnapshot, SnapshotProof } from './snapshot.js'
import type { Token, VerifiedChain } from '@ioa/collab'
import type { Did } from '@ioa/interconnect'
import type { RequestContext } from '@ioa/transport'
import type { Logger } from '@libp2p/interface'

/** The management protocol id */
export const MANAGEMENT_PROTOCOL = '/ioa/manage/1.0.0'

export interface ManagementProtocolInit {
  /**
   * The operator: the did whose delegation chains (granting `ioa.manage.*`)
   * may ask this node for its snapshot. Without one the node refuses every
   * management request (`NO_OPERATOR`).
   *
   * @default undefined
   */
  operator?: Did
  /**
   * The node's role in its snapshot
   *
   * @default 'node'
   */
  role?: 'node' | 'agent'
  /**
   * Shortest time between two snapshots signed because of a change watchers
   * see (task counts, connections): changes in between are folded into one,
   * in ms
   *
   * @default 1_000
   */
  minInterval?: number
  /**
   * While someone watches, how often the node looks for changes that raise
   * no event (an agent hosted or removed), in ms
   *
   * @default 5_000
   */
  pollInterval?: number
  /**
   * A snapshot older than this is signed again even when nothing changed
   * (its `time` stays recent), in ms
   *
   * @default 60_000
   */
  maxAge?: number
  /**
   * Open watches per calling peer; more are refused with `TOO_MANY_WATCHES`
   *
   * @default 2
   */
  maxWatchesPerPeer?: number
  /**
   * Open watches on this node from all peers together
   *
   * @default 64
   */
  maxWatches?: number
  /**
   * Heartbeat interval of a watch when the request names none, in ms (a
   * request may ask for 100 to 20_000)
   *
   * @default 5_000
   */
  heartbeat?: number
  /**
   * Tolerance of the `exp` / `nbf` checks of the callers' tokens, in ms
   *
   * @default 30_000
   */
  clockSkew?: number
  /**
   * The tokens this node holds and relies on (a management agent's grant,
   * its agents' delegations): their CID, expiry, audience and issuer (never
   * the tokens) go into the snapshot's `proofs`, so that a doctor can warn
   * before they expire. Read at each snapshot, merged with the node's own
   * (`ManagedNode.heldTokens`: an IoaNode's agents' accepted chains), no
   * CID twice; at most 64 are listed (soonest to expire first)
   *
   * @default none (a management layer adds its topology's grant; the node adds its agents' tokens)
   */
  heldTokens?: () => readonly Token[]
}

/** Defaults of {@link ManagementProtocolInit} */
export const MANAGEMENT_DEFAULTS = Object.freeze({
  role: 'node' as const,
  minInterval: 1_000,
  pollInterval: 5_000,
  maxAge: 60_000,
  maxWatchesPerPeer: 2,
  maxWatches: 64,
  heartbeat: 5_000,
  minHeartbeat: 100,
  maxHeartbeat: 20_000,
  clockSkew: 30_000
})

/** An item of a watch stream */
export type WatchItem =
  | { type: 'snapshot', snapshot: SignedSnapshot, now: number }
  | { type: 'heartbeat', seq: number, now: number }

/** The answer to `snapshot` */
export interface SnapshotResponse {
  snapshot: SignedSnapshot
  /** The node's clock when it answered, ms since the epoch (authenticated by the connection, not signed) */
  now: number
}

type Settings = Omit<typeof MANAGEMENT_DEFAULTS, 'role'> & { role: 'node' | 'agent', operator?: Did, heldTokens?: () => readonly Token[] }

function positive (name: string, value: number, max = 2_147_483_647): number {
  if (!Number.isInteger(value) || value < 1 || value > max) throw new TypeError(`${name} must be an integer from 1 to ${max}`)
  return value
}

/** The management protocol served by one node */
export class ManagementProtocol {
  private readonly log: Logger
  private readonly settings: Settings
  private readonly counts = new TaskCounts()
  private current?: SignedSnapshot
  private currentContent?: Uint8Array
  private seq = 0
  private queue: Promise<unknown> = Promise.resolve()
  private readonly wakers = new Set<() => void>()
  private readonly watchesByPeer = new Map<string, number>()
  private watches = 0
  private timer?: ReturnType<typeof setTimeout>
  private poll?: ReturnType<typeof setInterval>
  private readonly unsubscribe: Array<() => void> = []
  /** The snapshot entry of each held token (its CID is hashed once) */
  private readonly proofEntries = new WeakMap<Token, SnapshotProof>()
  private started = false

  constructor (private readonly node: ManagedNode, init: ManagementProtocolInit = {}) {
    this.log = node.logger.forComponent('ioa:management:protocol')
    const s = { ...MANAGEMENT_DEFAULTS, ...Object.fromEntries(Object.entries(init).filter(([, v]) => v !== undefined)) } as Settings
    positive('minInterval', s.minInterval)
    positive('pollInterval', s.pollInterval)
    positive('maxAge', s.maxAge)
    positive('maxWatchesPerPeer', s.maxWatchesPerPeer, 1024)
    positive('maxWatches', s.maxWatches, 65_536)
    if (!Number.isInteger(s.heartbeat) || s.heartbeat < s.minHeartbeat || s.heartbeat > s.maxHeartbeat) {
      throw new TypeError(`heartbeat must be an integer from ${s.minHeartbeat} to ${s.maxHeartbeat}`)
    }
    if (s.role !== 'node' && s.role !== 'agent') throw new TypeError('role must be node or agent')
    this.settings = s
  }

  /** Register the protocol's methods and start counting the node's tasks */
  async start (): Promise<void> {
    if (this.started) return
    this.started = true
    const changed = (): void => { this.schedule() }
    this.unsubscribe.push(this.node.events.onTask(e => {
      this.counts.count(e)
      changed()
    }))
    this.unsubscribe.push(this.node.events.onExported(changed))
    const t = this.node.transport
    t.addEventListener('connection:open', changed)
    t.addEventListener('connection:close', changed)
    this.unsubscribe.push(() => {
      t.removeEventListener('connection:open', changed)
      t.removeEventListener('connection:close', changed)
    })
    const m = t.services.messaging
    await m.handle(MANAGEMENT_PROTOCOL, 'snapshot', async (payload, ctx) => this.onSnapshot(payload, ctx))
    await m.handleStream(MANAGEMENT_PROTOCOL, 'watch', (payload, ctx) => this.onWatch(payload, ctx))
    if (this.settings.operator == null) this.log('no operator configured: management requests are refused (NO_OPERATOR)')
    this.log('serving %s as %s', MANAGEMENT_PROTOCOL, this.node.nodeIdentity.did)
  }

  async stop (): Promise<void> {
    if (!this.started) return
    this.started = false
    for (const u of this.unsubscribe.splice(0)) u()
    clearTimeout(this.timer)
    clearInterval(this.poll)
    this.timer = undefined
    this.poll = undefined
    this.wake()
    await this.node.transport.services.messaging.unhandle(MANAGEMENT_PROTOCOL).catch((err: unknown) => {
      this.log('could not unregister %s (the node is stopping) - %e', MANAGEMENT_PROTOCOL, err)
    })
  }

  /** The node's current signed snapshot: signed again only when its content changed or it is older than `maxAge` */
  async snapshot (): Promise<SignedSnapshot> {
    const next = this.queue.then(async () => this.refresh())
    this.queue = next.catch(() => {})
    return next
  }

  /** Open watches (for tests and health) */
  stats (): { watches: number, peers: number, seq: number } {
    return { watches: this.watches, peers: this.watchesByPeer.size, seq: this.seq }
  }

  /** The snapshot entries of the tokens the node holds now */
  private async heldProofs (): Promise<SnapshotProof[]> {
    const held = [...(this.settings.heldTokens?.() ?? []), ...(this.node.heldTokens?.() ?? [])]
    const out: SnapshotProof[] = []
    for (const t of held) {
      let entry = this.proofEntries.get(t)
      if (entry == null) {
        entry = { cid: (await tokenCid(t)).toString(), expiresAt: t.payload.exp, audience: t.payload.aud, issuer: t.payload.iss }
        this.proofEntries.set(t, entry)
      }
      if (!out.some(p => p.cid === entry?.cid)) out.push(entry)
    }
    return out
  }

  private async refresh (): Promise<SignedSnapshot> {
    const content = snapshotContent(this.node, this.counts, this.settings.role, await this.heldProofs())
    const bytes = dagCbor.encode(content)
    const now = Date.now()
    if (this.current != null && this.currentContent != null && equals(bytes, this.currentContent) &&
      now - this.current.payload.time < this.settings.maxAge) {
      return this.current
    }
    const signed = await signSnapshot(this.node.nodeIdentity, { ...content, seq: this.seq + 1, time: now })
    this.seq = signed.payload.seq
    this.current = signed
    this.currentContent = bytes
    this.log.trace('signed snapshot %d', this.seq)
    this.wake()
    return signed
  }

  /** A change was seen: while someone watches, refresh after `minInterval` since the last signature */
  private schedule (): void {
    if (!this.started || this.watches === 0 || this.timer != null) return
    const since = Date.now() - (this.current?.payload.time ?? 0)
    this.timer = setTimeout(() => {
      this.timer = undefined
      this.snapshot().catch((err: unknown) => { this.log.error('could not refresh the snapshot - %e', err) })
    }, Math.max(0, this.settings.minInterval - since))
    this.timer.unref?.()
  }

  private wake (): void {
    for (const w of [...this.wakers]) w()
  }

  /** Resolves when a new snapshot is signed, after `ms`, or when `signal` aborts */
  private async waitChange (ms: number, signal: AbortSignal): Promise<void> {
    await new Promise<void>(resolve => {
      const done = (): void => {
        clearTimeout(timer)
        this.wakers.delete(done)
        signal.removeEventListener('abort', done)
        resolve()
      }
      const timer = setTimeout(done, ms)
      this.wakers.add(done)
      signal.addEventListener('abort', done, { once: true })
    })
  }

  private async check (payload: unknown, ctx: RequestContext, method: string, allowed: readonly string[]): Promise<VerifiedChain> {
    const caller = peerDid(ctx.peer)
    try {
      const p = payload as Record<string, unknown> | null
      if (p == null || typeof p !== 'object' || Array.isArray(p)) throw new BadManagementRequestError('A management request is a map')
      const extra = Object.keys(p).filter(k => p[k] !== undefined && !allowed.includes(k))
      if (extra.length > 0) throw new BadManagementRequestError(`Unknown fields in the request: ${extra.slice(0, 5).join(', ')}`)
      return await authorize(parseProofs(p.proofs), {
        operator: this.settings.operator,
        node: this.node.nodeIdentity.did,
        caller,
        method,
        clockSkew: this.settings.clockSkew,
        isRevoked: this.node.revocationStore != null ? async (cid, issuers) => this.node.revocationStore?.isRevoked(cid, issuers) ?? false : undefined,
        signal: ctx.signal
      })
    } catch (err: any) {
      this.log('refused %s from %p: %s %s', method, ctx.peer, err?.code ?? err?.name, err?.message)
      throw err
    }
  }

  private async onSnapshot (payload: unknown, ctx: RequestContext): Promise<SnapshotResponse> {
    await this.check(payload, ctx, 'snapshot', ['proofs'])
    return { snapshot: await this.snapshot(), now: Date.now() }
  }

  private async * onWatch (payload: unknown, ctx: RequestContext): AsyncGenerator<WatchItem> {
    const chain = await this.check(payload, ctx, 'watch', ['proofs', 'heartbeat'])
    const s = this.settings
    const asked = (payload as { heartbeat?: unknown }).heartbeat
    if (asked !== undefined && (typeof asked !== 'number' || !Number.isInteger(asked) || asked < s.minHeartbeat || asked > s.maxHeartbeat)) {
      throw new BadManagementRequestError(`heartbeat must be an integer from ${s.minHeartbeat} to ${s.maxHeartbeat} ms`)
    }
    const heartbeat = (asked as number | undefined) ?? s.heartbeat
    const peer = ctx.peer.toString()
    const mine = this.watchesByPeer.get(peer) ?? 0
    if (mine >= s.maxWatchesPerPeer || this.watches >= s.maxWatches) {
      this.log('refused a watch from %p: %d open from it, %d in all', ctx.peer, mine, this.watches)
      throw new TooManyWatchesError(mine >= s.maxWatchesPerPeer
        ? `This peer already has ${mine} open watches (at most ${s.maxWatchesPerPeer})`
        : `This node already serves ${this.watches} watches (at most ${s.maxWatches})`)
    }
    this.watchesByPeer.set(peer, mine + 1)
    this.watches++
    if (this.poll == null) {
      this.poll = setInterval(() => { this.schedule() }, s.pollInterval)
      this.poll.unref?.()
    }
    this.log('watch from %p opened (heartbeat %d ms)', ctx.peer, heartbeat)
    try {
      let sent = await this.snapshot()
      yield { type: 'snapshot', snapshot: sent, now: Date.now() }
      while (this.started && !ctx.signal.aborted) {
        await this.waitChange(heartbeat, ctx.signal)
        if (!this.started || ctx.signal.aborted) break
        if (Date.now() > chain.expiresAt + s.clockSkew) {
          this.log('ended the watch of %p: %s, its delegation chain expired at %s', ctx.peer, TokenExpiredError.code, new Date(chain.expiresAt).toISOString())
          throw new TokenExpiredError('The watch\'s delegation chain expired')
        }
        const cur = this.current
        if (cur != null && cur.payload.seq > sent.payload.seq) {
          sent = cur
          yield { type: 'snapshot', snapshot: cur, now: Date.now() }
        } else {
          yield { type: 'heartbeat', seq: sent.payload.seq, now: Date.now() }
        }
      }
    } finally {
      const left = (this.watchesByPeer.get(peer) ?? 1) - 1
      if (left <= 0) this.watchesByPeer.delete(peer)
      else this.watchesByPeer.set(peer, left)
      this.watches--
      if (this.watches === 0) {
        clearInterval(this.poll)
        this.poll = undefined
      }
      this.log('watch from %p closed', ctx.peer)
    }
  }
}
