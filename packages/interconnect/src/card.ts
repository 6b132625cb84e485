/**
 * Agent cards: what an agent is, what it can do and where it is, signed by
 * the agent's key. Normative description: `spec/interconnect.md`.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { peerIdFromString } from '@libp2p/peer-id'
import { z } from 'zod'
import { assertCapability } from './capability.js'
import { CardBindingError, ExpiredCardError, InvalidCardError, InvalidSignatureError } from './errors.js'
import { domainSeparated, isDid, verifyByDid } from './identity.js'
import type { Did, Identity } from './identity.js'

/** Card format version */
export const CARD_VERSION = 1

/** Domain separation: signatures over cards are over these bytes + the canonical card */
const CARD_SIG_PREFIX = new TextEncoder().encode('ioa:card:v1\n')

/** Limits on card contents */
export const CARD_LIMITS = Object.freeze({
  maxSkills: 32,
  maxTags: 16,
  maxExamples: 8,
  maxAddrs: 16,
  maxGateways: 8,
  maxText: 2000,
  maxName: 100,
  maxSchemaBytes: 16_384,
  /** Deepest nesting of maps and lists in a schema; the schema map itself is level 1 */
  maxSchemaDepth: 32,
  /** Most map entries plus list elements in a schema, counted at every level */
  maxSchemaItems: 2_048,
  /** Largest encoded signed card */
  maxCardBytes: 65_536
})

const capability = z.string().max(128).refine(s => {
  // a name that breaks the grammar is this refinement's "no"
  try { assertCapability(s); return true } catch { return false }
}, 'invalid capability name')

/** A peer id in its canonical string form (base58btc multihash, e.g. `12D3KooW…`) */
const peerIdString = z.string().min(1).max(128).refine(s => {
  // a string that is no peer id at all is this refinement's "no"
  try { return peerIdFromString(s).toString() === s } catch { return false }
}, 'invalid peer id (must be in canonical form)')

const did = z.string().max(128).refine(isDid, 'invalid did:key')

/**
 * Why a free-form value breaks the nesting or item bounds, or undefined.
 * Walks without recursion, and stops at the first excess, so a hostile
 * value costs at most `maxItems` steps and no stack.
 */
export function freeFormExcess (value: unknown, maxDepth: number, maxItems: number): string | undefined {
  const stack: Array<{ v: unknown, depth: number }> = [{ v: value, depth: 1 }]
  let items = 0
  while (stack.length > 0) {
    const { v, depth } = stack.pop()!
    if (v == null || typeof v !== 'object' || v instanceof Uint8Array) continue
    if (depth > maxDepth) return `nests deeper than ${maxDepth} levels`
    const children = Array.isArray(v) ? v : Object.values(v)
    items += children.length
    if (items > maxItems) return `has more than ${maxItems} items`
    for (const c of children) {
      if (c != null && typeof c === 'object') stack.push({ v: c, depth: depth + 1 })
    }
  }
  return undefined
}

/** A JSON Schema, carried as a DAG-CBOR map; bounded in nesting, items and size */
const jsonSchema = z.record(z.string(), z.unknown()).superRefine((s, ctx) => {
  // the shape first: encoding a value nested thousands deep would recurse that deep
  const excess = freeFormExcess(s, CARD_LIMITS.maxSchemaDepth, CARD_LIMITS.maxSchemaItems)
  if (excess != null) {
    ctx.addIssue({ code: 'custom', message: `schema ${excess}` })
    return
  }
  let size: number
  try {
    size = dagCbor.encode(s).byteLength
  } catch {
    size = Infinity // not encodable as DAG-CBOR: refused below
  }
  if (size > CARD_LIMITS.maxSchemaBytes) {
    ctx.addIssue({ code: 'custom', message: `schema must encode to at most ${CARD_LIMITS.maxSchemaBytes} bytes of DAG-CBOR` })
  }
})

