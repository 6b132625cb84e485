/**
 * The team service (`spec/teams.md`): the `/ioa/team/1.0.0` handlers, the
 * teams this node holds (convener, sequencer or member), invitations on the
 * invitee's side, persistence across restarts, and the wiring of each team's
 * sequencer, follower and failover.
 *
 * Longer than ~500 lines on purpose: it is the one place where the
 * protocol's methods meet the team's roles, and splitting it would spread
 * the role changes (follow, sequence, step down, leave) over several files.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { peerIdFromString } from '@libp2p/peer-id'
import { MemoryDatastore } from 'datastore-core'
import { Key } from 'interface-datastore'
import { anySignal } from 'any-signal'
import { raceSignal } from 'race-signal'
import delay from 'delay'
import { TOKEN_LIMITS, decodeToken, encodeToken, verifyChain } from '../auth/delegation.js'
import { skillCovers } from '../auth/chain.js'
import { UnknownAgentError } from '@ioa/interconnect'
import { EscalationError, InvalidSignatureError, PrincipalMismatchError } from '../errors.js'
import { isMap } from '../shape.js'
import { TEAM_DEFAULTS, TEAM_PROTOCOL } from './api.js'
import {
  DepthExceededError, InvalidTeamRecordError, NotMemberError, NotSequencerError, PeerMismatchError, RecordExpiredError,
  TeamConcludedError, TooManyTeamsError, UnknownTeamError, teamFromRemote
} from './errors.js'
import { Failover } from './failover.js'
import { EventFanout } from './fanout.js'
import { Follower } from './follower.js'
import { formTeam, invite } from './formation.js'
import { TEAM_KEY_PREFIX, TeamLog } from './log.js'
import { defaultMatcher } from './matcher.js'
import { cidOf, memberOf, newTeamId, parseEntry, parseInvitation, signRecord, verifyRecord } from './records.js'
import { checkRepetitionOption } from './repetition.js'
import { Sequencer } from './sequencer.js'
import { LlmSpeakerPolicy } from './flow/llm.js'
import type { SpeakerPolicy } from './flow/policy.js'
import { TeamWatchers } from './watch.js'
import { TeamRuntime } from './team.js'
import type {
  Acceptor, FormOptions, RoleFailure, Team, TeamGoalInit, TeamService, TeamServiceComponents, TeamServiceEvent, TeamTree, TeamsInit, TeamsLimits
} from './api.js'
import type { FormationDeps } from './formation.js'
import type { Entry, Invitation, Roster, TeamGoal, TeamMessage } from './records.js'
import type { Token } from '../auth/delegation.js'
import type { TeamHost } from './team.js'
import type { Did, HostedAgent, Identity } from '@ioa/interconnect'
import type { RequestContext } from '@ioa/transport'
import type { AbortOptions, Logger } from '@libp2p/interface'
import type { Datastore } from 'interface-datastore'

/** One team on this node and the parts that run it */
interface Held {
  team: TeamRuntime
  follower: Follower
  failover: Failover
  sequencer?: Sequencer
  /** The peer that invited this node (for the per-peer quota) */
  invitedBy?: string
  /** Drops an invitee's team that never got its first roster */
  pendingTimer?: ReturnType<typeof setTimeout>
  probing?: boolean
  /** A roster with this node's member has been applied */
  joined?: boolean
}

/** Codes after which a post is tried again (the sequencer is changing) */
const RETRY_POST = new Set(['NOT_SEQUENCER', 'DIAL_FAILED', 'TIMEOUT', 'STREAM_CLOSED', 'PROTOCOL_NOT_SUPPORTED', 'PEER_UNREACHABLE', 'UNKNOWN_TEAM'])

function metaKey (team: string): Key {
  return new Key(`${TEAM_KEY_PREFIX}/${team}/meta`)
}

/** The default acceptor: accept when the agent serves a skill for every capability, before the deadline */
export const defaultAcceptor: Acceptor = ({ invitation, skills }) => {
  const p = invitation.payload
  if (p.goal.deadline <= Date.now()) return { accept: false, decline: { code: 'DEADLINE', reason: 'The deadline has passed' } }
  const missing = p.capabilities.filter(c => !skills.some(s => skillCovers(`${c}.*`, s)))
  if (missing.length > 0) return { accept: false, decline: { code: 'NOT_CAPABLE', reason: `No skill for ${missing.join(', ')}` } }
  return { accept: true }
}

