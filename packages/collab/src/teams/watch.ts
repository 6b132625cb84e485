/**
 * Read-only watchers of a team's conversation (`spec/teams.md` 5.10): a peer
 * that is not a member reads the log of a member's node, from a seq on and
 * then live, on the authority of a delegation chain rooted at a member (or
 * the convener) that grants `ioa.team.watch` for the team to the watcher's
 * agent, which signs the request. Bounded per team and per peer; the stream
 * ends with the chain's expiry, the conversation's end, or the team leaving
 * the node.
 */
import { anySignal } from 'any-signal'
import { InvalidSignatureError, PrincipalMismatchError, TokenExpiredError, UnauthorizedError } from '../errors.js'
import { capabilityCovers, decodeToken, encodeToken, verifyChain } from '../auth/delegation.js'
import { isMap } from '../shape.js'
import { InvalidTeamRecordError, NotMemberError, PeerMismatchError, RecordExpiredError, TooManyWatchersError, UnknownTeamError } from './errors.js'
import { memberOf, parseEntry, parseWatch, signRecord, verifyRecord } from './records.js'
import { TEAM_PROTOCOL } from './api.js'
import type { TeamsLimits } from './api.js'
import type { Token } from '../auth/delegation.js'
import type { Entry, WatchPayload } from './records.js'
import type { TeamRuntime } from './team.js'
import type { Did, Identity } from '@ioa/interconnect'
import type { Messaging, RequestContext } from '@ioa/transport'
import type { AbortOptions, Logger, PeerId } from '@libp2p/interface'

/** The capability a watch token grants, with the constraint `team` */
export const WATCH_SKILL = 'ioa.team.watch'

/** Encoded tokens in a watch request */
const MAX_PROOFS = 8
const MAX_TOKEN_BYTES = 16_384

/** One item of a watch stream */
export type WatchItem =
  | { entry: Entry }
  | { beat: { seq: number } }
  | { truncated: { from: number } }

export interface TeamWatchersInit {
  limits: TeamsLimits
  log: Logger
  /** The team this node holds, by id */
  lookup: (id: string) => TeamRuntime | undefined
  isRevoked?: (cid: string, issuers: readonly Did[]) => boolean | Promise<boolean>
}

/** The node side of `watch`: the checks, the bounds and the streams */
export class TeamWatchers {
  private readonly init: TeamWatchersInit
  private readonly perTeam = new Map<string, number>()
  private readonly perPeer = new Map<string, number>()

  constructor (init: TeamWatchersInit) {
    this.init = init
  }

  /** Watchers streaming now */
  get size (): number {
    let n = 0
    for (const v of this.perTeam.values()) n += v
    return n
  }

  /** A watch request (spec 5.10): checked in the spec's order, then the stream */
  async * serve (request: unknown, ctx: RequestContext): AsyncGenerator<WatchItem, void, undefined> {
    const { limits, log } = this.init
    if (!isMap(request) || !isMap(request.watch) || !isMap(request.watch.payload) || !Array.isArray(request.proofs)) {
      throw new InvalidTeamRecordError('watch takes { watch, proofs }')
    }
    const team = typeof request.watch.payload.team === 'string' ? this.init.lookup(request.watch.payload.team) : undefined
    if (team == null || !team.hasRoster) throw new UnknownTeamError()
    const watch = parseWatch(request.watch)
    const p = watch.payload
    const peer = ctx.peer.toString()
    if (p.peer !== peer) throw new PeerMismatchError('The watch request names another peer')
    const proofs = decodeProofs(request.proofs)
    if (!await verifyRecord('watch', watch, p.agent)) throw new InvalidSignatureError('Watch signature does not verify')
    if (Math.abs(Date.now() - p.ts) > limits.clockSkew) throw new RecordExpiredError('Watch time outside the clock skew')
    const authorize = async (): Promise<number> => await this.authorize(team, p, proofs)
    const expiresAt = await authorize()
    if (p.from > team.length) throw new InvalidTeamRecordError(`watch.from ${p.from} is beyond the log (${team.length})`)
    if ((this.perTeam.get(team.id) ?? 0) >= limits.maxWatchers) throw new TooManyWatchersError(`Team ${team.id} has ${limits.maxWatchers} watchers on this node`)
    if ((this.perPeer.get(peer) ?? 0) >= limits.maxWatchersPerPeer) throw new TooManyWatchersError(`Peer ${peer} watches ${limits.maxWatchersPerPeer} teams on this node`)
    bump(this.perTeam, team.id, 1)
    bump(this.perPeer, peer, 1)
    log('team %s: %s watches from %d (peer %s)', team.id, p.agent, p.from, peer)
    try {
      yield * this.stream(team, p.from, expiresAt, authorize, ctx.signal)
    } finally {
      bump(this.perTeam, team.id, -1)
      bump(this.perPeer, peer, -1)
      log('team %s: watch of %s ended', team.id, p.agent)
    }
  }

