/**
 * The caller side of negotiation (`spec/teams.md` 6.2 to 6.4): one round
 * sends a signed call to every candidate in parallel and resolves at `due`
 * (or once every candidate answered) with the verified proposals, the
 * declines, the silent candidates and the failed ones; `award` sends the
 * signed award and verifies the commitment it gets back.
 */
import { isCapability, isDid } from '@ioa/interconnect'
import { CanceledError, InvalidArgumentError } from '@ioa/transport'
import { peerIdFromString } from '@libp2p/peer-id'
import { InvalidSignatureError } from '../../errors.js'
import { DeclinedError, InvalidTeamRecordError, RecordExpiredError, teamFromRemote } from '../errors.js'
import { cidOf, parseDecline, signRecord, verifyRecord } from '../records.js'
import { NEGOTIATION_PROTOCOL } from './api.js'
import { newCfpId, parseCommitment, parseProposal, signCfp } from './records.js'
import type { CallInit, RoundOptions, Candidate, NegotiationComponents, NegotiationLimits, ReceivedProposal, Round, RoundAnswer } from './api.js'
import type { Decline } from '../records.js'
import type { AwardPayload, Cfp, Commitment } from './records.js'
import type { Identity } from '@ioa/interconnect'
import type { AbortOptions, Logger } from '@libp2p/interface'

/** The error of an award the candidate declined: `decline` says why */
export type AwardDeclinedError = DeclinedError & { decline: Decline }

type Outcome =
  | { kind: 'proposal', value: Omit<ReceivedProposal, 'arrival'> }
  | { kind: 'decline', decline: Decline }
  | { kind: 'failed', code: string, message: string }
  | { kind: 'silent' }

export class NegotiationCaller {
  private readonly components: NegotiationComponents
  private readonly limits: NegotiationLimits
  private readonly log: Logger

  constructor (components: NegotiationComponents, limits: NegotiationLimits, log: Logger) {
    this.components = components
    this.limits = limits
    this.log = log
  }

  async callForProposals (from: Identity, candidates: readonly Candidate[], call: CallInit, options: RoundOptions = {}): Promise<Round> {
    const now = Date.now()
    const due = call.due ?? now + this.limits.bidWindow
    this.checkCall(candidates, call, due, now)
    if (options.signal?.aborted === true) throw new CanceledError('The call for proposals was canceled')
    const id = newCfpId()
    const cfps = await Promise.all(candidates.map(async c => signCfp(from, c.agent, { id, skill: call.skill, what: call.what, constraints: call.constraints, due, exp: call.exp })))
    const round: Round = { id, due, proposals: [], declines: [], silent: [], failed: [] }
    const outcomes: Array<Outcome | undefined> = candidates.map(() => undefined)
    const ended = new AbortController()
    let left = candidates.length
    let timer: ReturnType<typeof setTimeout> | undefined

    await new Promise<void>((resolve, reject) => {
      const finish = (): void => {
        clearTimeout(timer)
        options.signal?.removeEventListener('abort', onAbort)
        ended.abort()
        resolve()
      }
      const onAbort = (): void => {
        clearTimeout(timer)
        ended.abort()
        reject(new CanceledError('The call for proposals was canceled', { cause: options.signal?.reason }))
      }
      options.signal?.addEventListener('abort', onAbort, { once: true })
      // the one timer of the round: at due, whoever has not answered is silent
      timer = setTimeout(finish, Math.max(0, due - Date.now()))
      candidates.forEach((c, i) => {
        void this.ask(c, cfps[i], due, ended.signal).then(outcome => {
          if (ended.signal.aborted) return
          outcomes[i] = outcome
          if (outcome.kind === 'proposal') round.proposals.push({ ...outcome.value, arrival: round.proposals.length })
          this.tell(options, c, outcome, round)
          if (--left === 0) finish()
        })
      })
    })

    candidates.forEach((c, i) => {
      const o = outcomes[i]
      if (o == null || o.kind === 'silent') round.silent.push({ ...c })
      else if (o.kind === 'decline') round.declines.push({ ...c, decline: o.decline })
      else if (o.kind === 'failed') round.failed.push({ ...c, code: o.code, message: o.message })
    })
    this.log('cfp %s (%s): %d proposals, %d declines, %d silent, %d failed', id, call.skill, round.proposals.length, round.declines.length, round.silent.length, round.failed.length)
    return round
  }

  /** Tell `onAnswer` of an answer; a failing listener is logged, never the round's failure */
  private tell (options: RoundOptions, c: Candidate, outcome: Outcome, round: Round): void {
    if (options.onAnswer == null || outcome.kind === 'silent') return
    const answer: RoundAnswer = outcome.kind === 'proposal'
      ? { type: 'proposal', proposal: round.proposals[round.proposals.length - 1] }
      : outcome.kind === 'decline' ? { type: 'decline', ...c, decline: outcome.decline } : { type: 'failed', ...c, code: outcome.code, message: outcome.message }
    try {
      options.onAnswer(answer)
    } catch (err: any) {
      this.log.error('cfp %s: onAnswer failed - %e', round.id, err)
    }
  }

