/**
 * The signed records of teams (`spec/teams.md`, sections 3, 5.6, 7.2 and 8):
 * invitations, acceptances, rosters, messages, checkpoints and claims. Each
 * is `{ payload, sig }`, signed over a domain-separation prefix and the
 * DAG-CBOR payload, and parsed strictly (no unknown keys, bounded fields).
 */
import * as dagCbor from '@ipld/dag-cbor'
import { domainSeparated, isCapability, isDid } from '@ioa/interconnect'
import { randomBytes } from '@libp2p/crypto'
import { base32 } from 'multiformats/bases/base32'
import { base64url } from 'multiformats/bases/base64'
import { CID } from 'multiformats/cid'
import { sha256 } from 'multiformats/hashes/sha2'
import { signWith } from '../auth/ed25519.js'
import { defaultVerificationCache } from '../auth/verification-cache.js'
import { InvalidMessageError, InvalidRosterError, InvalidTeamRecordError } from './errors.js'
import { checkFields, checkSigned, checkTextList } from './schema.js'
import type { Fields } from './schema.js'
import type { VerificationCache } from '../auth/verification-cache.js'
import type { CollabError } from '../errors.js'
import type { Did, Identity } from '@ioa/interconnect'

/** Record format version (`v`) */
export const TEAM_RECORD_VERSION = 1

/** Signature prefixes, one per record kind (each followed by a line feed in the signing bytes) */
export const TEAM_PREFIXES = Object.freeze({
  invite: 'ioa:team-invite:v1',
  accept: 'ioa:team-accept:v1',
  roster: 'ioa:team-roster:v1',
  message: 'ioa:team-msg:v1',
  checkpoint: 'ioa:team-checkpoint:v1',
  claim: 'ioa:team-claim:v1',
  watch: 'ioa:team-watch:v1',
  cfp: 'ioa:cfp:v1',
  proposal: 'ioa:proposal:v1',
  award: 'ioa:award:v1',
  commit: 'ioa:commit:v1'
})

export type RecordKind = keyof typeof TEAM_PREFIXES

/** A team id: `t` and 26 characters of lower-case base32 (16 random bytes) */
export const TEAM_ID = /^t[a-z2-7]{26}$/

/** A message id or nonce: 22 characters of base64url (16 random bytes) */
export const NONCE = /^[A-Za-z0-9_-]{22}$/

const CID_TEXT = /^b[a-z2-7]{58,120}$/
const PEER_ID = /^[1-9A-HJ-NP-Za-km-z]{32,128}$/

export interface Signed<P> {
  payload: P
  sig: Uint8Array
}

/** A new team id */
export function newTeamId (): string {
  return 't' + base32.baseEncode(randomBytes(16))
}

/** A new message id or nonce */
export function newId (): string {
  return base64url.baseEncode(randomBytes(16))
}

const PREFIX_BYTES = new Map<string, Uint8Array>(
  Object.values(TEAM_PREFIXES).map(p => [p, new TextEncoder().encode(p + '\n')])
)

/** The bytes a record's signature covers: the prefix, a line feed and DAG-CBOR(payload) */
export function recordSigningBytes (kind: RecordKind, payload: unknown): Uint8Array {
  return domainSeparated(PREFIX_BYTES.get(TEAM_PREFIXES[kind]) as Uint8Array, dagCbor.encode(payload))
}

/** Sign a payload as a record of `kind` */
export async function signRecord<P> (kind: RecordKind, payload: P, signer: Identity): Promise<Signed<P>> {
  return { payload, sig: await signWith(signer, recordSigningBytes(kind, payload)) }
}

/**
 * Does the record's signature verify with the key of `did`? Never throws.
 * Parsed keys are kept in `cache` (by default the process-wide one, as for
 * the free functions of delegation: a DID's key is a pure function of it)
 */
export async function verifyRecord (kind: RecordKind, record: Signed<unknown>, did: Did, cache: VerificationCache = defaultVerificationCache): Promise<boolean> {
  return await verifyEncodedRecord(kind, dagCbor.encode(record.payload), record.sig, did, cache)
}