class DefaultTeamService implements TeamService, TeamHost {
  readonly limits: TeamsLimits
  readonly log: Logger
  private readonly components: TeamServiceComponents
  private readonly init: TeamsInit
  private readonly datastore: Datastore
  private readonly held = new Map<string, Held>()
  private readonly perPeer = new Map<string, number>()
  /** Acceptors of single agents (`acceptFor`), before `init.acceptor` */
  private readonly acceptors = new Map<Did, Acceptor>()
  private readonly fanout: EventFanout<TeamServiceEvent>
  /** Speaker policies that are not rules, used while this node sequences (spec 10.4) */
  private readonly policies = new Map<string, SpeakerPolicy>()
  private started = false
  /** Read-only watchers of the conversations (spec 5.10) */
  private readonly watchers: TeamWatchers

  constructor (components: TeamServiceComponents, init: TeamsInit = {}) {
    this.components = components
    this.init = init
    const limits: Record<string, number> = { ...TEAM_DEFAULTS }
    for (const key of Object.keys(TEAM_DEFAULTS)) {
      const v = (init as Record<string, unknown>)[key]
      if (v !== undefined) {
        if (typeof v !== 'number' || !Number.isInteger(v) || v < (key === 'repeatWindow' ? 0 : 1) || v > 2_147_483_647) {
          throw new InvalidTeamRecordError(`Team option ${key} must be an integer from 1 to 2147483647`)
        }
        checkRepetitionOption(key, v)
        limits[key] = v
      }
    }
    this.limits = Object.freeze(limits) as unknown as TeamsLimits
    this.log = components.logger.forComponent(init.logPrefix ?? 'ioa:collab:teams')
    this.datastore = init.datastore ?? new MemoryDatastore()
    this.fanout = new EventFanout(this.limits.maxBufferedEvents)
    if (init.llm != null) this.policies.set('llm', new LlmSpeakerPolicy({ logger: components.logger, ...init.llm }))
    for (const [name, policy] of Object.entries(init.policies ?? {})) this.policies.set(name, policy)
    this.watchers = new TeamWatchers({
      limits: this.limits,
      log: this.log,
      lookup: (id) => this.held.get(id)?.team,
      isRevoked: this.init.revocations == null ? undefined : async (c, issuers) => await (this.init.revocations as { isRevoked(c: string, i?: readonly Did[]): boolean | Promise<boolean> }).isRevoked(c, issuers)
    })
  }

  // -------------------------------------------------------------------------
  // lifecycle

  async start (): Promise<void> {
    if (this.started) return
    this.started = true
    const m = this.components.messaging
    await m.handle(TEAM_PROTOCOL, 'invite', async (p, ctx) => await this.onInvite(p, ctx))
    await m.handleStream(TEAM_PROTOCOL, 'subscribe', (p, ctx) => this.onSubscribe(p, ctx))
    await m.handle(TEAM_PROTOCOL, 'post', async (p, ctx) => await this.onPost(p, ctx))
    await m.handle(TEAM_PROTOCOL, 'ack', (p, ctx) => { this.onAck(p, ctx); return {} })
    await m.handle(TEAM_PROTOCOL, 'history', (p, ctx) => this.onHistory(p, ctx))
    await m.handle(TEAM_PROTOCOL, 'claim', async (p, ctx) => await this.onClaim(p, ctx))
    await m.handle(TEAM_PROTOCOL, 'status', (p, ctx) => this.onStatus(p, ctx))
    await m.handle(TEAM_PROTOCOL, 'tree', async (p, ctx) => await this.onTree(p, ctx))
    await m.handleStream(TEAM_PROTOCOL, 'watch', (p, ctx) => this.watchers.serve(p, ctx))
    await this.loadStored()
  }

  async stop (): Promise<void> {
    if (!this.started) return
    this.started = false
    await this.components.messaging.unhandle(TEAM_PROTOCOL)
    await Promise.all([...this.held.values()].map(async h => { await this.shutdown(h) }))
    this.held.clear()
    this.fanout.close()
  }

  private async shutdown (h: Held): Promise<void> {
    clearTimeout(h.pendingTimer)
    h.sequencer?.stop()
    h.failover.stop()
    await h.follower.stop()
    h.team.close()
  }

  /** Teams stored by an earlier run whose member agent is hosted again (spec 8.3) */
  private async loadStored (): Promise<void> {
    for await (const { key, value } of this.datastore.query({ prefix: TEAM_KEY_PREFIX + '/' })) {
      if (key.baseNamespace() !== 'meta') continue
      try {
        const meta = dagCbor.decode(value) as { agent: Did, promised: number, invitation?: Invitation, proofs?: unknown }
        const id = key.parent().baseNamespace()
        if (this.held.has(id)) continue
        const agent = this.hosted(meta.agent)
        if (agent == null) {
          this.log('team %s: member agent %s is not hosted now; the team stays stored', id, meta.agent)
          continue
        }
        const store = new TeamLog(id, this.datastore, this.limits.historyBytes)
        await store.load(parseEntry)
        const team = new TeamRuntime(id, agent.identity, store, this)
        await team.replayStored()
        team.promised = Math.max(meta.promised, team.epoch)
        if (meta.invitation != null) team.invitation = parseInvitation(meta.invitation)
        if (meta.proofs != null) team.convenerProofs = parseStoredProofs(meta.proofs)
        if (!team.hasRoster || memberOf(team.roster, team.agent) == null) continue
        const h = this.hold(team)
        if (!team.concluded) {
          h.follower.start()
          h.failover.start()
        }
        this.log('team %s: loaded %d entries from the datastore (epoch %d)', id, store.length, team.epoch)
      } catch (err: any) {
        this.log.error('stored team %s could not be loaded - %e', key.toString(), err)
      }
    }
  }