  private checkCall (candidates: readonly Candidate[], call: CallInit, due: number, now: number): void {
    if (candidates.length === 0 || candidates.length > this.limits.maxCandidates) {
      throw new InvalidArgumentError(`A call needs 1 to ${this.limits.maxCandidates} candidates`)
    }
    if (new Set(candidates.map(c => c.agent)).size !== candidates.length) throw new InvalidArgumentError('A candidate is listed twice')
    for (const c of candidates) {
      if (!isDid(c.agent)) throw new InvalidArgumentError(`Candidate ${JSON.stringify(c.agent)} is not a did:key`)
      try {
        peerIdFromString(c.peer)
      } catch (err) {
        throw new InvalidArgumentError(`Candidate ${c.agent} has an invalid peer id ${JSON.stringify(c.peer)}`, { cause: err })
      }
    }
    if (!isCapability(call.skill)) throw new InvalidArgumentError(`Invalid skill ${JSON.stringify(call.skill)}`)
    if (!Number.isInteger(due) || due <= now || due > now + this.limits.maxBidWindow) {
      throw new InvalidArgumentError(`due must be within maxBidWindow (${this.limits.maxBidWindow} ms) from now`)
    }
    if (!Number.isInteger(call.exp) || call.exp < due) throw new InvalidArgumentError('exp must be an integer time not before due')
  }

  /** One candidate: send its call and classify the answer; never throws */
  private async ask (c: Candidate, cfp: Cfp, due: number, signal: AbortSignal): Promise<Outcome> {
    let answer: unknown
    try {
      // the request's own timeout is a backstop: the round's timer ends it at due
      answer = await this.components.messaging.request(peerIdFromString(c.peer), NEGOTIATION_PROTOCOL, 'cfp', { cfp }, { signal, timeout: Math.max(1, due - Date.now()) + 1_000 })
    } catch (err: any) {
      if (signal.aborted || err.code === 'TIMEOUT' || err.code === 'CANCELED') return { kind: 'silent' }
      const e = teamFromRemote(err) as { code?: string, message: string }
      this.log('cfp %s to %s at %s failed: %s %s', cfp.payload.id, c.agent, c.peer, e.code, e.message)
      return { kind: 'failed', code: e.code ?? 'FAILED', message: e.message }
    }
    try {
      return await this.classify(c, cfp, answer)
    } catch (err: any) {
      // a forged, foreign or malformed answer is ignored (spec 6.3)
      this.log('cfp %s: answer of %s at %s ignored: %s %s', cfp.payload.id, c.agent, c.peer, err.code, err.message)
      return { kind: 'failed', code: err.code ?? 'FAILED', message: err.message }
    }
  }

  private async classify (c: Candidate, cfp: Cfp, answer: unknown): Promise<Outcome> {
    const a = answer as { proposal?: unknown, decline?: unknown } | null
    if (a != null && typeof a === 'object' && Object.keys(a).length === 1 && a.decline !== undefined) {
      return { kind: 'decline', decline: parseDecline(a.decline) }
    }
    if (a == null || typeof a !== 'object' || Object.keys(a).length !== 1 || a.proposal === undefined) {
      throw new InvalidTeamRecordError('The answer is neither { proposal } nor { decline }')
    }
    const proposal = parseProposal(a.proposal)
    const cfpCid = await cidOf(cfp)
    if (proposal.payload.cfp !== cfpCid) throw new InvalidTeamRecordError('The proposal answers another call')
    if (proposal.payload.from !== c.agent) throw new InvalidSignatureError('The proposal is not from the candidate')
    if (proposal.payload.exp <= Date.now()) throw new RecordExpiredError('The proposal has expired')
    if (!await verifyRecord('proposal', proposal, c.agent)) throw new InvalidSignatureError('The proposal is not signed by the candidate')
    return { kind: 'proposal', value: { agent: c.agent, peer: c.peer, cfp, cfpCid, proposal, cid: await cidOf(proposal) } }
  }

  async award (from: Identity, chosen: ReceivedProposal, options: AbortOptions = {}): Promise<Commitment> {
    if (from.did !== chosen.cfp.payload.from) throw new InvalidArgumentError('Only the caller of the call can award it')
    if (chosen.proposal.payload.exp <= Date.now()) throw new RecordExpiredError('The proposal has expired')
    const payload: AwardPayload = { v: 1, cfp: chosen.cfpCid, proposal: chosen.cid, from: from.did, to: chosen.agent, ts: Date.now() }
    const award = await signRecord('award', payload, from)
    const awardCid = await cidOf(award)
    let answer: { commitment?: unknown, decline?: unknown }
    try {
      answer = await this.components.messaging.request(peerIdFromString(chosen.peer), NEGOTIATION_PROTOCOL, 'award', { award }, { signal: options.signal, timeout: this.limits.awardTimeout })
    } catch (err) {
      const e = teamFromRemote(err) as Error & { code?: string }
      this.log('award %s to %s failed: %s %s', awardCid, chosen.agent, e.code, e.message)
      throw e
    }
    if (answer?.decline !== undefined) {
      const decline = parseDecline(answer.decline)
      this.log('award %s: %s declined %s', awardCid, chosen.agent, decline.code)
      throw Object.assign(new DeclinedError(`Award declined: ${decline.code} ${decline.reason}`), { decline }) as AwardDeclinedError
    }
    const commitment = parseCommitment(answer?.commitment)
    if (commitment.payload.award !== awardCid || commitment.payload.from !== chosen.agent) {
      throw new InvalidTeamRecordError('The commitment is not for this award by the awarded agent')
    }
    if (!await verifyRecord('commit', commitment, chosen.agent)) {
      this.log('award %s: commitment not signed by %s', awardCid, chosen.agent)
      throw new InvalidSignatureError('The commitment is not signed by the awarded agent')
    }
    this.log('award %s: committed by %s', awardCid, chosen.agent)
    return commitment
  }
}