/** `verifyRecord` for a payload whose DAG-CBOR encoding the caller holds already (encoded.ts) */
export async function verifyEncodedRecord (kind: RecordKind, payload: Uint8Array, sig: Uint8Array, did: Did, cache: VerificationCache = defaultVerificationCache): Promise<boolean> {
  return await cache.verifySignature(did, domainSeparated(PREFIX_BYTES.get(TEAM_PREFIXES[kind]) as Uint8Array, payload), sig)
}

/** CIDv1 (dag-cbor, sha2-256) of a value's DAG-CBOR encoding, as base32 text */
export async function cidOf (value: unknown): Promise<string> {
  return await cidOfBytes(dagCbor.encode(value))
}

/** CIDv1 (dag-cbor, sha2-256) of bytes already DAG-CBOR encoded, as base32 text */
export async function cidOfBytes (bytes: Uint8Array): Promise<string> {
  return CID.create(1, dagCbor.code, await sha256.digest(bytes)).toString()
}

export interface WatchPayload {
  v: 1
  team: string
  /** The watcher: the audience of the watch token */
  agent: Did
  /** The peer the request comes from */
  peer: string
  /** The first seq wanted */
  from: number
  ts: number
}

/** A watcher's request to read a team's conversation (spec 5.10) */
export type Watch = Signed<WatchPayload>

/** Parse a watch record strictly (no signature check) */
export function parseWatch (value: unknown): Watch {
  const r = checkSigned(value, 'watch', InvalidTeamRecordError)
  const p = checkFields(r.payload, { v: version, team: teamId, agent: did, peer, from: { kind: 'int' }, ts: time }, 'watch.payload', InvalidTeamRecordError)
  checkDid(p.agent, 'watch.agent', InvalidTeamRecordError)
  return r as unknown as Watch
}

/** The encoded size of a value */
export function encodedSize (value: unknown): number {
  return dagCbor.encode(value).byteLength
}


const did = { kind: 'text', max: 128, pattern: /^did:key:z[1-9A-HJ-NP-Za-km-z]{40,60}$/ } as const
const teamId = { kind: 'text', max: 27, pattern: TEAM_ID } as const
const time = { kind: 'int' } as const
const nonce = { kind: 'text', max: 22, pattern: NONCE } as const
const cid = { kind: 'text', max: 128, pattern: CID_TEXT } as const
const peer = { kind: 'text', max: 128, pattern: PEER_ID } as const
const version = { kind: 'int', min: 1, max: 1 } as const

function checkDid (value: unknown, what: string, Err: new (message?: string) => CollabError): void {
  if (!isDid(value)) throw new Err(`${what} is not a did:key`)
}

// ---------------------------------------------------------------------------
// goal

export interface TeamGoal {
  text: string
  capabilities: string[]
  constraints?: Record<string, unknown>
  deadline: number
}

const GOAL_FIELDS: Fields = {
  text: { kind: 'text', max: 4096 },
  capabilities: { kind: 'list', min: 1, max: 16 },
  constraints: { kind: 'map', required: false },
  deadline: time
}

/** Check a goal (spec 2.1) */
export function parseGoal (value: unknown, Err: new (message?: string) => CollabError = InvalidTeamRecordError): TeamGoal {
  const g = checkFields(value, GOAL_FIELDS, 'goal', Err)
  for (const c of g.capabilities as unknown[]) {
    if (!isCapability(c)) throw new Err(`goal.capabilities has an invalid capability name ${JSON.stringify(c)}`)
  }
  checkTextList(g.capabilities as unknown[], 'goal.capabilities', Err, { max: 128 })
  if (g.constraints != null && Object.keys(g.constraints).length > 32) throw new Err('goal.constraints has more than 32 entries')
  return g as unknown as TeamGoal
}

// ---------------------------------------------------------------------------
// invitation and acceptance (spec 3.2, 3.3)

export interface ParentRef {
  team: string
  member: Did
}