  async resume (): Promise<void> {
    if (this.started) await this.loadStored()
  }

  async saveState (team: TeamRuntime): Promise<void> {
    const meta: Record<string, unknown> = { agent: team.agent, promised: team.promised }
    if (team.invitation != null) meta.invitation = team.invitation
    if (team.convenerProofs != null && team.convenerProofs.length > 0) meta.proofs = team.convenerProofs.map(t => encodeToken(t))
    await this.datastore.put(metaKey(team.id), dagCbor.encode(meta))
  }

  private hosted (did: Did): HostedAgent | undefined {
    return this.components.interconnect.agents().find(a => a.did === did)
  }

  /** Hold a team on this node; `announce`: emit its `team` event now (an invitee's comes with the roster that makes it a member) */
  private hold (team: TeamRuntime, hint?: string, announce = true): Held {
    const follower = new Follower(team, {
      components: this.components,
      limits: this.limits,
      log: this.log,
      hint,
      onFailure: (code) => {
        if (code === 'NOT_SEQUENCER' || code === 'STALE_EPOCH') this.probe(team.id)
        // the sequencer says this agent is no member (it was removed while away): stop following
        if (code === 'NOT_MEMBER' && team.hasRoster) {
          this.log('team %s: the sequencer says %s is not a member; no longer following', team.id, team.agent)
          const h = this.held.get(team.id)
          if (h != null) void this.retire(h)
        }
      }
    })
    const failover = new Failover(team, {
      components: this.components,
      limits: this.limits,
      log: this.log,
      follower,
      save: async (t) => { await this.saveState(t) },
      becomeSequencer: async (t, promised) => { await this.becomeSequencer(t, promised, true) }
    })
    const h: Held = { team, follower, failover }
    this.held.set(team.id, h)
    if (announce) this.emit({ type: 'team', team })
    return h
  }

  private async drop (id: string): Promise<void> {
    const h = this.held.get(id)
    if (h == null) return
    this.held.delete(id)
    if (h.invitedBy != null) this.perPeer.set(h.invitedBy, Math.max(0, (this.perPeer.get(h.invitedBy) ?? 1) - 1))
    await this.shutdown(h)
  }

  private require (id: unknown): Held {
    const h = typeof id === 'string' ? this.held.get(id) : undefined
    if (h == null || !h.team.hasRoster) throw new UnknownTeamError(`This node holds no team ${String(id)}`)
    return h
  }

  /** The requesting peer must be a member's peer (and the named agent's, when one is named) */
  private member (h: Held, ctx: RequestContext, agent?: unknown): void {
    const peer = ctx.peer.toString()
    if (agent != null) {
      const m = typeof agent === 'string' ? memberOf(h.team.roster, agent) : undefined
      if (m == null) throw new NotMemberError(`${String(agent)} is not a member`)
      if (m.peer !== peer) throw new PeerMismatchError()
      return
    }
    if (!h.team.roster.members.some(m => m.peer === peer)) throw new NotMemberError('The requesting peer hosts no member')
  }

  // -------------------------------------------------------------------------
  // roles

  /** Start sequencing a team: a new epoch after a claim, or epoch 0 at formation */
  private async becomeSequencer (team: TeamRuntime, promised: Did[], newEpoch: boolean): Promise<void> {
    const h = this.held.get(team.id)
    if (h == null) return
    await h.follower.stop()
    h.sequencer?.stop()
    team.sequencing = true
    const sequencer = new Sequencer(team, {
      limits: this.limits,
      log: this.log,
      promised,
      epoch: newEpoch ? team.promised : team.epoch,
      policy: (name) => this.policies.get(name),
      // the model's own timeout, and a little for the answer to be taken
      decisionTimeout: (this.init.llm?.timeout ?? 10_000) + 1_000,
      isRevoked: this.init.revocations == null ? undefined : async (cid, issuers) => await (this.init.revocations as { isRevoked(c: string, i?: readonly Did[]): boolean | Promise<boolean> }).isRevoked(cid, issuers)
    })
    h.sequencer = sequencer
    sequencer.start()
    if (newEpoch) {
      try {
        await sequencer.startEpoch(promised)
      } catch (err) {
        this.stepDown(h)
        throw err
      }
      this.log('team %s: %s sequences epoch %d from entry %d', team.id, team.agent, team.epoch, team.length - 1)
    }
  }

