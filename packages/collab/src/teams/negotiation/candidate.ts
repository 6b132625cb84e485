/**
 * The candidate side of negotiation (`spec/teams.md` 6.2, 6.4): answers
 * `cfp` with a signed proposal from the bidder registered for the hosted
 * agent and skill (or a decline), holds the open calls it answered within
 * `maxOpenCfps` (per node and per calling peer), and answers `award` with a
 * signed commitment. Every check refuses with a typed error and a log line.
 */
import { anySignal } from 'any-signal'
import { UnknownAgentError } from '@ioa/interconnect'
import { TooManyRequestsError, TimeoutError } from '@ioa/transport'
import { raceSignal } from 'race-signal'
import { InvalidSignatureError } from '../../errors.js'
import { InvalidTeamRecordError, RecordExpiredError, UnknownProposalError } from '../errors.js'
import { cidOf, parseDecline, signRecord, verifyRecord } from '../records.js'
import { checkFields } from '../schema.js'
import { parseAward, parseCfp, parseProposal } from './records.js'
import type { BidAnswer, Bidder, BidOptions, Committer, NegotiationComponents, NegotiationLimits, Offer } from './api.js'
import type { Decline } from '../records.js'
import type { Award, Cfp, Commitment, CommitmentPayload, Proposal, ProposalPayload } from './records.js'
import type { Did, Identity } from '@ioa/interconnect'
import type { RequestContext } from '@ioa/transport'
import type { Logger } from '@libp2p/interface'

/** A call this node answered (or is bidding on) and that is not yet awarded or expired */
interface OpenCall {
  cfpCid: string
  cfp: Cfp
  peer: string
  /** The slot is released after this time (the call's `due` while bidding, then the proposal's `exp`) */
  until: number
  /** Settles with the answer (shared by a repeated call) */
  answer: Promise<CfpAnswer>
  proposal?: Proposal
  proposalCid?: string
  commit?: Committer
  /** Settles with the answer to the award being handled */
  awarding?: Promise<AwardAnswer>
}

type CfpAnswer = { proposal: Proposal } | { decline: Decline }
type AwardAnswer = { commitment: Commitment } | { decline: Decline }

interface Registered {
  bidder: Bidder
  commit?: Committer
}

const key = (agent: Did, skill: string): string => `${agent}\n${skill}`

export class NegotiationCandidate {
  private readonly components: NegotiationComponents
  private readonly limits: NegotiationLimits
  private readonly log: Logger
  private readonly bidders = new Map<string, Registered>()
  private readonly open = new Map<string, OpenCall>()
  private readonly byProposal = new Map<string, OpenCall>()
  private readonly perPeer = new Map<string, number>()
  /** Award CID -> the commitment given (a repeated award gets the same answer) */
  private readonly recent = new Map<string, Commitment>()
  /** Aborted by `clear()` (the service stops): running bidders and committers are told */
  private stopping = new AbortController()

  constructor (components: NegotiationComponents, limits: NegotiationLimits, log: Logger) {
    this.components = components
    this.limits = limits
    this.log = log
  }

  bid (agent: Did, skill: string, bidder: Bidder, options: BidOptions = {}): void {
    this.identity(agent)
    this.bidders.set(key(agent, skill), { bidder, commit: options.commit })
  }

  unbid (agent: Did, skill: string): void {
    this.bidders.delete(key(agent, skill))
  }

  stats (): { total: number, peers: number } {
    this.sweep(Date.now())
    return { total: this.open.size, peers: this.perPeer.size }
  }

  clear (): void {
    this.stopping.abort()
    this.stopping = new AbortController()
    this.open.clear()
    this.byProposal.clear()
    this.perPeer.clear()
    this.recent.clear()
  }