export interface InvitationPayload {
  v: 1
  team: string
  from: Did
  to: Did
  goal: TeamGoal
  role: string
  capabilities: string[]
  /** The encoded delegation token issued by `from` to `to` */
  token: Uint8Array
  /** The encoded tokens of the convener's chain */
  proofs: Uint8Array[]
  parent?: ParentRef
  depth: number
  proposal?: string
  /** Peer id of the team's sequencer, where the invitee subscribes */
  sequencer?: string
  exp: number
  nonce: string
}

export type Invitation = Signed<InvitationPayload>

const INVITATION_FIELDS: Fields = {
  v: version,
  team: teamId,
  from: did,
  to: did,
  goal: { kind: 'map' },
  role: { kind: 'text', max: 64 },
  capabilities: { kind: 'list', min: 1, max: 16 },
  token: { kind: 'bytes', max: 16_384 },
  proofs: { kind: 'list', max: 8 },
  parent: { kind: 'map', required: false },
  depth: { kind: 'int', max: 16 },
  proposal: { ...cid, required: false },
  sequencer: { ...peer, required: false },
  exp: time,
  nonce
}

function parseParent (value: unknown, Err: new (message?: string) => CollabError): ParentRef {
  const p = checkFields(value, { team: teamId, member: did }, 'parent', Err)
  return p as unknown as ParentRef
}

/** Parse an invitation strictly (no signature check) */
export function parseInvitation (value: unknown): Invitation {
  const r = checkSigned(value, 'invitation', InvalidTeamRecordError)
  const p = checkFields(r.payload, INVITATION_FIELDS, 'invitation.payload', InvalidTeamRecordError)
  checkDid(p.from, 'invitation.from', InvalidTeamRecordError)
  checkDid(p.to, 'invitation.to', InvalidTeamRecordError)
  parseGoal(p.goal)
  for (const c of p.capabilities as unknown[]) {
    if (!isCapability(c)) throw new InvalidTeamRecordError('invitation.capabilities has an invalid capability name')
  }
  for (const t of p.proofs as unknown[]) {
    if (!(t instanceof Uint8Array) || t.byteLength > 16_384) throw new InvalidTeamRecordError('invitation.proofs must be encoded tokens')
  }
  if (p.parent != null) parseParent(p.parent, InvalidTeamRecordError)
  return r as unknown as Invitation
}

export interface AcceptancePayload {
  v: 1
  team: string
  /** CID of the invitation */
  invite: string
  from: Did
  peer: string
  ts: number
}

export type Acceptance = Signed<AcceptancePayload>

const ACCEPTANCE_FIELDS: Fields = { v: version, team: teamId, invite: cid, from: did, peer, ts: time }

/** Parse an acceptance strictly (no signature check) */
export function parseAcceptance (value: unknown): Acceptance {
  const r = checkSigned(value, 'acceptance', InvalidTeamRecordError)
  const p = checkFields(r.payload, ACCEPTANCE_FIELDS, 'acceptance.payload', InvalidTeamRecordError)
  checkDid(p.from, 'acceptance.from', InvalidTeamRecordError)
  return r as unknown as Acceptance
}

/** Codes of a decline (spec 3.3) */
export type DeclineCode = 'BUSY' | 'NOT_CAPABLE' | 'DEADLINE' | 'POLICY' | 'OTHER'
export const DECLINE_CODES: readonly DeclineCode[] = ['BUSY', 'NOT_CAPABLE', 'DEADLINE', 'POLICY', 'OTHER']

export interface Decline {
  code: DeclineCode
  reason: string
}

/** Parse a decline answer */
export function parseDecline (value: unknown): Decline {
  const d = checkFields(value, { code: { kind: 'text', max: 16, oneOf: DECLINE_CODES }, reason: { kind: 'text', min: 0, max: 256 } }, 'decline', InvalidTeamRecordError)
  return d as unknown as Decline
}

// ---------------------------------------------------------------------------
// roster (spec 3.5)

export interface RosterMember {
  agent: Did
  peer: string
  role: string
  /** CID of the member's token (the convener: of its own leaf token, absent when it acts as a root) */
  token?: string
  /** CIDs of the member's token and of every token it derives from (for revocation checks) */
  chain: string[]
}