  /** Stop sequencing and follow (a higher epoch exists) */
  private stepDown (h: Held, sequencer?: Did): void {
    if (h.sequencer == null) return
    this.log('team %s: stepping down in epoch %d', h.team.id, h.team.epoch)
    h.sequencer.stop()
    h.sequencer = undefined
    h.team.sequencing = false
    if (sequencer != null) h.follower.target = sequencer
    h.follower.start()
  }

  /** Ask the members where the team stands; follow a higher epoch if one exists */
  private probe (id: string): void {
    const h = this.held.get(id)
    if (h == null || h.probing === true || !h.team.hasRoster) return
    h.probing = true
    const team = h.team
    void Promise.all(team.roster.members.filter(m => m.agent !== team.agent).map(async m => {
      try {
        const s = await this.components.messaging.request(peerIdFromString(m.peer), TEAM_PROTOCOL, 'status', { team: id }, { timeout: this.limits.requestTimeout })
        return isMap(s) && typeof s.epoch === 'number' && typeof s.sequencer === 'string' ? { epoch: s.epoch, sequencer: s.sequencer } : undefined
      } catch (err: any) {
        this.log.trace('team %s: no status from %s - %s', id, m.agent, err?.message)
        return undefined
      }
    })).then(answers => {
      const best = answers.reduce<{ epoch: number, sequencer: string } | undefined>((a, b) => b != null && b.epoch > (a?.epoch ?? team.epoch) ? b : a, undefined)
      if (best == null) return
      if (h.sequencer != null) this.stepDown(h, best.sequencer)
      else if (best.sequencer !== team.agent) h.follower.retarget(best.sequencer)
    }).finally(() => { h.probing = false })
  }

  applied (team: TeamRuntime, entry: Entry): void {
    const h = this.held.get(team.id)
    if (h == null) return
    const m = entry.msg.payload
    if (m.type === 'epoch' && m.body.sequencer !== team.agent && h.sequencer != null) {
      this.stepDown(h)
    }
    if (m.type === 'roster') {
      const isMember = memberOf(team.roster, team.agent) != null
      if (h.pendingTimer != null && isMember) {
        clearTimeout(h.pendingTimer)
        h.pendingTimer = undefined
        this.emit({ type: 'team', team })
      }
      // a late joiner applies earlier rosters without itself first: only a roster after one with it means it left
      if (isMember) h.joined = true
      else if (h.joined === true) {
        this.log('team %s: %s is no longer a member', team.id, team.agent)
        void this.retire(h)
      }
    }
    if (m.type === 'conclude') {
      void this.retire(h)
      const parent = team.roster.parent
      if (parent != null && team.roster.convener === team.agent) {
        const p = this.held.get(parent.team)
        if (p != null && team.rosterId != null) {
          p.team.post('subteam', { team: team.id, roster: team.rosterId, state: 'concluded' })
            .catch((err: Error) => { this.log.error('team %s: could not tell parent %s it concluded - %e', team.id, parent.team, err) })
        }
      }
    }
  }

  /** The team ended for this node: stop following and failover; the sequencer keeps serving the last entries a while */
  private async retire (h: Held): Promise<void> {
    h.failover.stop()
    await h.follower.stop()
    const sequencer = h.sequencer
    if (sequencer != null) {
      // subscribers still need the last entries: serve them a few beats more
      setTimeout(() => { sequencer.stop() }, this.limits.heartbeat * 3).unref?.()
    }
  }

  // -------------------------------------------------------------------------
  // posting

