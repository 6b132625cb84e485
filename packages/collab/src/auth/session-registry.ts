/**
 * The executor's session bindings, by connection (spec/collab-tasks.md 2.6):
 * the challenge issued on each connection, and the agents bound on it with
 * their expiry. Everything of a connection is dropped when it closes; every
 * count is bounded (per connection, per peer, in total).
 */
import { TooManyRequestsError } from '@ioa/transport'
import { DEFAULT_CLOCK_SKEW, skillCovers } from './delegation.js'
import { SESSION_LIMITS, verifyBinding } from './session.js'
import { InvalidSessionError, SessionExpiredError, SessionRequiredError } from '../errors.js'
import { numberOption, positiveInteger } from '../options.js'
import { isMap } from '../shape.js'
import type { SessionBinding } from './session.js'
import type { VerificationCache } from './verification-cache.js'
import type { Did } from '@ioa/interconnect'
import type { Logger } from '@libp2p/interface'

/** Session mode of an executor: its bounds, and the skills that require envelope mode */
export interface SessionInit {
  /**
   * Serve session mode (`challenge`, `bind`, unsigned submits); when false,
   * only signed envelopes are accepted and requesters fall back to them
   *
   * @default true
   */
  enabled?: boolean
  /**
   * Skills (names or patterns: `payment.*`) whose requests must carry their
   * own signature (envelope mode); an unsigned request for one is refused
   * with `ENVELOPE_REQUIRED`
   *
   * @default [] (none)
   */
  requireEnvelope?: string[]
  /** Longest binding validity (exp - iat) accepted, in ms (at most 86,400,000) @default 3_600_000 */
  maxBindingTtl?: number
  /** Connections holding a challenge or bindings, in total @default 10_000 */
  maxConnections?: number
  /** Connections of one peer holding a challenge or bindings @default 8 */
  maxConnectionsPerPeer?: number
  /** Agents bound on one connection @default 64 */
  maxAgentsPerConnection?: number
}

/** What the registry needs of a libp2p connection */
export interface SessionConnection {
  id: string
  status: string
  addEventListener(type: 'close', listener: () => void, options?: { once?: boolean }): void
}

interface Entry {
  peer: string
  challenge: Uint8Array
  /** Bound agent → binding expiry */
  agents: Map<Did, number>
}

export const SESSION_DEFAULTS = Object.freeze({
  maxBindingTtl: 3_600_000,
  maxConnections: 10_000,
  maxConnectionsPerPeer: 8,
  maxAgentsPerConnection: 64
})

export class SessionRegistry {
  readonly enabled: boolean
  readonly maxBindingTtl: number
  private readonly maxConnections: number
  private readonly maxConnectionsPerPeer: number
  private readonly maxAgentsPerConnection: number
  private readonly requireEnvelope: string[]
  private readonly clockSkew: number
  private readonly verification: VerificationCache
  private readonly log: Logger
  private readonly connections = new Map<string, Entry>()
  private readonly perPeer = new Map<string, number>()

  constructor (init: SessionInit, options: { clockSkew?: number, verificationCache: VerificationCache, log: Logger }) {
    this.enabled = init.enabled ?? true
    this.maxBindingTtl = numberOption('session.maxBindingTtl', init.maxBindingTtl ?? SESSION_DEFAULTS.maxBindingTtl, { max: SESSION_LIMITS.maxTtl, integer: true })
    this.maxConnections = positiveInteger('session.maxConnections', init.maxConnections ?? SESSION_DEFAULTS.maxConnections)
    this.maxConnectionsPerPeer = positiveInteger('session.maxConnectionsPerPeer', init.maxConnectionsPerPeer ?? SESSION_DEFAULTS.maxConnectionsPerPeer)
    this.maxAgentsPerConnection = positiveInteger('session.maxAgentsPerConnection', init.maxAgentsPerConnection ?? SESSION_DEFAULTS.maxAgentsPerConnection)
    this.requireEnvelope = [...(init.requireEnvelope ?? [])]
    this.clockSkew = options.clockSkew ?? DEFAULT_CLOCK_SKEW
    this.verification = options.verificationCache
    this.log = options.log
  }

  /** Does the executor's configuration require envelope mode for `skill`? */
  requiresEnvelope (skill: string): boolean {
    return this.requireEnvelope.some(p => skillCovers(p, skill))
  }

  /**
   * The connection's challenge (the same one for every call on it), made on
   * first use; `TOO_MANY_REQUESTS` when the peer or the node holds its
   * quota of connections with session state
   */
  challenge (connection: SessionConnection, peer: string): Uint8Array {
    const known = this.connections.get(connection.id)
    if (known != null) return known.challenge
    if (connection.status !== 'open') throw new InvalidSessionError('The connection is closing')
    if (this.connections.size >= this.maxConnections) {
      this.log('refused a session challenge to %s: %d connections hold sessions', peer, this.maxConnections)
      throw new TooManyRequestsError(`More than ${this.maxConnections} connections hold sessions`)
    }
    const held = this.perPeer.get(peer) ?? 0
    if (held >= this.maxConnectionsPerPeer) {
      this.log('refused a session challenge to %s: it holds sessions on %d connections', peer, held)
      throw new TooManyRequestsError(`Peer ${peer} holds sessions on ${this.maxConnectionsPerPeer} connections`)
    }
    const entry: Entry = { peer, challenge: globalThis.crypto.getRandomValues(new Uint8Array(16)), agents: new Map() }
    this.connections.set(connection.id, entry)
    this.perPeer.set(peer, held + 1)
    connection.addEventListener('close', () => { this.drop(connection.id) }, { once: true })
    return entry.challenge
  }

