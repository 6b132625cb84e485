/**
 * Negotiation (`spec/teams.md` section 6): calls for proposals, signed
 * proposals, awards and commitments over `/ioa/negotiate/1.0.0`.
 */
export { createNegotiation, negotiation } from './service.js'
export { NEGOTIATION_DEFAULTS, NEGOTIATION_PROTOCOL } from './api.js'
export { defaultChooser, rankProposals } from './chooser.js'
export type {
  AwardContext, BidAnswer, BidContext, Bidder, BidOptions, CallInit, RoundOptions, Candidate, Chooser, Committer, Negotiation,
  NegotiationComponents, NegotiationInit, NegotiationLimits, Offer, ReceivedProposal, Round, RoundAnswer
} from './api.js'
export type { AwardDeclinedError } from './caller.js'
export type {
  Award, AwardPayload, Cfp, CfpFields, CfpPayload, Commitment, CommitmentPayload, Price, Proposal, ProposalPayload
} from './records.js'