export interface RosterLimits {
  maxMessageBytes: number
  rate: number
  burst: number
  historyBytes: number
  /** Flow control (spec 10.3): turns before the sequencer concludes; absent: 1,000 */
  maxTurns?: number
  /** Flow control (spec 10.4): the speaker policy; absent: `open` */
  policy?: string
  /** The role of the moderator under the `moderator` policy; absent: `convener` */
  moderator?: string
  /** Roles from the highest priority down, under the `priority` policy; absent: the order of `successors` */
  priority?: string[]
  /** A speaker silent this long (ms) loses its turn; absent: 60,000 */
  turnTimeout?: number
  /** Repetition filter (spec 10.7): the last W discussion messages compared, 0 = off @default 32 when absent */
  repeatWindow?: number
  /** Repetition filter: similarity threshold, per mille @default 800 when absent */
  repeatThreshold?: number
}

export interface RosterPayload {
  v: 1
  team: string
  version: number
  epoch: number
  goal: TeamGoal
  convener: Did
  members: RosterMember[]
  successors: Did[]
  parent?: ParentRef
  depth: number
  deadline: number
  limits: RosterLimits
  prev?: string
  signer: Did
  ts: number
}

export type Roster = Signed<RosterPayload>

const ROSTER_FIELDS: Fields = {
  v: version,
  team: teamId,
  version: { kind: 'int', min: 1 },
  epoch: { kind: 'int' },
  goal: { kind: 'map' },
  convener: did,
  members: { kind: 'list', min: 1, max: 256 },
  successors: { kind: 'list', min: 1, max: 256 },
  parent: { kind: 'map', required: false },
  depth: { kind: 'int', max: 16 },
  deadline: time,
  limits: { kind: 'map' },
  prev: { ...cid, required: false },
  signer: did,
  ts: time
}

const MEMBER_FIELDS: Fields = {
  agent: did, peer, role: { kind: 'text', max: 64 }, token: { ...cid, required: false }, chain: { kind: 'list', max: 9 }
}

const LIMIT_FIELDS: Fields = {
  maxMessageBytes: { kind: 'int', min: 256, max: 1_048_576 },
  rate: { kind: 'int', min: 1, max: 10_000 },
  burst: { kind: 'int', min: 1, max: 10_000 },
  historyBytes: { kind: 'int', min: 65_536, max: 1_073_741_824 },
  // flow control (spec 10), optional: absent means the default
  maxTurns: { kind: 'int', min: 1, max: 1_000_000, required: false },
  policy: { kind: 'text', max: 32, pattern: /^[a-z][a-z0-9-]{0,31}$/, required: false },
  moderator: { kind: 'text', max: 64, required: false },
  priority: { kind: 'list', min: 1, max: 64, required: false },
  turnTimeout: { kind: 'int', min: 1_000, max: 86_400_000, required: false },
  // repetition filter (spec 10.7), optional
  repeatWindow: { kind: 'int', required: false, min: 0, max: 1024 },
  repeatThreshold: { kind: 'int', required: false, min: 1, max: 1000 }
}

/** Check a roster's `limits` map (spec 3.5, 10) */
export function parseRosterLimits (value: unknown, Err: new (message?: string) => CollabError): RosterLimits {
  const limits = checkFields(value, LIMIT_FIELDS, 'roster.limits', Err)
  if (limits.priority != null) checkTextList(limits.priority as unknown[], 'roster.limits.priority', Err, { max: 64 })
  return limits as unknown as RosterLimits
}