  async post (team: TeamRuntime, msg: TeamMessage, options: AbortOptions): Promise<{ seq: number, epoch: number }> {
    // long enough for a takeover: suspicion, the staggered claims of every successor, the new epoch
    const { requestTimeout, sequencerTimeout, claimStagger, claimTimeout } = this.limits
    const deadline = Date.now() + requestTimeout + 4 * sequencerTimeout + (claimStagger + claimTimeout) * team.roster.members.length
    for (let attempt = 0; ; attempt++) {
      options.signal?.throwIfAborted()
      const h = this.held.get(team.id)
      if (h == null) throw new UnknownTeamError()
      if (team.concluded && msg.payload.type !== 'conclude') throw new TeamConcludedError()
      try {
        if (h.sequencer != null) return await h.sequencer.post(msg)
        const target = h.follower.target ?? team.sequencer
        const peer = team.peerOf(target)
        if (peer == null || target === team.agent) throw new NotSequencerError('No sequencer known yet')
        const answer = await this.components.messaging.request(peerIdFromString(peer), TEAM_PROTOCOL, 'post', { team: team.id, msg }, { timeout: this.limits.requestTimeout, signal: options.signal })
        if (!isMap(answer) || typeof answer.seq !== 'number' || typeof answer.epoch !== 'number') throw new InvalidTeamRecordError('Malformed answer to a post')
        // a post counts once this member holds its entry: a sequencer that dies before anyone got it
        // cannot take the message with it (the post is sent again, under the same id, to the next one)
        if (await this.holds(team, answer.seq, msg.payload.id, options)) return { seq: answer.seq, epoch: answer.epoch }
        throw Object.assign(new NotSequencerError(`Entry ${answer.seq} did not arrive`), { code: 'NOT_SEQUENCER' })
      } catch (err: any) {
        const e = teamFromRemote(err) as Error & { code?: string }
        if (!RETRY_POST.has(e.code ?? '') || Date.now() > deadline) throw e
        this.log.trace('team %s: post %s retried after %s', team.id, msg.payload.id, e.code)
        await delay(Math.min(1000, 100 * 2 ** attempt), { signal: options.signal })
      }
    }
  }

  /** Wait (a sequencer timeout at most) until this member's log holds message `id` at `seq` */
  private async holds (team: TeamRuntime, seq: number, id: string, options: AbortOptions): Promise<boolean> {
    const signal = anySignal([options.signal, AbortSignal.timeout(this.limits.sequencerTimeout * 2)])
    try {
      await team.waitFor(seq, { signal })
    } catch (err: any) {
      options.signal?.throwIfAborted()
      this.log.trace('team %s: entry %d not received - %s', team.id, seq, err?.message)
      return false
    } finally {
      signal.clear()
    }
    return team.store.entry(seq)?.msg.payload.id === id || team.store.seqOf(id) != null
  }

  // -------------------------------------------------------------------------
  // handlers

  private async onInvite (payload: unknown, ctx: RequestContext): Promise<unknown> {
    if (!isMap(payload)) throw new InvalidTeamRecordError('invite takes { invitation }')
    const invitation = parseInvitation(payload.invitation)
    const p = invitation.payload
    const peer = ctx.peer.toString()
    if (!await verifyRecord('invite', invitation, p.from)) throw new InvalidSignatureError('Invitation signature does not verify')
    const agent = this.hosted(p.to)
    if (agent == null) throw new UnknownAgentError(`${p.to} is not hosted here`)
    const now = Date.now()
    if (p.exp < now) throw new RecordExpiredError('Invitation expired')
    if (p.exp > now + 60_000 + this.limits.clockSkew) throw new InvalidTeamRecordError('Invitation valid for more than 60 s')
    if (p.depth > this.limits.maxDepth) throw new DepthExceededError(`Team depth ${p.depth} is deeper than ${this.limits.maxDepth}`)
    if (this.held.has(p.team)) throw new InvalidTeamRecordError(`This node holds team ${p.team} already`)
    if (this.held.size >= this.limits.maxTeams || (this.perPeer.get(peer) ?? 0) >= this.limits.maxTeamsPerPeer) {
      throw new TooManyTeamsError(`This node holds ${this.held.size} teams (${this.perPeer.get(peer) ?? 0} from this peer)`)
    }
    const token = decodeToken(p.token)
    if (token.payload.iss !== p.from || token.payload.aud !== p.to) throw new PrincipalMismatchError('The token is not issued by the convener to the invitee')
    const chain = await verifyChain(token, p.proofs.map(t => decodeToken(t)), {
      roots: this.init.roots,
      clockSkew: this.limits.clockSkew,
      isRevoked: this.init.revocations == null ? undefined : async (c, issuers) => await (this.init.revocations as { isRevoked(c: string, i?: readonly Did[]): boolean | Promise<boolean> }).isRevoked(c, issuers),
      signal: ctx.signal
    })
    for (const c of p.capabilities) {
      if (!chain.capabilities.some(k => skillCovers(k.skill, c))) throw new EscalationError(`The token does not grant ${c}`)
    }
    const acceptor = this.acceptors.get(p.to) ?? this.init.acceptor ?? defaultAcceptor
    const decision = await raceSignal(Promise.resolve(acceptor({ invitation, agent: p.to, skills: agent.card.card.skills.map(s => s.id) })), ctx.signal)
    if (!decision.accept) {
      this.emit({ type: 'invited', team: p.team, agent: p.to, from: p.from, accepted: false, decline: decision.decline })
      this.log('team %s: %s declines the invitation of %s: %s', p.team, p.to, p.from, decision.decline.code)
      return { decline: decision.decline }
    }
    const store = new TeamLog(p.team, this.datastore, this.limits.historyBytes)
    const team = new TeamRuntime(p.team, agent.identity, store, this)
    team.invitation = invitation
    const h = this.hold(team, p.sequencer ?? peer, false)
    h.invitedBy = peer
    this.perPeer.set(peer, (this.perPeer.get(peer) ?? 0) + 1)
    h.pendingTimer = setTimeout(() => {
      if (!team.hasRoster || memberOf(team.roster, team.agent) == null) {
        this.log('team %s: no roster within %d ms of accepting; forgotten', p.team, this.limits.inviteTimeout)
        void this.drop(p.team).then(async () => { await store.destroy(); await this.datastore.delete(metaKey(p.team)) })
          .catch((err: Error) => { this.log.error('team %s: cleanup failed - %e', p.team, err) })
      }
    }, this.limits.inviteTimeout)
    h.pendingTimer.unref?.()
    await this.saveState(team)
    h.follower.start()
    h.failover.start()
    const acceptance = await signRecord('accept', { v: 1 as const, team: p.team, invite: await cidOf(invitation), from: p.to, peer: this.components.peerId.toString(), ts: Date.now() }, agent.identity)
    this.emit({ type: 'invited', team: p.team, agent: p.to, from: p.from, accepted: true })
    return { accept: acceptance }
  }

