/**
 * The public types of negotiation (`createNegotiation`): options and limits,
 * the candidate's bidder and committer, the caller's round and chooser, and
 * the service (`spec/teams.md` section 6).
 */
import type { Decline } from '../records.js'
import type { Award, Cfp, CfpPayload, Commitment, Price, Proposal } from './records.js'
import type { Did, Identity, Interconnect } from '@ioa/interconnect'
import type { Messaging } from '@ioa/transport'
import type { AbortOptions, ComponentLogger, PeerId } from '@libp2p/interface'

/** The protocol of negotiation */
export const NEGOTIATION_PROTOCOL = '/ioa/negotiate/1.0.0'

/** Options of the negotiation service; its limits are in spec/teams.md section 9 */
export interface NegotiationInit {
  /** Calls a candidate node holds open (answered with a proposal, not yet awarded or expired, or being bid on) @default 64 */
  maxOpenCfps?: number
  /** Open calls one calling peer may hold on this node @default 8 */
  maxOpenCfpsPerPeer?: number
  /** Longest time from now to a call's `due`, ms (caller and candidate) @default 60_000 */
  maxBidWindow?: number
  /** Caller: `due` of a call that names none, ms from now @default 5_000 */
  bidWindow?: number
  /** Candidate: a proposal holds at most this long after the call's `due`, ms @default 60_000 */
  offerTtl?: number
  /** Caller: candidates of one call @default 64 */
  maxCandidates?: number
  /** Timeout of an `award` request, and of the committer on the candidate, ms @default 10_000 */
  awardTimeout?: number
  /** Tolerance of `due` and `ts` checks, ms @default 30_000 */
  clockSkew?: number
  /** Candidate: commitments remembered to answer a repeated award the same way @default 64 */
  maxRecentCommitments?: number
  /** Logger component prefix: the caller logs as `<logPrefix>:caller`, the candidate as `<logPrefix>:candidate` @default 'ioa:collab:negotiation' */
  logPrefix?: string
}

/** The numeric options, all set */
export type NegotiationLimits = Required<Omit<NegotiationInit, 'logPrefix'>>

export const NEGOTIATION_DEFAULTS: Readonly<NegotiationLimits> = Object.freeze({
  maxOpenCfps: 64,
  maxOpenCfpsPerPeer: 8,
  maxBidWindow: 60_000,
  bidWindow: 5_000,
  offerTtl: 60_000,
  maxCandidates: 64,
  awardTimeout: 10_000,
  clockSkew: 30_000,
  maxRecentCommitments: 64
})

/** What a bidder is asked */
export interface BidContext {
  /** The call, verified */
  cfp: CfpPayload
  /** CID of the signed call */
  cid: string
  /** The peer the call came from */
  peer: string
  /** Aborted at the call's `due`, or when the caller cancels */
  signal: AbortSignal
}

/** A bidder's offer; the service signs it as a proposal */
export interface Offer {
  price?: Price
  eta?: number
  terms?: Record<string, unknown>
  /** Until when the offer holds @default (and at most) the call's `due` + `offerTtl` */
  exp?: number
}

export type BidAnswer = { offer: Offer } | { decline: Decline }

/** Makes a hosted agent's proposal for a call (or declines it) */
export type Bidder = (ctx: BidContext) => BidAnswer | Promise<BidAnswer>

/** What a committer is asked when an award arrives */
export interface AwardContext {
  award: Award
  proposal: Proposal
  cfp: Cfp
  signal: AbortSignal
}

/** Decides whether the awarded agent commits @default commit */
export type Committer = (ctx: AwardContext) => { commit: true } | { decline: Decline } | Promise<{ commit: true } | { decline: Decline }>

export interface BidOptions {
  /** Called on an award for one of this bidder's proposals @default commit */
  commit?: Committer
}

/** One agent asked in a call */
export interface Candidate {
  agent: Did
  /** The peer id (text) of the agent's node */
  peer: string
}

/** What the caller asks */
export interface CallInit {
  skill: string
  what: string
  constraints?: Record<string, unknown>
  /** When proposals must arrive, ms since the epoch @default now + bidWindow */
  due?: number
  /** When the work must be done, ms since the epoch */
  exp: number
}

/** A verified proposal received in a round */
export interface ReceivedProposal {
  agent: Did
  peer: string
  /** The call sent to this candidate */
  cfp: Cfp
  cfpCid: string
  proposal: Proposal
  cid: string
  /** Order of arrival in the round, from 0 */
  arrival: number
}

/** The outcome of a round */
export interface Round {
  id: string
  due: number
  proposals: ReceivedProposal[]
  declines: Array<Candidate & { decline: Decline }>
  /** No answer by `due` */
  silent: Candidate[]
  /** An error, or an answer that was ignored (a forged or malformed proposal) */
  failed: Array<Candidate & { code: string, message: string }>
}

/** One answer of a round, as it arrives (before `due`) */
export type RoundAnswer =
  | { type: 'proposal', proposal: ReceivedProposal }
  | ({ type: 'decline' } & Candidate & { decline: Decline })
  | ({ type: 'failed' } & Candidate & { code: string, message: string })

export interface RoundOptions extends AbortOptions {
  /** Told of each answer as it arrives; silent candidates are known only at `due` (in the `Round`) */
  onAnswer?: (answer: RoundAnswer) => void
}

/** Picks the proposal to award, or none */
export type Chooser = (proposals: readonly ReceivedProposal[]) => ReceivedProposal | undefined

/** The slice of a node negotiation needs */
export interface NegotiationComponents {
  peerId: PeerId
  logger: ComponentLogger
  messaging: Pick<Messaging, 'handle' | 'unhandle' | 'request'>
  /** Hosted agents (candidates sign proposals and commitments with their keys) */
  interconnect: Pick<Interconnect, 'agents'>
}

export interface Negotiation {
  /** Register the protocol */
  start(): Promise<void>
  /** Unregister the protocol; open calls are forgotten */
  stop(): Promise<void>
  /** Candidate side: `bidder` answers calls to hosted agent `agent` for `skill` (without one the node declines `NOT_CAPABLE`) */
  bid(agent: Did, skill: string, bidder: Bidder, options?: BidOptions): Promise<void>
  /** Remove a bidder */
  unbid(agent: Did, skill: string): void
  /** Caller side: send the call to every candidate in parallel; resolves at `due`, or once every candidate answered */
  callForProposals(from: Identity, candidates: readonly Candidate[], call: CallInit, options?: RoundOptions): Promise<Round>
  /** Caller side: award a proposal; resolves with the verified commitment, or fails with a typed error (`DECLINED`: its `decline`) */
  award(from: Identity, proposal: ReceivedProposal, options?: AbortOptions): Promise<Commitment>
  /** Open calls this node holds as a candidate, in total and per calling peer */
  openCfps(): { total: number, peers: number }
}