export const SkillSchema = z.object({
  /** Capability name, e.g. `travel.hotel.booking` */
  id: capability,
  name: z.string().max(CARD_LIMITS.maxName).optional(),
  description: z.string().max(CARD_LIMITS.maxText).optional(),
  tags: z.array(z.string().min(1).max(32)).max(CARD_LIMITS.maxTags).default([]),
  inputSchema: jsonSchema.optional(),
  outputSchema: jsonSchema.optional(),
  examples: z.array(z.string().max(CARD_LIMITS.maxText)).max(CARD_LIMITS.maxExamples).optional()
}).strict()

export const AvailabilitySchema = z.object({
  /** `always`: expected up; `intermittent`: may be offline for periods (robots, cars) */
  mode: z.enum(['always', 'intermittent']),
  /** How often the agent's peer is expected to be seen, in ms */
  heartbeat: z.number().int().min(100).max(86_400_000).optional(),
  note: z.string().max(200).optional()
}).strict()

/** Domain names: lower-case DNS-like labels, e.g. `hotels.example` */
const domain = z.string().min(1).max(253).regex(/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/, 'invalid domain name')

export const AgentCardSchema = z.object({
  v: z.literal(CARD_VERSION),
  /** The agent id: did:key of the agent's Ed25519 key (also the signer) */
  id: did,
  name: z.string().min(1).max(CARD_LIMITS.maxName),
  description: z.string().max(CARD_LIMITS.maxText).default(''),
  /** The organisation the agent belongs to */
  domain,
  version: z.string().min(1).max(32).default('1.0.0'),
  skills: z.array(SkillSchema).min(1).max(CARD_LIMITS.maxSkills),
  /** The libp2p peer that hosts the agent (binding: the card is only valid when served by it or by a listed gateway) */
  peer: peerIdString,
  /** Multiaddrs of the hosting peer; empty when reachable only through gateways */
  addrs: z.array(z.string().max(256)).max(CARD_LIMITS.maxAddrs).default([]),
  /** Outer peers of the domain's gateways that may serve this card and forward to the agent */
  gateways: z.array(peerIdString).max(CARD_LIMITS.maxGateways).optional(),
  availability: AvailabilitySchema.default({ mode: 'always' }),
  /** Milliseconds since the Unix epoch */
  issuedAt: z.number().int().nonnegative(),
  expiresAt: z.number().int().nonnegative()
}).strict().refine(c => c.expiresAt > c.issuedAt, 'expiresAt must be after issuedAt')

export type Skill = z.output<typeof SkillSchema>
export type SkillInit = z.input<typeof SkillSchema>
export type Availability = z.output<typeof AvailabilitySchema>
export type AgentCard = z.output<typeof AgentCardSchema>
export type AgentCardInit = z.input<typeof AgentCardSchema>

/** A card and the agent's signature over its canonical bytes */
export interface SignedCard {
  card: AgentCard
  sig: Uint8Array
}

function describeIssues (err: z.ZodError): string {
  return err.issues.slice(0, 5).map(i => `${i.path.join('.') || '(card)'}: ${i.message}`).join('; ')
}

/**
 * Validate and normalise card fields (defaults filled in). Throws
 * `InvalidCardError` naming the bad fields.
 */
export function parseCard (input: unknown): AgentCard {
  const result = AgentCardSchema.safeParse(input)
  if (!result.success) {
    throw new InvalidCardError(`Invalid agent card: ${describeIssues(result.error)}`)
  }
  return stripUndefined(result.data)
}

/** DAG-CBOR has no `undefined`: drop absent optional fields */
function stripUndefined<T> (value: T): T {
  if (Array.isArray(value)) {
    return value.map(stripUndefined) as T
  }
  if (value != null && typeof value === 'object' && !(value instanceof Uint8Array)) {
    const out: Record<string, unknown> = {}
    for (const [k, v] of Object.entries(value)) {
      if (v !== undefined) out[k] = stripUndefined(v)
    }
    return out as T
  }
  return value
}

/**
 * The bytes a card signature covers: the prefix `ioa:card:v1\n` followed by
 * the DAG-CBOR encoding of the card (DAG-CBOR's map key ordering makes it
 * canonical)
 */
export function cardSigningBytes (card: AgentCard): Uint8Array {
  return domainSeparated(CARD_SIG_PREFIX, dagCbor.encode(card))
}