  /** An async generator, so that every refusal reaches the subscriber as an ERROR frame of the stream */
  private async * onSubscribe (payload: unknown, ctx: RequestContext): AsyncGenerator<unknown, void, undefined> {
    if (!isMap(payload) || typeof payload.from !== 'number' || !Number.isInteger(payload.from) || payload.from < 0) {
      throw new InvalidTeamRecordError('subscribe takes { team, agent, from, head? }')
    }
    const h = this.require(payload.team)
    if (h.sequencer == null) throw new NotSequencerError(`This node does not sequence team ${h.team.id}`)
    yield * h.sequencer.subscribe({ agent: payload.agent as Did, from: payload.from, head: typeof payload.head === 'string' ? payload.head : undefined }, ctx.peer.toString(), ctx.signal)
  }

  private async onPost (payload: unknown, ctx: RequestContext): Promise<unknown> {
    if (!isMap(payload)) throw new InvalidTeamRecordError('post takes { team, msg }')
    const h = this.require(payload.team)
    if (h.sequencer == null) throw new NotSequencerError(`This node does not sequence team ${h.team.id}`)
    return await h.sequencer.post(payload.msg, ctx.peer.toString())
  }

  private onAck (payload: unknown, ctx: RequestContext): void {
    if (!isMap(payload) || typeof payload.epoch !== 'number' || typeof payload.seq !== 'number') throw new InvalidTeamRecordError('ack takes { team, agent, epoch, seq }')
    const h = this.require(payload.team)
    if (h.sequencer == null) throw new NotSequencerError()
    h.sequencer.ack({ agent: payload.agent as Did, epoch: payload.epoch, seq: payload.seq }, ctx.peer.toString())
  }

  private onHistory (payload: unknown, ctx: RequestContext): unknown {
    if (!isMap(payload) || typeof payload.from !== 'number' || typeof payload.to !== 'number' || payload.from < 0 || payload.to < payload.from || payload.to - payload.from >= 256) {
      throw new InvalidTeamRecordError('history takes { team, from, to } with to - from < 256')
    }
    const h = this.require(payload.team)
    this.member(h, ctx)
    const out: Record<string, unknown> = { entries: h.team.store.slice(payload.from, payload.to, 1_048_576 - 4096) }
    const cp = h.sequencer?.lastCheckpoint ?? h.team.lastCheckpoint
    if (cp != null) out.checkpoint = cp
    return out
  }

  private async onClaim (payload: unknown, ctx: RequestContext): Promise<unknown> {
    if (!isMap(payload) || !isMap(payload.claim) || !isMap(payload.claim.payload)) throw new InvalidTeamRecordError('claim takes { claim }')
    const h = this.require(payload.claim.payload.team)
    const lease = h.sequencer?.hasLease() ?? false
    const answer = await h.failover.handleClaim(payload.claim, ctx.peer.toString(), lease)
    if (h.sequencer != null) this.stepDown(h, (payload.claim.payload as { agent: Did }).agent)
    return answer
  }

  private onStatus (payload: unknown, ctx: RequestContext): unknown {
    if (!isMap(payload)) throw new InvalidTeamRecordError('status takes { team }')
    const h = this.require(payload.team)
    this.member(h, ctx)
    const t = h.team
    const out: Record<string, unknown> = { epoch: t.epoch, sequencer: t.sequencer, seq: t.length - 1, version: t.roster.version, concluded: t.concluded }
    if (t.store.head != null) out.head = t.store.head
    return out
  }