/** Parse a roster strictly (no signature check): members sorted by agent, successors = the members */
export function parseRoster (value: unknown): Roster {
  const r = checkSigned(value, 'roster', InvalidRosterError)
  const p = checkFields(r.payload, ROSTER_FIELDS, 'roster.payload', InvalidRosterError)
  parseGoal(p.goal, InvalidRosterError)
  parseRosterLimits(p.limits, InvalidRosterError)
  if (p.parent != null) parseParent(p.parent, InvalidRosterError)
  const agents: string[] = []
  for (const m of p.members as unknown[]) {
    const member = checkFields(m, MEMBER_FIELDS, 'roster.members[]', InvalidRosterError)
    checkDid(member.agent, 'roster member', InvalidRosterError)
    checkTextList(member.chain as unknown[], 'roster member chain', InvalidRosterError, { max: 128, pattern: CID_TEXT })
    agents.push(member.agent as string)
  }
  for (let i = 1; i < agents.length; i++) {
    if (!(agents[i - 1] < agents[i])) throw new InvalidRosterError('roster.members must be sorted by agent, each once')
  }
  const successors = checkTextList(p.successors as unknown[], 'roster.successors', InvalidRosterError, { max: 128 })
  if (successors.length !== agents.length || !successors.every(s => agents.includes(s))) {
    throw new InvalidRosterError('roster.successors must list every member once')
  }
  if (!agents.includes(p.convener as string) && p.version === 1) throw new InvalidRosterError('The first roster must list the convener')
  if ((p.version === 1) !== (p.prev == null)) throw new InvalidRosterError('roster.prev must be absent exactly in version 1')
  return r as unknown as Roster
}

/** The member entry of `agent`, if it is in the roster */
export function memberOf (roster: RosterPayload, agent: Did): RosterMember | undefined {
  return roster.members.find(m => m.agent === agent)
}

// ---------------------------------------------------------------------------
// messages (spec 8.1, 8.2)

export const MESSAGE_TYPES = [
  'discuss', 'propose', 'vote', 'vote-result', 'assign', 'progress', 'result', 'pause', 'conclude',
  'subteam', 'leave', 'remove', 'admit', 'roster', 'epoch', 'turn'
] as const

export type MessageType = typeof MESSAGE_TYPES[number]

export interface MessagePayload<B = Record<string, unknown>> {
  v: 1
  team: string
  from: Did
  id: string
  type: MessageType
  body: B
  re?: number
  ts: number
}

export type TeamMessage<B = Record<string, unknown>> = Signed<MessagePayload<B>>

const MESSAGE_FIELDS: Fields = {
  v: version,
  team: teamId,
  from: did,
  id: nonce,
  type: { kind: 'text', max: 16, oneOf: MESSAGE_TYPES },
  body: { kind: 'map' },
  re: { kind: 'int', required: false },
  ts: time
}

const text = (max: number, required = true): { kind: 'text', max: number, required: boolean } => ({ kind: 'text', max, required })
const TASK_ID = { kind: 'text', max: 128 } as const

/** The body of each message type (spec 8.2) */
const BODY_FIELDS: Record<MessageType, Fields> = {
  discuss: { text: text(8192), next: { ...did, required: false } },
  propose: { text: text(8192), plan: { kind: 'map', required: false }, next: { ...did, required: false } },
  vote: { proposal: { kind: 'int' }, choice: { kind: 'text', max: 8, oneOf: ['yes', 'no', 'abstain'] } },
  'vote-result': {
    proposal: { kind: 'int' }, yes: { kind: 'int' }, no: { kind: 'int' }, abstain: { kind: 'int' },
    outcome: { kind: 'text', max: 8, oneOf: ['accepted', 'rejected'] }
  },
  assign: {
    mode: { kind: 'text', max: 5, oneOf: ['sync', 'async'] }, task: TASK_ID, assignee: did,
    skill: { kind: 'text', max: 128 }, input: { kind: 'map', required: false }
  },
  progress: { task: TASK_ID, state: { kind: 'text', max: 32 }, text: text(8192, false) },
  result: { task: TASK_ID, state: { kind: 'text', max: 32 }, output: { kind: 'map', required: false }, error: { kind: 'map', required: false } },
  pause: { tasks: { kind: 'list', min: 1, max: 64 } },
  conclude: { summary: text(8192), outcome: { kind: 'text', max: 9, oneOf: ['done', 'failed', 'abandoned'] } },
  subteam: { team: teamId, roster: cid, state: { kind: 'text', max: 9, oneOf: ['formed', 'concluded'] } },
  leave: { reason: text(256, false) },
  remove: { agent: did, reason: text(256, false) },
  admit: { accept: { kind: 'map' }, role: { kind: 'text', max: 64 }, token: cid, chain: { kind: 'list', max: 9 } },
  roster: { roster: { kind: 'map' } },
  epoch: { epoch: { kind: 'int', min: 1 }, sequencer: did, promised: { kind: 'list', min: 1, max: 256 } },
  turn: {
    turn: { kind: 'int' }, state: { kind: 'text', max: 10, oneOf: ['discussion', 'sync', 'paused'] },
    policy: { kind: 'text', max: 32 }, speaker: did, fallback: { kind: 'text', max: 11, oneOf: ['round-robin'], required: false },
    reason: text(256, false)
  }
}