  /** The chain: leaf addressed to the watcher, rooted at a member or the convener, granting the watch of this team; its expiry */
  private async authorize (team: TeamRuntime, p: WatchPayload, proofs: Token[]): Promise<number> {
    const leaf = proofs.find(t => t.payload.aud === p.agent)
    if (leaf == null) throw new PrincipalMismatchError(`No watch token is addressed to ${p.agent}`)
    const chain = await verifyChain(leaf, proofs.filter(t => t !== leaf), { clockSkew: this.init.limits.clockSkew, isRevoked: this.init.isRevoked })
    const roster = team.roster
    if (chain.root !== roster.convener && memberOf(roster, chain.root) == null) {
      throw new NotMemberError(`The watch token's root ${chain.root} is not a member of team ${team.id}`)
    }
    const wanted = { skill: WATCH_SKILL, constraints: { team: team.id } }
    if (!chain.capabilities.some(c => capabilityCovers(c, wanted))) throw new UnauthorizedError(`The chain does not grant ${WATCH_SKILL} for team ${team.id}`)
    return chain.expiresAt
  }

  /**
   * The entries from `from`, then live, with beats; the authority is checked
   * again every `revocationCheckInterval` (a revoked token, a root no longer
   * in the roster end the stream with their code)
   */
  private async * stream (team: TeamRuntime, from: number, expiresAt: number, authorize: () => Promise<number>, signal: AbortSignal): AsyncGenerator<WatchItem, void, undefined> {
    const { heartbeat, clockSkew, revocationCheckInterval } = this.init.limits
    let next = from
    let checked = Date.now()
    while (!signal.aborted && this.init.lookup(team.id) === team) {
      if (Date.now() > expiresAt + clockSkew) throw new TokenExpiredError('The watch token expired')
      if (Date.now() - checked >= revocationCheckInterval) {
        checked = Date.now()
        // signatures are cached: this re-walks the chain for revocation, expiry and the roster
        await authorize()
      }
      if (next > team.length) {
        // the member repaired its log (spec 7.3): what was sent from here on is gone
        next = team.length
        yield { truncated: { from: next } }
      }
      if (next < team.length) {
        const entry = team.store.entry(next++) as Entry
        yield { entry }
        // after the conversation's last entry there is nothing more to watch
        if (entry.msg.payload.type === 'conclude') return
        continue
      }
      const wait = anySignal([signal, AbortSignal.timeout(heartbeat)])
      let beat = false
      try {
        await team.waitFor(next, { signal: wait })
      } catch {
        // no entry within a heartbeat: a beat keeps the stream alive (or the watcher left: the loop ends)
        beat = !signal.aborted
      } finally {
        wait.clear()
      }
      if (beat) yield { beat: { seq: team.length - 1 } }
    }
  }
}

function bump (m: Map<string, number>, key: string, by: number): void {
  const n = (m.get(key) ?? 0) + by
  if (n <= 0) m.delete(key)
  else m.set(key, n)
}

function decodeProofs (list: unknown[]): Token[] {
  if (list.length === 0 || list.length > MAX_PROOFS) throw new InvalidTeamRecordError(`watch.proofs must hold 1 to ${MAX_PROOFS} tokens`)
  return list.map(t => {
    if (!(t instanceof Uint8Array) || t.byteLength > MAX_TOKEN_BYTES) throw new InvalidTeamRecordError('watch.proofs must be encoded tokens')
    return decodeToken(t)
  })
}

export interface WatchTeamInit {
  team: string
  /** The watcher: the audience of the leaf token; signs the request */
  identity: Identity
  /** The chain: the leaf addressed to `identity`, then the tokens it derives from */
  proofs: Token[]
  /** The first seq wanted @default 0 */
  from?: number
}

/**
 * Watch a team's conversation at the node `peer` of a member (spec 5.10):
 * its entries from `from` on, then live, with beats while nothing happens.
 * `timeout` (ms) bounds the wait for each item.
 */
export async function * watchTeam (
  messaging: Pick<Messaging, 'stream'>, self: PeerId, peer: PeerId, init: WatchTeamInit, options: AbortOptions & { timeout?: number } = {}
): AsyncGenerator<WatchItem, void, undefined> {
  const payload: WatchPayload = { v: 1, team: init.team, agent: init.identity.did, peer: self.toString(), from: init.from ?? 0, ts: Date.now() }
  const watch = await signRecord('watch', payload, init.identity)
  const request = { watch, proofs: init.proofs.map(t => encodeToken(t)) }
  for await (const item of messaging.stream(peer, TEAM_PROTOCOL, 'watch', request, options)) {
    if (!isMap(item)) throw new InvalidTeamRecordError('Watch item must be a map')
    if (item.entry != null) yield { entry: parseEntry(item.entry) }
    else if (isMap(item.beat) && typeof item.beat.seq === 'number') yield { beat: { seq: item.beat.seq } }
    else if (isMap(item.truncated) && typeof item.truncated.from === 'number') yield { truncated: { from: item.truncated.from } }
    else throw new InvalidTeamRecordError('Unknown watch item')
  }
}
