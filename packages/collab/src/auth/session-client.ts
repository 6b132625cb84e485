/**
 * The requester's session bindings (spec/collab-tasks.md 2.6): one binding
 * per (executor peer, agent), made lazily on the first session-mode request
 * (`challenge`, then `bind`), renewed before it expires, forgotten when the
 * executor says it has none (a new connection); which executor peers do not
 * serve session mode, and which skills of an agent require envelope mode.
 */
import { BoundedMap } from '@ioa/transport/internal'
import { DEFAULT_BINDING_TTL, SESSION_LIMITS, createBinding } from './session.js'
import { PeerVersions } from '../tasks/peer-versions.js'
import { EnvelopeRequiredError, SessionExpiredError, SessionRequiredError, fromRemote } from '../errors.js'
import { numberOption, positiveInteger } from '../options.js'
import { isMap } from '../shape.js'
import type { Did, Identity } from '@ioa/interconnect'
import type { Logger } from '@libp2p/interface'

/**
 * How a request is authenticated: `session` (the agent's binding on the
 * connection, no per-request signature) or `envelope` (its own signature)
 */
export type AuthMode = 'session' | 'envelope'

/** The requester's session bindings: validity, renewal and bounds */
export interface SessionClientInit {
  /** Validity asked for a new binding, in ms (the executor's `maxTtl` caps it) @default 600_000 */
  bindingTtl?: number
  /** A binding with less than this left is renewed before the next request, in ms @default bindingTtl / 5 */
  renewBefore?: number
  /** (executor peer, agent) bindings remembered, least recently made forgotten @default 4_096 */
  maxBindings?: number
  /**
   * How long an executor peer of 2.0.0 found not to serve session mode is
   * sent signed envelopes only, in ms (a peer of 1.0.0 only is looked at
   * again with the requester's version check, after 30 s) @default 600_000
   */
  unsupportedFor?: number
}

/** The unary calls of the task protocol the client makes (`challenge`, `bind`) */
export type SessionCall = (peer: string, method: 'challenge' | 'bind', payload: Record<string, unknown>, signal?: AbortSignal) => Promise<unknown>

interface Bound {
  exp: number
}

const MAX_MEMO = 4_096
/** A binding with less left than this is not used for a request, ms */
const RENEW_MARGIN = 1_000

/** How long a peer found to speak /ioa/task/1.0.0 only is taken to, before its protocols are looked at again (ms) */
export const V1_RECHECK = 30_000

/** Is `err` the executor's refusal of an unsigned request for want of a (live) binding? */
export function isSessionRefusal (err: unknown): boolean {
  const e = fromRemote(err)
  return e instanceof SessionRequiredError || e instanceof SessionExpiredError
}

/** Is `err` the executor's refusal of an unsigned request for a skill that requires envelope mode? */
export function isEnvelopeRefusal (err: unknown): boolean {
  return fromRemote(err) instanceof EnvelopeRequiredError
}

export class SessionClient {
  private readonly ttl: number
  private readonly renewBefore: number
  private readonly unsupportedFor: number
  private readonly call: SessionCall
  private readonly selfPeer: string
  private readonly log: Logger
  private readonly bound: BoundedMap<string, Bound>
  private readonly binding = new Map<string, Promise<boolean>>()
  /** What each executor peer speaks (shared with the requester's choice of version) */
  readonly versions: PeerVersions
  /** (peer, agent, skill) refused with ENVELOPE_REQUIRED: sent signed from then on */
  private readonly envelopeSkills = new BoundedMap<string, true>({ maxEntries: MAX_MEMO })

  /** `versions` makes the memo of peer versions the requester shares (given `unsupportedFor`; by default one of 4,096 peers) */
  constructor (init: SessionClientInit, call: SessionCall, selfPeer: string, log: Logger, versions?: (sessionlessFor: number) => PeerVersions) {
    this.ttl = numberOption('sessionClient.bindingTtl', init.bindingTtl ?? DEFAULT_BINDING_TTL, { max: SESSION_LIMITS.maxTtl, integer: true })
    this.renewBefore = numberOption('sessionClient.renewBefore', init.renewBefore ?? Math.floor(this.ttl / 5), { min: 0, max: this.ttl - 1 })
    this.unsupportedFor = numberOption('sessionClient.unsupportedFor', init.unsupportedFor ?? 600_000, { min: 0 })
    this.bound = new BoundedMap({ maxEntries: positiveInteger('sessionClient.maxBindings', init.maxBindings ?? MAX_MEMO) })
    this.call = call
    this.selfPeer = selfPeer
    this.log = log
    this.versions = versions?.(this.unsupportedFor) ?? new PeerVersions({ maxPeers: MAX_MEMO, v1Recheck: V1_RECHECK, sessionlessFor: this.unsupportedFor })
  }

