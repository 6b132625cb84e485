/**
 * The one place the requester knows what an executor peer speaks of the task
 * protocol (spec/collab-tasks.md 14 and 2.6): its version, from identify or
 * learned from a refusal of 2.0.0 (a peer of 1.0.0 only is looked at again
 * after a while: it may be upgraded), and whether a 2.0.0 peer serves session
 * mode. The requester's choice of version and its session client's choice of
 * signing both read it, so one refusal is learned once, for both.
 */
import { BoundedMap } from '@ioa/transport/internal'

export interface PeerVersionsInit {
  /** Peers remembered, least recently set forgotten first */
  maxPeers: number
  /** How long a peer found to speak 1.0.0 only is spoken to without looking again, in ms */
  v1Recheck: number
  /** How long a 2.0.0 peer found not to serve session mode is sent signed envelopes only, in ms */
  sessionlessFor: number
}

interface Known {
  version: 1 | 2
  /** until when `version` holds (epoch ms; Infinity: announced) */
  until: number
  /** until when the peer is taken not to serve session mode */
  sessionless?: number
}

export class PeerVersions {
  private readonly peers: BoundedMap<string, Known>
  private readonly v1Recheck: number
  private readonly sessionlessFor: number

  constructor (init: PeerVersionsInit) {
    this.peers = new BoundedMap({ maxEntries: init.maxPeers })
    this.v1Recheck = init.v1Recheck
    this.sessionlessFor = init.sessionlessFor
  }

  /** The version known for `peer` (undefined: not known, or time to look again) */
  version (peer: string, now = Date.now()): 1 | 2 | undefined {
    const known = this.peers.peek(peer)
    return known != null && known.until > now ? known.version : undefined
  }

  /** `peer` announced 2.0.0 (kept), or speaks 1.0.0 only (kept for `v1Recheck`) */
  setVersion (peer: string, version: 1 | 2, now = Date.now()): void {
    const sessionless = version === 2 ? this.peers.peek(peer)?.sessionless : undefined
    this.peers.set(peer, { version, until: version === 2 ? Infinity : now + this.v1Recheck, ...(sessionless != null ? { sessionless } : {}) })
  }

  /** Should session mode be left out for `peer`: it speaks 1.0.0 only, or serves 2.0.0 without session mode */
  sessionless (peer: string, now = Date.now()): boolean {
    const known = this.peers.peek(peer)
    if (known == null) return false
    if (known.version === 1 && known.until > now) return true
    return known.sessionless != null && known.sessionless > now
  }

  /** `peer` serves 2.0.0 but not session mode (it refused `challenge` as an unknown method) */
  setSessionless (peer: string, now = Date.now()): void {
    // it answered on 2.0.0: keep an announced 2.0.0, else the version stays to be looked up
    const known = this.peers.peek(peer)
    this.peers.set(peer, { version: 2, until: known?.version === 2 ? known.until : 0, sessionless: now + this.sessionlessFor })
  }

  /** Peers known to leave session mode out */
  sessionlessCount (now = Date.now()): number {
    let n = 0
    for (const peer of this.peers.keys()) if (this.sessionless(peer, now)) n++
    return n
  }
}
