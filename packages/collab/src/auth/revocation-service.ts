/**
 * Revocation flooding (`/ioa/revocation/1.1.0` and `1.0.0`): a new record is
 * announced to every connected peer once, and records announced by peers are
 * verified, stored and passed on (spec/collab-delegation.md 8)
 */
import { RateLimitedError } from '@ioa/interconnect'
import { ProtocolNotSupportedError } from '@ioa/transport'
import { BoundedMap, TokenBuckets } from '@ioa/transport/internal'
import { CollabError } from '../errors.js'
import {
  ANNOUNCE_METHOD, REVOCATION_PROTOCOL, REVOCATION_PROTOCOL_1_0, REVOCATION_PROTOCOLS, decodeRevocation, encodeRevocation, parseRevocation
} from './revocation.js'
import type { Revocation } from './revocation.js'
import type { RevocationStore } from './revocation-store.js'
import type { RequestContext, TransportNode } from '@ioa/transport'
import type { PeerId } from '@libp2p/interface'

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
  /**
   * Peers whose announce rate is tracked, and peers remembered as speaking
   * only `/ioa/revocation/1.0.0` (each bound on its own); the least recently
   * seen are forgotten beyond this
   *
   * @default 10_000
   */
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
  const maxTrackedPeers = Math.floor(positive('maxTrackedPeers', init.maxTrackedPeers ?? 10_000))
  const limiter = new TokenBuckets(positive('rateLimit.requests', rate.requests), positive('rateLimit.per', rate.per), maxTrackedPeers)
  /**
   * Peers that refused 1.1.0 and speak 1.0.0: sent to on 1.0.0 (or skipped)
   * at once, until identify lists 1.1.0 for them
   */
  const legacyPeers = new BoundedMap<string, true>({ maxEntries: maxTrackedPeers })
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
   * not at all ('skipped'). A peer found to speak only 1.0.0 is remembered
   * (at most `maxTrackedPeers`) and not asked on 1.1.0 again until identify
   * lists 1.1.0 for it.
   */
  const announceTo = async (peer: PeerId, rev: Revocation, bytes: Uint8Array, signal: AbortSignal): Promise<'delivered' | 'skipped'> => {
    const deadline = Date.now() + announceTimeout
    const id = peer.toString()
    if (legacyPeers.get(id) != null && await speaks(peer, REVOCATION_PROTOCOL)) {
      log('peer %p now lists %s: asked on it again', peer, REVOCATION_PROTOCOL)
      legacyPeers.delete(id)
    }
    if (legacyPeers.get(id) == null) {
      try {
        await messaging.request(peer, REVOCATION_PROTOCOL, ANNOUNCE_METHOD, bytes, { timeout: announceTimeout, signal })
        return 'delivered'
      } catch (err: any) {
        if (err?.code !== ProtocolNotSupportedError.code) throw err
        // a peer that speaks neither version (as identify reported) is a failure, not a skip
        if (rev.payload.exp !== undefined && !await speaks(peer, REVOCATION_PROTOCOL_1_0)) throw err
      }
      if (rev.payload.exp !== undefined) legacyPeers.set(id, true)
    }
    if (rev.payload.exp !== undefined) {
      log('peer %p speaks only %s, which refuses a record with exp: revocation of %s by %s not sent to it',
        peer, REVOCATION_PROTOCOL_1_0, rev.payload.revoke, rev.payload.iss)
      return 'skipped'
    }
    try {
      await messaging.request(peer, REVOCATION_PROTOCOL_1_0, ANNOUNCE_METHOD, bytes, { timeout: Math.max(1, deadline - Date.now()), signal })
    } catch (err: any) {
      // it speaks neither version now: ask it on 1.1.0 again next time
      if (err?.code === ProtocolNotSupportedError.code) legacyPeers.delete(id)
      throw err
    }
    legacyPeers.set(id, true)
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