/** Parse a message strictly, body included (no signature or membership check) */
export function parseMessage (value: unknown): TeamMessage {
  const r = checkSigned(value, 'message', InvalidMessageError)
  const p = checkFields(r.payload, MESSAGE_FIELDS, 'message.payload', InvalidMessageError)
  checkDid(p.from, 'message.from', InvalidMessageError)
  const type = p.type as MessageType
  const body = checkFields(p.body, BODY_FIELDS[type], `message.body (${type})`, InvalidMessageError)
  if (type === 'pause') checkTextList(body.tasks as unknown[], 'pause.tasks', InvalidMessageError, { max: 128 })
  if (type === 'epoch') checkTextList(body.promised as unknown[], 'epoch.promised', InvalidMessageError, { max: 128 })
  if (type === 'roster') parseRoster(body.roster)
  if (type === 'admit') {
    parseAcceptance(body.accept)
    checkTextList(body.chain as unknown[], 'admit.chain', InvalidMessageError, { max: 128, pattern: CID_TEXT })
  }
  return r as unknown as TeamMessage
}

/** Types only the sequencer appends (spec 8.2) */
export const SEQUENCER_TYPES: ReadonlySet<MessageType> = new Set(['vote-result', 'roster', 'epoch', 'turn'])

// ---------------------------------------------------------------------------
// entries, checkpoints and claims (spec 8.3, 5.6, 7.2)

export interface Entry {
  seq: number
  epoch: number
  /** CID of the previous entry; absent for entry 0 */
  prev?: string
  msg: TeamMessage
}

const ENTRY_FIELDS: Fields = { seq: { kind: 'int' }, epoch: { kind: 'int' }, prev: { ...cid, required: false }, msg: { kind: 'map' } }

/** Parse an entry strictly, its message included */
export function parseEntry (value: unknown): Entry {
  const e = checkFields(value, ENTRY_FIELDS, 'entry', InvalidMessageError)
  if ((e.seq === 0) !== (e.prev == null)) throw new InvalidMessageError('entry.prev must be absent exactly in entry 0')
  parseMessage(e.msg)
  return e as unknown as Entry
}

export interface CheckpointPayload {
  v: 1
  team: string
  epoch: number
  seq: number
  /** CID of entry `seq` */
  head: string
}

export type Checkpoint = Signed<CheckpointPayload>

/** Parse a checkpoint strictly (no signature check) */
export function parseCheckpoint (value: unknown): Checkpoint {
  const r = checkSigned(value, 'checkpoint', InvalidTeamRecordError)
  checkFields(r.payload, { v: version, team: teamId, epoch: { kind: 'int' }, seq: { kind: 'int' }, head: cid }, 'checkpoint.payload', InvalidTeamRecordError)
  return r as unknown as Checkpoint
}

export interface ClaimPayload {
  v: 1
  team: string
  epoch: number
  agent: Did
  ts: number
}

export type Claim = Signed<ClaimPayload>

/** Parse a claim strictly (no signature check) */
export function parseClaim (value: unknown): Claim {
  const r = checkSigned(value, 'claim', InvalidTeamRecordError)
  const p = checkFields(r.payload, { v: version, team: teamId, epoch: { kind: 'int', min: 1 }, agent: did, ts: time }, 'claim.payload', InvalidTeamRecordError)
  checkDid(p.agent, 'claim.agent', InvalidTeamRecordError)
  return r as unknown as Claim
}