  private async onTree (payload: unknown, ctx: RequestContext): Promise<unknown> {
    if (!isMap(payload)) throw new InvalidTeamRecordError('tree takes { team }')
    const h = this.require(payload.team)
    const peer = ctx.peer.toString()
    const parent = h.team.roster.parent != null ? this.held.get(h.team.roster.parent.team) : undefined
    const ok = h.team.roster.members.some(m => m.peer === peer) || (parent?.team.roster.members.some(m => m.peer === peer) ?? false)
    if (!ok) throw new NotMemberError('tree answers members of the team and of its parent team')
    return await this.tree(h.team, { signal: ctx.signal })
  }

  // -------------------------------------------------------------------------
  // TeamHost: convener operations

  async admit (team: TeamRuntime, candidate: { agent: Did, peer: string }, role: string, capabilities: string[], options: AbortOptions): Promise<void> {
    if (team.roster.convener !== team.agent) throw new InvalidTeamRecordError('Only the convener admits members')
    const proofs = this.proofsOf(team)
    const r = await invite(this.formationDeps(), team.identity, team.id, team.roster.goal, { role, capabilities }, candidate, {
      proofs, depth: team.roster.depth, parent: team.roster.parent, signal: options.signal, sequencer: team.peerOf(team.sequencer)
    })
    await team.post('admit', { accept: r.acceptance, role, token: r.member.token as string, chain: r.member.chain }, options)
  }

  /** The delegation chain a member's sub-team derives from: its own token and the convener's chain */
  private proofsOf (team: TeamRuntime): FormOptions['proofs'] & object {
    const inv = team.invitation
    if (inv == null) return []
    return [decodeToken(inv.payload.token), ...inv.payload.proofs.map(t => decodeToken(t))]
  }

  async formSubteam (team: TeamRuntime, goal: TeamGoal, options: FormOptions): Promise<Team> {
    const depth = team.roster.depth + 1
    if (depth > this.limits.maxDepth) throw new DepthExceededError(`A sub-team would be at depth ${depth}, deeper than ${this.limits.maxDepth}`)
    // a part cannot outlive the team it is part of, nor the member's own authority
    const exp = team.invitation != null ? decodeToken(team.invitation.payload.token).payload.exp : team.roster.deadline
    goal = { ...goal, deadline: Math.min(goal.deadline, team.roster.deadline, exp) }
    const sub = await this.formWithAttempts(team.identity, goal, {
      ...options, depth, parent: { team: team.id, member: team.agent }, proofs: options.proofs ?? this.proofsOf(team)
    }, this.limits.subteamAttempts)
    await team.post('subteam', { team: sub.id, roster: (sub as TeamRuntime).rosterId as string, state: 'formed' }, options)
    return sub
  }

  async tree (team: TeamRuntime, options: AbortOptions, budget = { nodes: 64 }): Promise<TeamTree> {
    budget.nodes--
    const out: TeamTree = { team: team.id, roster: team.roster, concluded: team.concluded, subteams: [] }
    if (team.roster.parent != null) out.member = team.roster.parent.member
    const subs = new Map<string, { convener: Did }>()
    for (const e of team.history()) {
      const m = e.msg.payload
      if (m.type === 'subteam') subs.set(m.body.team as string, { convener: m.from })
    }
    for (const [id, { convener }] of subs) {
      if (budget.nodes <= 0 || team.roster.depth + 1 > this.limits.maxDepth) break
      const local = this.held.get(id)
      try {
        if (local != null && local.team.hasRoster) {
          out.subteams.push(await this.tree(local.team, options, budget))
        } else {
          const peer = team.peerOf(convener)
          if (peer == null) continue
          const t = await this.components.messaging.request(peerIdFromString(peer), TEAM_PROTOCOL, 'tree', { team: id }, { timeout: this.limits.requestTimeout, signal: options.signal })
          budget.nodes--
          out.subteams.push(parseTree(t, this.limits.maxDepth))
        }
      } catch (err: any) {
        this.log('team %s: no tree of sub-team %s - %s', team.id, id, err?.message)
      }
    }
    return out
  }

  // -------------------------------------------------------------------------
  // TeamService

  private formationDeps (): FormationDeps {
    return { components: this.components, limits: this.limits, log: this.log, matcher: this.init.matcher ?? defaultMatcher }
  }

  async form (agent: Did, goal: TeamGoalInit, options: FormOptions = {}): Promise<Team> {
    const hosted = this.hosted(agent)
    if (hosted == null) throw new UnknownAgentError(`${agent} is not hosted here`)
    const full: TeamGoal = { ...goal, deadline: goal.deadline ?? Date.now() + this.limits.defaultDeadline }
    return await this.formWithAttempts(hosted.identity, full, options, 1)
  }