  /** The `cfp` method (spec 6.2): checks in the spec's order, then the bidder */
  async handleCfp (payload: unknown, ctx: RequestContext): Promise<CfpAnswer> {
    const peer = ctx.peer.toString()
    const now = Date.now()
    const cfp = this.refuse(peer, 'cfp', () => parseCfp(checkFields(payload, { cfp: { kind: 'map' } }, 'request', InvalidTeamRecordError).cfp))
    const p = cfp.payload
    const identity = this.refuse(peer, 'cfp', () => this.identity(p.to))
    if (p.due <= now || p.exp <= now) this.refuse(peer, 'cfp', () => { throw new RecordExpiredError('The call is past its due or exp') })
    if (p.due > now + this.limits.maxBidWindow + this.limits.clockSkew) {
      this.refuse(peer, 'cfp', () => { throw new InvalidTeamRecordError(`cfp.due is more than maxBidWindow (${this.limits.maxBidWindow} ms) ahead`) })
    }
    const cfpCid = await cidOf(cfp)
    const same = this.open.get(cfpCid)
    if (same != null) return await same.answer

    this.sweep(now)
    const fromPeer = this.perPeer.get(peer) ?? 0
    if (this.open.size >= this.limits.maxOpenCfps || fromPeer >= this.limits.maxOpenCfpsPerPeer) {
      this.refuse(peer, 'cfp', () => {
        throw new TooManyRequestsError(`Open calls: ${this.open.size} of ${this.limits.maxOpenCfps} on this node, ${fromPeer} of ${this.limits.maxOpenCfpsPerPeer} from this peer`)
      })
    }
    const registered = this.bidders.get(key(p.to, p.skill))
    if (registered == null) {
      this.log('cfp %s from %s: no bidder of %s for %s, declined NOT_CAPABLE', p.id, peer, p.to, p.skill)
      return { decline: { code: 'NOT_CAPABLE', reason: `no bidder for ${p.skill}` } }
    }
    // the slot is taken before the first await: concurrent calls cannot pass the bound together
    const entry: OpenCall = { cfpCid, cfp, peer, until: p.due, commit: registered.commit, answer: Promise.resolve({ decline: { code: 'OTHER', reason: '' } }) }
    this.hold(entry)
    entry.answer = this.verifyAndBid(entry, registered.bidder, identity, ctx.signal)
    return await entry.answer
  }

  private async verifyAndBid (entry: OpenCall, bidder: Bidder, identity: Identity, callerSignal: AbortSignal): Promise<CfpAnswer> {
    if (!await verifyRecord('cfp', entry.cfp, entry.cfp.payload.from)) {
      this.release(entry)
      this.refuse(entry.peer, 'cfp', () => { throw new InvalidSignatureError('The call is not signed by its from') })
    }
    return await this.runBidder(entry, bidder, identity, callerSignal)
  }

  private async runBidder (entry: OpenCall, bidder: Bidder, identity: Identity, callerSignal: AbortSignal): Promise<CfpAnswer> {
    const p = entry.cfp.payload
    const signal = anySignal([callerSignal, this.stopping.signal, AbortSignal.timeout(Math.max(1, p.due - Date.now()))])
    let answer: BidAnswer
    try {
      answer = await raceSignal(Promise.resolve().then(async () => bidder({ cfp: p, cid: entry.cfpCid, peer: entry.peer, signal })), signal)
    } catch (err: any) {
      this.release(entry)
      if (signal.aborted) {
        this.log('cfp %s from %s: the bidder did not answer by due', p.id, entry.peer)
        throw new TimeoutError('The bidder did not answer by the call\'s due')
      }
      this.log.error('cfp %s from %s: the bidder failed, declined OTHER - %e', p.id, entry.peer, err)
      return { decline: { code: 'OTHER', reason: 'the bidder failed' } }
    } finally {
      signal.clear()
    }
    if ('decline' in answer) {
      this.release(entry)
      try {
        return { decline: parseDecline(answer.decline) }
      } catch (err: any) {
        this.log.error('cfp %s: the bidder gave an invalid decline, declined OTHER - %e', p.id, err)
        return { decline: { code: 'OTHER', reason: 'declined' } }
      }
    }
    try {
      const proposal = await this.propose(entry, answer.offer, identity)
      entry.proposal = proposal
      entry.proposalCid = await cidOf(proposal)
      entry.until = proposal.payload.exp
      this.byProposal.set(entry.proposalCid, entry)
      this.log('cfp %s from %s: proposal %s by %s', p.id, entry.peer, entry.proposalCid, p.to)
      return { proposal }
    } catch (err: any) {
      this.release(entry)
      this.log.error('cfp %s: the bidder gave an invalid offer, declined OTHER - %e', p.id, err)
      return { decline: { code: 'OTHER', reason: 'invalid offer' } }
    }
  }

  private async propose (entry: OpenCall, offer: Offer, identity: Identity): Promise<Proposal> {
    const p = entry.cfp.payload
    const latest = p.due + this.limits.offerTtl
    const exp = typeof offer.exp === 'number' ? Math.min(offer.exp, latest) : latest
    if (exp <= Date.now()) throw new InvalidTeamRecordError('The offer expires before it is sent')
    const payload: Record<string, unknown> = { v: 1, cfp: entry.cfpCid, from: identity.did, exp }
    for (const k of ['price', 'eta', 'terms'] as const) {
      if (offer[k] !== undefined) payload[k] = offer[k]
    }
    const proposal = await signRecord('proposal', payload as unknown as ProposalPayload, identity)
    return parseProposal(proposal)
  }