/**
 * Sign a card with the agent's identity. The card's `id` must be the
 * identity's DID.
 */
export async function signCard (card: AgentCardInit, identity: Identity): Promise<SignedCard> {
  const parsed = parseCard(card)
  if (parsed.id !== identity.did) {
    throw new InvalidCardError(`Card id ${parsed.id} is not the signer ${identity.did}`)
  }
  const sig = await identity.sign(cardSigningBytes(parsed))
  return { card: parsed, sig }
}

/** Encode a signed card for the wire or storage: DAG-CBOR `{ card, sig }` */
export function encodeSignedCard (signed: SignedCard): Uint8Array {
  return dagCbor.encode({ card: signed.card, sig: signed.sig })
}

export interface VerifyCardOptions {
  /** The peer the card was received from; it must be the card's peer or one of its gateways */
  servedBy?: string
  /** Current time in ms (tests) */
  now?: number
  /** Allowed clock skew in ms @default 60_000 */
  clockSkew?: number
}

/**
 * Verify a signed card received from the network: schema, signature by the
 * key of `card.id`, validity period, and (when `servedBy` is given) that the
 * serving peer is the one the card is bound to. Returns the normalised card or
 * throws a typed error (`InvalidCardError`, `InvalidSignatureError`,
 * `ExpiredCardError`, `CardBindingError`).
 */
export async function verifyCard (input: unknown, options: VerifyCardOptions = {}): Promise<SignedCard> {
  if (input == null || typeof input !== 'object' || Array.isArray(input)) {
    throw new InvalidCardError('Signed card must be a map { card, sig }')
  }
  const { card: rawCard, sig, ...rest } = input as Record<string, unknown>
  if (Object.keys(rest).length > 0) {
    throw new InvalidCardError(`Unknown fields in signed card: ${Object.keys(rest).join(', ')}`)
  }
  if (!(sig instanceof Uint8Array) || sig.length !== 64) {
    throw new InvalidSignatureError('Card signature must be 64 bytes')
  }
  // the signature covers the bytes as received: a normalised copy that adds
  // defaults would not be what the agent signed
  const strict = AgentCardSchema.safeParse(rawCard)
  if (!strict.success) {
    throw new InvalidCardError(`Invalid agent card: ${describeIssues(strict.error)}`)
  }
  let bytes: Uint8Array
  try {
    bytes = cardSigningBytes(rawCard as AgentCard)
  } catch (err: any) {
    throw new InvalidCardError(`Card cannot be encoded: ${err?.message ?? err}`)
  }
  if (bytes.byteLength > CARD_LIMITS.maxCardBytes) {
    throw new InvalidCardError(`Card is larger than ${CARD_LIMITS.maxCardBytes} bytes`)
  }
  const card = stripUndefined(strict.data)
  const canonical = cardSigningBytes(card)
  if (canonical.length !== bytes.length || !canonical.every((b, i) => b === bytes[i])) {
    throw new InvalidCardError('Card is not in canonical form (every field with a default must be present)')
  }
  if (!await verifyByDid(card.id, bytes, sig)) {
    throw new InvalidSignatureError(`Card signature does not verify for ${card.id}`)
  }

  const now = options.now ?? Date.now()
  const skew = options.clockSkew ?? 60_000
  if (card.issuedAt > now + skew) {
    throw new ExpiredCardError(`Card of ${card.id} is issued in the future`)
  }
  if (card.expiresAt + skew < now) {
    throw new ExpiredCardError(`Card of ${card.id} expired at ${new Date(card.expiresAt).toISOString()}`)
  }

  if (options.servedBy != null) {
    const allowed = options.servedBy === card.peer || (card.gateways ?? []).includes(options.servedBy)
    if (!allowed) {
      throw new CardBindingError(`Card of ${card.id} is bound to ${card.peer}, not to ${options.servedBy}`)
    }
  }

  return { card, sig }
}

/** The skills of a card under a capability prefix */
export function matchingSkills (card: AgentCard, prefix: string): Skill[] {
  return card.skills.filter(s => s.id === prefix || s.id.startsWith(prefix + '.'))
}

export type { Did }
