/**
 * The negotiation protocol `/ioa/negotiate/1.0.0` (`spec/teams.md` section
 * 6): this file wires the candidate side (candidate.ts: `cfp` and `award`
 * handlers, bidders, open calls) and the caller side (caller.ts: rounds and
 * awards) into one service; the public types are in api.ts.
 */
import { NEGOTIATION_DEFAULTS, NEGOTIATION_PROTOCOL } from './api.js'
import { NegotiationCaller } from './caller.js'
import { NegotiationCandidate } from './candidate.js'
import type {
  Bidder, BidOptions, CallInit, RoundOptions, Candidate, Negotiation, NegotiationComponents, NegotiationInit, NegotiationLimits,
  ReceivedProposal, Round
} from './api.js'
import type { Commitment } from './records.js'
import type { Did, Identity, Interconnect } from '@ioa/interconnect'
import type { AbortOptions } from '@libp2p/interface'

class DefaultNegotiation implements Negotiation {
  private readonly components: NegotiationComponents
  private readonly candidate: NegotiationCandidate
  private readonly caller: NegotiationCaller
  private started = false

  constructor (components: NegotiationComponents, init: NegotiationInit = {}) {
    const { logPrefix = 'ioa:collab:negotiation', ...numeric } = init
    const limits: NegotiationLimits = { ...NEGOTIATION_DEFAULTS }
    for (const [k, v] of Object.entries(numeric) as Array<[keyof NegotiationLimits, number | undefined]>) {
      if (v !== undefined) limits[k] = v
    }
    this.components = components
    this.candidate = new NegotiationCandidate(components, limits, components.logger.forComponent(`${logPrefix}:candidate`))
    this.caller = new NegotiationCaller(components, limits, components.logger.forComponent(`${logPrefix}:caller`))
  }

  async start (): Promise<void> {
    if (this.started) return
    this.started = true
    const { messaging } = this.components
    await messaging.handle(NEGOTIATION_PROTOCOL, 'cfp', async (payload, ctx) => this.candidate.handleCfp(payload, ctx))
    await messaging.handle(NEGOTIATION_PROTOCOL, 'award', async (payload, ctx) => this.candidate.handleAward(payload, ctx))
  }

  async stop (): Promise<void> {
    if (!this.started) return
    this.started = false
    await this.components.messaging.unhandle(NEGOTIATION_PROTOCOL)
    this.candidate.clear()
  }

  async bid (agent: Did, skill: string, bidder: Bidder, options: BidOptions = {}): Promise<void> {
    this.candidate.bid(agent, skill, bidder, options)
    await this.start()
  }

  unbid (agent: Did, skill: string): void {
    this.candidate.unbid(agent, skill)
  }

  async callForProposals (from: Identity, candidates: readonly Candidate[], call: CallInit, options: RoundOptions = {}): Promise<Round> {
    return await this.caller.callForProposals(from, candidates, call, options)
  }

  async award (from: Identity, proposal: ReceivedProposal, options: AbortOptions = {}): Promise<Commitment> {
    return await this.caller.award(from, proposal, options)
  }

  openCfps (): { total: number, peers: number } {
    return this.candidate.stats()
  }
}

/**
 * The negotiation service over the components it needs
 * (`NegotiationComponents`), as a libp2p service factory:
 * `negotiation(init)(components)`
 */
export function negotiation (init: NegotiationInit = {}): (components: NegotiationComponents) => Negotiation {
  return (components) => new DefaultNegotiation(components, init)
}

/**
 * Create the negotiation service of an interconnect: calls for proposals and
 * awards as a caller, bids and commitments for hosted agents as a candidate.
 * The protocol is registered by the first `bid` or by `start()`.
 */
export function createNegotiation (ic: Interconnect, init: NegotiationInit = {}): Negotiation {
  return negotiation(init)({
    peerId: ic.node.peerId,
    logger: ic.node.logger,
    messaging: ic.node.services.messaging,
    interconnect: ic
  })
}