  /** The `award` method (spec 6.4) */
  async handleAward (payload: unknown, ctx: RequestContext): Promise<AwardAnswer> {
    const peer = ctx.peer.toString()
    const award = this.refuse(peer, 'award', () => parseAward(checkFields(payload, { award: { kind: 'map' } }, 'request', InvalidTeamRecordError).award))
    const a = award.payload
    const identity = this.refuse(peer, 'award', () => this.identity(a.to))
    const awardCid = await cidOf(award)
    const given = this.recent.get(awardCid)
    if (given != null) return { commitment: given }
    const entry = this.byProposal.get(a.proposal)
    if (entry == null || entry.cfpCid !== a.cfp || entry.cfp.payload.from !== a.from || entry.cfp.payload.to !== a.to) {
      this.refuse(peer, 'award', () => { throw new UnknownProposalError(`No open proposal ${a.proposal} of ${a.to} to ${a.from}`) })
    }
    const open = entry as OpenCall
    const now = Date.now()
    if (Math.abs(a.ts - now) > this.limits.clockSkew) {
      this.refuse(peer, 'award', () => { throw new RecordExpiredError('award.ts is outside the clock skew') })
    }
    if (!await verifyRecord('award', award, a.from)) {
      this.refuse(peer, 'award', () => { throw new InvalidSignatureError('The award is not signed by its from') })
    }
    if (open.awarding != null) return await open.awarding
    open.awarding = this.settleAward(open, award, awardCid, identity, ctx.signal)
    return await open.awarding
  }

  private async settleAward (entry: OpenCall, award: Award, awardCid: string, identity: Identity, callerSignal: AbortSignal): Promise<AwardAnswer> {
    const proposal = entry.proposal as Proposal
    try {
      if (proposal.payload.exp <= Date.now()) {
        this.log('award %s: proposal %s expired, declined DEADLINE', awardCid, entry.proposalCid)
        return { decline: { code: 'DEADLINE', reason: 'the proposal expired' } }
      }
      if (entry.commit != null) {
        const signal = anySignal([callerSignal, this.stopping.signal, AbortSignal.timeout(this.limits.awardTimeout)])
        let decision
        try {
          decision = await raceSignal(Promise.resolve().then(async () => (entry.commit as Committer)({ award, proposal, cfp: entry.cfp, signal })), signal)
        } catch (err: any) {
          this.log.error('award %s: the committer failed, declined OTHER - %e', awardCid, err)
          return { decline: { code: 'OTHER', reason: signal.aborted ? 'no decision in time' : 'the committer failed' } }
        } finally {
          signal.clear()
        }
        if ('decline' in decision) {
          this.log('award %s: declined by the committer', awardCid)
          return { decline: parseDecline(decision.decline) }
        }
      }
      const payload: CommitmentPayload = { v: 1, award: awardCid, from: identity.did, ts: Date.now() }
      const commitment = await signRecord('commit', payload, identity)
      this.remember(awardCid, commitment)
      this.log('award %s: committed by %s', awardCid, identity.did)
      return { commitment }
    } finally {
      // awarded (committed or declined): the call is no longer open
      this.release(entry)
    }
  }

  /** Run a check; on failure log why and rethrow the typed error */
  private refuse<T> (peer: string, method: string, check: () => T): T {
    try {
      return check()
    } catch (err: any) {
      this.log('%s from %s refused %s: %s', method, peer, err.code ?? err.name, err.message)
      throw err
    }
  }

  private identity (agent: Did): Identity {
    const hosted = this.components.interconnect.agents().find(h => h.did === agent)
    if (hosted == null) throw new UnknownAgentError(`Agent ${agent} is not hosted here`)
    return hosted.identity
  }

  private hold (entry: OpenCall): void {
    this.open.set(entry.cfpCid, entry)
    this.perPeer.set(entry.peer, (this.perPeer.get(entry.peer) ?? 0) + 1)
  }

  private release (entry: OpenCall): void {
    if (this.open.get(entry.cfpCid) !== entry) return
    this.open.delete(entry.cfpCid)
    if (entry.proposalCid != null) this.byProposal.delete(entry.proposalCid)
    const n = (this.perPeer.get(entry.peer) ?? 1) - 1
    if (n <= 0) this.perPeer.delete(entry.peer)
    else this.perPeer.set(entry.peer, n)
  }

  /** Forget the calls whose proposal expired (at most `maxOpenCfps` entries to look at) */
  private sweep (now: number): void {
    for (const entry of this.open.values()) {
      if (entry.until <= now && entry.awarding == null) {
        this.log('cfp %s from %s lapsed', entry.cfp.payload.id, entry.peer)
        this.release(entry)
      }
    }
  }

  private remember (awardCid: string, commitment: Commitment): void {
    this.recent.set(awardCid, commitment)
    while (this.recent.size > this.limits.maxRecentCommitments) {
      const oldest = this.recent.keys().next().value as string
      this.recent.delete(oldest)
    }
  }
}