  /** Should a request for `skill` of `to` at `peer` go signed (it was refused unsigned before)? */
  needsEnvelope (peer: string, to: Did, skill: string): boolean {
    return this.envelopeSkills.has(`${peer}\n${to}\n${skill}`)
  }

  /** The executor refused an unsigned request for `skill` of `to` with ENVELOPE_REQUIRED */
  requireEnvelope (peer: string, to: Did, skill: string): void {
    this.envelopeSkills.set(`${peer}\n${to}\n${skill}`, true)
  }

  /** Forget the binding of `agent` at `peer` (the executor has none: another connection, or it expired there) */
  forget (peer: string, agent: Did): void {
    this.bound.delete(`${peer}\n${agent}`)
  }

  /**
   * Make sure `agent` holds a live binding at `peer`: true when it does (now
   * or already), false when the peer does not serve session mode or binding
   * failed (the caller signs its request instead). Concurrent callers share
   * one binding exchange.
   */
  async ensure (peer: string, agent: Identity, signal?: AbortSignal): Promise<boolean> {
    if (this.versions.sessionless(peer)) return false
    const key = `${peer}\n${agent.did}`
    const known = this.bound.get(key)
    if (known != null && known.exp - this.renewBefore > Date.now()) return true
    return await this.exchange(peer, agent, key, signal)
  }

  /**
   * Whether a request of `agent` to `peer` can go unsigned now: true while
   * it holds a binding that has not expired. When it holds none, or one due
   * for renewal, a binding exchange starts beside the request (shared with
   * concurrent callers, never rejecting: a failure is logged) and a request
   * without a live binding is signed instead of waiting for the exchange's
   * two round trips.
   */
  bindBeside (peer: string, agent: Identity): boolean {
    if (this.versions.sessionless(peer)) return false
    const key = `${peer}\n${agent.did}`
    const known = this.bound.get(key)
    const now = Date.now()
    if (known != null && known.exp - this.renewBefore > now) return true
    void this.exchange(peer, agent, key)
    // a binding due for renewal still serves while the renewal runs (with a margin for the request's flight)
    return known != null && known.exp - RENEW_MARGIN > now
  }

  /** The binding exchange of `key` under way, or a new one (concurrent callers share it) */
  private exchange (peer: string, agent: Identity, key: string, signal?: AbortSignal): Promise<boolean> {
    let pending = this.binding.get(key)
    if (pending == null) {
      pending = this.bind(peer, agent, key, signal).finally(() => { this.binding.delete(key) })
      this.binding.set(key, pending)
    }
    return pending
  }

  private async bind (peer: string, agent: Identity, key: string, signal?: AbortSignal): Promise<boolean> {
    try {
      const answer = await this.call(peer, 'challenge', {}, signal)
      if (!isMap(answer) || !(answer.challenge instanceof Uint8Array)) throw new TypeError('Malformed challenge answer')
      const maxTtl = typeof answer.maxTtl === 'number' && answer.maxTtl > 0 ? answer.maxTtl : this.ttl
      const iat = Date.now()
      const binding = await createBinding(agent, {
        requester: this.selfPeer, executor: peer, challenge: answer.challenge, issuedAt: iat, expiresAt: iat + Math.min(this.ttl, maxTtl)
      })
      const bound = await this.call(peer, 'bind', { binding }, signal)
      const exp = isMap(bound) && typeof bound.exp === 'number' ? bound.exp : binding.payload.exp
      this.bound.set(key, { exp })
      this.log('bound agent %s at %s until %d', agent.did, peer, exp)
      return true
    } catch (err: any) {
      if (signal?.aborted === true) throw err
      const code: unknown = err?.code
      if (code === 'UNKNOWN_METHOD' || code === 'PROTOCOL_NOT_SUPPORTED') {
        // an executor of 2.0.0 without session mode, or of 1.0.0 only (without it): sign
        if (code === 'UNKNOWN_METHOD') this.versions.setSessionless(peer)
        else this.versions.setVersion(peer, 1)
        this.log('%s does not serve session mode (%s): requests to it are signed', peer, code)
      } else {
        this.log('could not bind agent %s at %s, this request is signed: %s %s', agent.did, peer, code ?? 'ERROR', err?.message ?? err)
      }
      return false
    }
  }

  /** Bindings, peers without session mode, and skills known to require envelope mode */
  stats (): { bindings: number, unsupported: number, envelopeSkills: number } {
    return { bindings: this.bound.size, unsupported: this.versions.sessionlessCount(), envelopeSkills: this.envelopeSkills.size }
  }
}
