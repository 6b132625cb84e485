/**
 * The calling side of `/ioa/manage/1.0.0`: the leaf token a caller issues
 * to the node it asks (`ManagementCredentials`), a snapshot request and a
 * watch, each snapshot verified against the node it came from.
 */
import { delegate, skillCovers } from '@ioa/collab'
import { fromRemote } from '../errors.js'
import { MANAGEMENT_PROTOCOL } from './service.js'
import { verifySnapshot } from './snapshot.js'
import type { SnapshotResponse, WatchItem } from './service.js'
import type { SignedSnapshot } from './snapshot.js'
import type { Capability, Token } from '@ioa/collab'
import type { Did, Identity } from '@ioa/interconnect'
import type { MessageTarget, Messaging } from '@ioa/transport'

/** Added to three heartbeats: how long a watcher waits for an item before it gives the watch up, in ms */
export const WATCH_MARGIN = 10_000

/** Lifetime of a leaf token issued to one node, in ms */
export const DEFAULT_INVOCATION_TTL = 600_000

export interface ManagementCredentialsInit {
  /** The caller: the identity of the calling peer's key (its node key, or the operator's key when the operator's own peer calls) */
  identity: Identity
  /** Tokens from the operator to `identity`, leaf first; none when `identity` is the operator */
  proofs?: Token[]
  /** Lifetime of the leaf tokens issued to each node, ms @default 600_000 */
  ttl?: number
}

const REQUESTED = 'ioa.manage.*'

/**
 * The chains a caller presents: a leaf token from the caller to each node
 * (cached until half its life), proven by the caller's own tokens
 */
export class ManagementCredentials {
  private readonly issued = new Map<Did, { chain: Token[], renewAt: number }>()
  private readonly ttl: number
  private readonly capabilities: Capability[]

  constructor (private readonly init: ManagementCredentialsInit) {
    this.ttl = init.ttl ?? DEFAULT_INVOCATION_TTL
    const parent = init.proofs?.[0]
    if (parent == null) this.capabilities = [{ skill: REQUESTED }]
    else {
      const caps = parent.payload.cap
      this.capabilities = caps.some(c => skillCovers(c.skill, REQUESTED) && c.constraints == null)
        ? [{ skill: REQUESTED }]
        : caps.filter(c => skillCovers(REQUESTED, c.skill))
      if (this.capabilities.length === 0) this.capabilities = [{ skill: REQUESTED }]
    }
  }

  /** The caller's did (the issuer of every leaf) */
  get did (): Did {
    return this.init.identity.did
  }

  /** The chain to present to `node`, leaf first */
  async chainFor (node: Did): Promise<Token[]> {
    const now = Date.now()
    const known = this.issued.get(node)
    if (known != null && known.renewAt > now) return known.chain
    const proofs = this.init.proofs ?? []
    const parentExp = proofs.length > 0 ? Math.min(...proofs.map(p => p.payload.exp)) : Infinity
    const expiresAt = Math.min(parentExp, now + this.ttl)
    const leaf = await delegate(this.init.identity, { audience: node, capabilities: this.capabilities, expiresAt, proofs: proofs.slice(0, 1) })
    const chain = [leaf, ...proofs]
    this.issued.set(node, { chain, renewAt: now + Math.floor((expiresAt - now) / 2) })
    return chain
  }

  /** Forget the chain issued to `node` (it was refused) */
  forget (node: Did): void {
    this.issued.delete(node)
  }
}

export interface ManagementCallOptions {
  signal?: AbortSignal
  /** Request timeout, ms @default messaging's `requestTimeout` */
  timeout?: number
}

/** A verified snapshot and when it was received */
export interface ReceivedSnapshot extends SnapshotResponse {
  /** Round-trip time of the request, ms (0 for a watch's later items) */
  rtt: number
  /** Local time when the answer arrived, ms since the epoch */
  receivedAt: number
}

/** Ask `node` (at `target`) for its snapshot; verifies it is signed by `node` */
export async function requestSnapshot (messaging: Messaging, target: MessageTarget, node: Did, credentials: ManagementCredentials, options: ManagementCallOptions = {}): Promise<ReceivedSnapshot> {
  const proofs = await credentials.chainFor(node)
  const started = Date.now()
  let answer: { snapshot?: unknown, now?: unknown }
  try {
    answer = await messaging.request(target, MANAGEMENT_PROTOCOL, 'snapshot', { proofs }, options)
  } catch (err) {
    credentials.forget(node)
    throw fromRemote(err)
  }
  const receivedAt = Date.now()
  const snapshot = await verifySnapshot(answer?.snapshot, { node })
  return { snapshot, now: typeof answer?.now === 'number' ? answer.now : snapshot.payload.time, rtt: receivedAt - started, receivedAt }
}

export interface WatchOptions extends ManagementCallOptions {
  /** Heartbeat interval asked of the node, ms (100 to 20_000) @default 5_000 */
  heartbeat?: number
}

/** A verified item of a watch */
export type ReceivedWatchItem =
  | { type: 'snapshot', snapshot: SignedSnapshot, now: number, receivedAt: number }
  | { type: 'heartbeat', seq: number, now: number, receivedAt: number }

/**
 * Watch `node`: its snapshot, then a new one on each change and heartbeats
 * between; each snapshot verified (a bad one ends the watch with
 * `INVALID_NODE_SNAPSHOT`). Breaking out closes the stream.
 */
export async function * watchNode (messaging: Messaging, target: MessageTarget, node: Did, credentials: ManagementCredentials, options: WatchOptions = {}): AsyncGenerator<ReceivedWatchItem, void, undefined> {
  const heartbeat = options.heartbeat ?? 5_000
  const proofs = await credentials.chainFor(node)
  const payload = { proofs, ...(options.heartbeat != null ? { heartbeat } : {}) }
  // an item is due at least every heartbeat: three missed ones (and a margin for a busy node) end the watch
  const timeout = options.timeout ?? heartbeat * 3 + WATCH_MARGIN
  try {
    for await (const item of messaging.stream<WatchItem>(target, MANAGEMENT_PROTOCOL, 'watch', payload, { signal: options.signal, timeout })) {
      const receivedAt = Date.now()
      if (item?.type === 'snapshot') {
        yield { type: 'snapshot', snapshot: await verifySnapshot(item.snapshot, { node }), now: Number(item.now), receivedAt }
      } else if (item?.type === 'heartbeat') {
        yield { type: 'heartbeat', seq: Number(item.seq), now: Number(item.now), receivedAt }
      }
    }
  } catch (err) {
    credentials.forget(node)
    throw fromRemote(err)
  }
}