  private async formWithAttempts (identity: Identity, goal: TeamGoal, options: FormOptions, attempts: number): Promise<Team> {
    if (!this.started) await this.start()
    if (this.held.size >= this.limits.maxTeams) throw new TooManyTeamsError(`This node holds ${this.held.size} teams`)
    let last: unknown
    const tried = new Set<Did>()
    const failures: RoleFailure[] = []
    for (let i = 0; i < attempts; i++) {
      const id = newTeamId()
      try {
        const roles = options.roles?.map(r => r.candidates == null ? r : { ...r, candidates: r.candidates.filter(c => !tried.has(c.agent)) })
        const formed = await formTeam(this.formationDeps(), identity, id, goal, { ...options, roles })
        return await this.open(identity, formed.roster, formed.accepted.map(a => a.member.agent), options.proofs ?? [])
      } catch (err: any) {
        last = err
        for (const f of (err?.failures ?? []) as RoleFailure[]) {
          failures.push(f)
          for (const t of f.tried) tried.add(t.agent)
        }
        this.log('formation attempt %d of %d failed - %s', i + 1, attempts, err?.message)
      }
    }
    if (failures.length > 0 && last instanceof Error) Object.assign(last, { failures })
    throw last
  }

  /** Open a formed team: entry 0 is its first roster; this node sequences epoch 0 */
  private async open (identity: Identity, roster: Roster, members: Did[], proofs: Token[]): Promise<TeamRuntime> {
    const id = roster.payload.team
    const store = new TeamLog(id, this.datastore, this.limits.historyBytes)
    const team = new TeamRuntime(id, identity, store, this)
    // the convener's own authority for the team: stored with its state, so assignments after a restart still carry it
    team.convenerProofs = proofs
    const h = this.hold(team)
    await this.saveState(team)
    const msg = await team.sign('roster', { roster })
    const entry: Entry = { seq: 0, epoch: 0, msg }
    await team.check(entry, true)
    await team.apply(entry)
    await this.becomeSequencer(team, members, false)
    h.failover.start()
    this.log('team %s formed by %s with %d members', id, identity.did, roster.payload.members.length)
    return team
  }

  team (id: string): Team | undefined {
    const t = this.held.get(id)?.team
    return t?.hasRoster === true ? t : undefined
  }

  teams (): Team[] {
    return [...this.held.values()].map(h => h.team).filter(t => t.hasRoster)
  }

  private emit (event: TeamServiceEvent): void {
    this.fanout.emit(event)
  }

  async * events (options: AbortOptions = {}): AsyncGenerator<TeamServiceEvent, void, undefined> {
    yield * this.fanout.listen(options)
  }

  acceptFor (agent: Did, acceptor: Acceptor): () => void {
    if (typeof acceptor !== 'function') throw new TypeError('acceptor must be a function')
    this.acceptors.set(agent, acceptor)
    return () => { if (this.acceptors.get(agent) === acceptor) this.acceptors.delete(agent) }
  }
}

/** The convener's proofs as stored in a team's state (encoded tokens, leaf first) */
function parseStoredProofs (value: unknown): Token[] {
  if (!Array.isArray(value) || value.length > TOKEN_LIMITS.maxPool || !value.every(b => b instanceof Uint8Array)) {
    throw new InvalidTeamRecordError('Malformed stored proofs')
  }
  return value.map(b => decodeToken(b))
}

function parseTree (value: unknown, depth: number): TeamTree {
  if (!isMap(value) || typeof value.team !== 'string' || !isMap(value.roster) || !Array.isArray(value.subteams)) {
    throw new InvalidTeamRecordError('Malformed tree')
  }
  return {
    team: value.team,
    member: typeof value.member === 'string' ? value.member : undefined,
    roster: value.roster as unknown as TeamTree['roster'],
    concluded: value.concluded === true,
    subteams: depth <= 0 ? [] : value.subteams.slice(0, 64).map(s => parseTree(s, depth - 1))
  }
}

/**
 * Create the team service of an interconnect. Handlers are registered by
 * `start()` (or the first `form`).
 */
export function createTeamService (ic: { node: { peerId: TeamServiceComponents['peerId'], logger: TeamServiceComponents['logger'], services: { messaging: TeamServiceComponents['messaging'] } } } & TeamServiceComponents['interconnect'], init: TeamsInit = {}): TeamService {
  return teamService(init)({ peerId: ic.node.peerId, logger: ic.node.logger, messaging: ic.node.services.messaging, interconnect: ic })
}

/** The team service over the components it needs, as a libp2p service factory */
export function teamService (init: TeamsInit = {}): (components: TeamServiceComponents) => TeamService {
  return (components) => new DefaultTeamService(components, init)
}