  /**
   * Verify a binding received on `connection` and bind its agent there until
   * the binding's expiry; returns the binding
   */
  async bind (connection: SessionConnection, peer: string, selfPeer: string, raw: unknown): Promise<SessionBinding> {
    const entry = this.connections.get(connection.id)
    if (entry == null) throw new InvalidSessionError('No challenge was issued on this connection: call challenge first')
    const binding = await verifyBinding(raw, {
      remotePeer: peer,
      selfPeer,
      challenge: entry.challenge,
      clockSkew: this.clockSkew,
      maxTtl: this.maxBindingTtl,
      verificationCache: this.verification
    })
    // the connection may have closed while the signature was checked
    if (this.connections.get(connection.id) !== entry) throw new InvalidSessionError('The connection closed')
    const { agent, exp } = binding.payload
    const had = entry.agents.get(agent)
    if (had == null && entry.agents.size >= this.maxAgentsPerConnection) {
      // expired bindings make room first
      const now = Date.now()
      for (const [a, e] of entry.agents) if (e + this.clockSkew < now) entry.agents.delete(a)
    }
    if (had == null && entry.agents.size >= this.maxAgentsPerConnection) {
      this.log('refused a binding of %s from %s: %d agents bound on the connection', agent, peer, this.maxAgentsPerConnection)
      throw new TooManyRequestsError(`More than ${this.maxAgentsPerConnection} agents bound on one connection`)
    }
    // a renewal keeps the later expiry
    entry.agents.set(agent, Math.max(had ?? 0, exp))
    return binding
  }

  /**
   * May an unsigned request of `from` arriving on `connectionId` be taken
   * as `from`'s own? Throws `SESSION_REQUIRED` (no binding) or
   * `SESSION_EXPIRED`
   */
  check (connectionId: string | undefined, from: Did, now = Date.now()): void {
    const exp = connectionId != null ? this.connections.get(connectionId)?.agents.get(from) : undefined
    if (exp == null) throw new SessionRequiredError(`No session binding of ${from} on this connection`)
    if (exp + this.clockSkew < now) throw new SessionExpiredError(`The session binding of ${from} expired at ${exp}`)
  }

  /** Forget a connection's challenge and bindings (it closed) */
  drop (connectionId: string): void {
    const entry = this.connections.get(connectionId)
    if (entry == null) return
    this.connections.delete(connectionId)
    const left = (this.perPeer.get(entry.peer) ?? 1) - 1
    if (left <= 0) this.perPeer.delete(entry.peer)
    else this.perPeer.set(entry.peer, left)
  }

  stats (): { connections: number, peers: number, bindings: number } {
    let bindings = 0
    for (const e of this.connections.values()) bindings += e.agents.size
    return { connections: this.connections.size, peers: this.perPeer.size, bindings }
  }
}

/** The request context of the session methods: who asks, on which connection */
export interface SessionRequestContext {
  peer: { toString(): string }
  connection: SessionConnection
}

/** `challenge` (spec 2.6.2): request `{}`, answer `{ challenge, maxTtl }` */
export function onChallenge (registry: SessionRegistry, payload: unknown, ctx: SessionRequestContext): { challenge: Uint8Array, maxTtl: number } {
  if (!isMap(payload) || Object.keys(payload).length > 0) throw new InvalidSessionError('challenge takes an empty map')
  return { challenge: registry.challenge(ctx.connection, ctx.peer.toString()), maxTtl: registry.maxBindingTtl }
}

/** `bind` (spec 2.6.2): request `{ binding }`, answer `{ agent, exp }`; a refusal is logged with its reason */
export async function onBind (registry: SessionRegistry, selfPeer: string, payload: unknown, ctx: SessionRequestContext, log: Logger): Promise<{ agent: Did, exp: number }> {
  const peer = ctx.peer.toString()
  try {
    if (!isMap(payload) || Object.keys(payload).length !== 1 || !('binding' in payload)) throw new InvalidSessionError('bind takes a map { binding }')
    const { agent, exp } = (await registry.bind(ctx.connection, peer, selfPeer, payload.binding)).payload
    log('bound agent %s on a connection of %s until %d', agent, peer, exp)
    return { agent, exp }
  } catch (err: any) {
    log('refused a session binding from %s: %s %s', peer, err?.code ?? 'ERROR', err?.message ?? err)
    throw err
  }
}
