/**
 * The signed records of negotiation (`spec/teams.md` section 6): call for
 * proposals, proposal, award and commitment. Each is `{ payload, sig }` as
 * the other team records (signed over its prefix of `TEAM_PREFIXES` and the
 * DAG-CBOR payload) and parsed strictly: no unknown keys, bounded fields.
 */
import { isCapability, isDid } from '@ioa/interconnect'
import { randomBytes } from '@libp2p/crypto'
import { base32 } from 'multiformats/bases/base32'
import { parseConstraints } from '../../auth/delegation.js'
import { InvalidTeamRecordError } from '../errors.js'
import { NONCE, newId, signRecord } from '../records.js'
import { checkFields, checkSigned as checkSignedShape } from '../schema.js'
import type { Signed } from '../records.js'
import type { Fields } from '../schema.js'
import type { Did, Identity } from '@ioa/interconnect'

/** A call's id: `c` and 26 characters of lower-case base32 (16 random bytes) */
export const CFP_ID = /^c[a-z2-7]{26}$/

const CID_TEXT = /^b[a-z2-7]{58,120}$/
const CURRENCY = /^[A-Z]{3}$/

/** A new call id (one per round, shared by the calls of the round) */
export function newCfpId (): string {
  return 'c' + base32.baseEncode(randomBytes(16))
}

export interface CfpPayload {
  v: 1
  /** The round's id, the same in the call to every candidate */
  id: string
  /** The caller */
  from: Did
  /** The candidate */
  to: Did
  /** A capability name */
  skill: string
  /** What is asked, 1 to 4,096 characters */
  what: string
  /** As capability constraints (collab-delegation.md 2.3) */
  constraints?: Record<string, unknown>
  /** Proposals must arrive by then, ms */
  due: number
  /** The work must be done by then, ms */
  exp: number
  nonce: string
}

export type Cfp = Signed<CfpPayload>

export interface Price {
  /** A non-negative finite number */
  amount: number
  /** Three upper-case letters (ISO 4217 style) */
  currency: string
}

export interface ProposalPayload {
  v: 1
  /** CID of the call it answers */
  cfp: string
  /** The candidate (the call's `to`) */
  from: Did
  price?: Price
  /** How long the work will take, ms */
  eta?: number
  /** As capability constraints (collab-delegation.md 2.3) */
  terms?: Record<string, unknown>
  /** The offer holds until then, ms */
  exp: number
}

export type Proposal = Signed<ProposalPayload>

export interface AwardPayload {
  v: 1
  /** CID of the call */
  cfp: string
  /** CID of the proposal awarded */
  proposal: string
  /** The caller */
  from: Did
  /** The awarded candidate */
  to: Did
  ts: number
}

export type Award = Signed<AwardPayload>

export interface CommitmentPayload {
  v: 1
  /** CID of the award */
  award: string
  /** The awarded candidate */
  from: Did
  ts: number
}

export type Commitment = Signed<CommitmentPayload>

const did = { kind: 'text', max: 128, pattern: /^did:key:z[1-9A-HJ-NP-Za-km-z]{40,60}$/ } as const
const cid = { kind: 'text', max: 128, pattern: CID_TEXT } as const
const time = { kind: 'int' } as const
const version = { kind: 'int', min: 1, max: 1 } as const

const CFP_FIELDS: Fields = {
  v: version,
  id: { kind: 'text', max: 27, pattern: CFP_ID },
  from: did,
  to: did,
  skill: { kind: 'text', max: 128 },
  what: { kind: 'text', max: 4096 },
  constraints: { kind: 'map', required: false },
  due: time,
  exp: time,
  nonce: { kind: 'text', max: 22, pattern: NONCE }
}

const PROPOSAL_FIELDS: Fields = {
  v: version,
  cfp: cid,
  from: did,
  price: { kind: 'map', required: false },
  eta: { kind: 'int', required: false },
  terms: { kind: 'map', required: false },
  exp: time
}

const AWARD_FIELDS: Fields = { v: version, cfp: cid, proposal: cid, from: did, to: did, ts: time }

const COMMITMENT_FIELDS: Fields = { v: version, award: cid, from: did, ts: time }

function checkSigned (value: unknown, what: string, fields: Fields): Record<string, unknown> {
  const r = checkSignedShape(value, what, InvalidTeamRecordError)
  const p = checkFields(r.payload, fields, `${what}.payload`, InvalidTeamRecordError)
  for (const key of ['from', 'to']) {
    if (p[key] !== undefined && !isDid(p[key])) throw new InvalidTeamRecordError(`${what}.${key} is not a did:key`)
  }
  return p
}

function checkMapOf (value: unknown, what: string): void {
  try {
    parseConstraints(value, what)
  } catch (err: any) {
    throw new InvalidTeamRecordError(err.message, { cause: err })
  }
}

/** Parse a call for proposals strictly (no signature check) */
export function parseCfp (value: unknown): Cfp {
  const p = checkSigned(value, 'cfp', CFP_FIELDS)
  if (!isCapability(p.skill)) throw new InvalidTeamRecordError('cfp.skill is not a capability name')
  if (p.constraints !== undefined) checkMapOf(p.constraints, 'cfp.constraints')
  if ((p.exp as number) < (p.due as number)) throw new InvalidTeamRecordError('cfp.exp must not be before cfp.due')
  return value as Cfp
}

/** Parse a proposal strictly (no signature check) */
export function parseProposal (value: unknown): Proposal {
  const p = checkSigned(value, 'proposal', PROPOSAL_FIELDS)
  if (p.price !== undefined) checkPrice(p.price)
  if (p.terms !== undefined) checkMapOf(p.terms, 'proposal.terms')
  return value as Proposal
}

function checkPrice (value: unknown): void {
  checkFields(value, { amount: { kind: 'number' }, currency: { kind: 'text', max: 3, pattern: CURRENCY } }, 'proposal.price', InvalidTeamRecordError)
}

/** Parse an award strictly (no signature check) */
export function parseAward (value: unknown): Award {
  checkSigned(value, 'award', AWARD_FIELDS)
  return value as Award
}

/** Parse a commitment strictly (no signature check) */
export function parseCommitment (value: unknown): Commitment {
  checkSigned(value, 'commitment', COMMITMENT_FIELDS)
  return value as Commitment
}

/** What a caller fills in of a call; `id`, `from`, `to` and `nonce` are set per candidate */
export interface CfpFields {
  id: string
  skill: string
  what: string
  constraints?: Record<string, unknown>
  due: number
  exp: number
  nonce?: string
}

/** Sign the call of a round to one candidate */
export async function signCfp (caller: Identity, to: Did, fields: CfpFields): Promise<Cfp> {
  const payload: CfpPayload = {
    v: 1, id: fields.id, from: caller.did, to, skill: fields.skill, what: fields.what, due: fields.due, exp: fields.exp, nonce: fields.nonce ?? newId()
  }
  if (fields.constraints !== undefined) payload.constraints = fields.constraints
  return await signRecord('cfp', payload, caller)
}


