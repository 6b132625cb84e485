/**
 * A node's snapshot (`spec/management.md`, "Management protocol" 2): what a
 * node runs and sees, signed by its node key. Schema, limits, signing bytes,
 * signing and verification; the serving side signs once per change
 * (service.ts), a receiver verifies once per snapshot it is given.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { defaultVerificationCache } from '@ioa/collab/wire'
import { domainSeparated, isDid, publicKeyToDid } from '@ioa/interconnect'
import { z } from 'zod'
import { InvalidNodeSnapshotError } from '../errors.js'
import type { Did, Identity } from '@ioa/interconnect'

/** Snapshot format version (`v`) */
export const SNAPSHOT_VERSION = 1

/** Domain separation: a snapshot signature is over these bytes + DAG-CBOR(payload) */
export const SNAPSHOT_SIG_PREFIX = 'ioa:manage:snapshot:v1\n'
const PREFIX_BYTES = new TextEncoder().encode(SNAPSHOT_SIG_PREFIX)

/** Bounds of a snapshot; a node lists at most this many of each (the first ones, sorted) and sets `truncated` */
export const SNAPSHOT_LIMITS = Object.freeze({
  /** Hosted agents listed */
  maxAgents: 256,
  /** Skills listed per agent */
  maxSkills: 32,
  /** Connections listed */
  maxConnections: 512,
  /** Own addresses listed */
  maxAddresses: 32,
  /** Agents listed as a gateway's exports */
  maxExports: 256,
  /** Characters of a string field (an address, a name, a domain) */
  maxString: 512,
  /** Tokens the node holds listed in `proofs` */
  maxProofs: 64,
  /** Largest encoded signed snapshot, bytes */
  maxBytes: 262_144
})

export interface SnapshotAgent {
  did: Did
  name: string
  /** Skill ids of its card */
  skills: string[]
}

export interface SnapshotConnection {
  /** Remote peer id */
  peer: string
  direction: 'inbound' | 'outbound'
  /** Remote address of the connection */
  addr: string
}

export interface SnapshotGateway {
  /** The domain the gateway serves */
  domain: string
  /** Peer id of the gateway's node in the domain network */
  inner: string
  /** Addresses of that node */
  innerAddresses: string[]
  /** Agents of the domain exported to the outside now */
  exports: Did[]
}

/** A token the node holds (a grant it relies on): when it expires, never the token itself */
export interface SnapshotProof {
  /** The token's CID (spec/collab-delegation.md), base32 */
  cid: string
  /** Its `exp`, ms since the epoch */
  expiresAt: number
  /** Its `aud` (usually this node or one of its agents) */
  audience: Did
  /** Its `iss`: who can issue a new one */
  issuer: Did
}

/** The signed content of a snapshot */
export interface SnapshotPayload {
  v: 1
  /** The node: the did:key of its node key (the signer) */
  node: Did
  /** The node's peer id (the same key) */
  peer: string
  /** Increases by one with each new snapshot the node signs (from 1 at start) */
  seq: number
  /** When the snapshot was signed, ms since the epoch, by the node's clock */
  time: number
  domain: string
  /** `agent` for a management agent */
  role: 'node' | 'agent'
  /** Addresses the node listens on */
  addresses: string[]
  agents: SnapshotAgent[]
  connections: SnapshotConnection[]
  gateway?: SnapshotGateway
  load: {
    /** Tasks whose handler runs now */
    activeTasks: number
  }
  /** Served tasks since the node started, by how they ended (and those refused before a handler ran) */
  tasks: { completed: number, failed: number, canceled: number, refused: number }
  /** The DHT routing table */
  dht: { mode: 'client' | 'server', size: number, buckets: number }
  /** Tokens the node holds, soonest to expire first (absent when it holds none) */
  proofs?: SnapshotProof[]
  /** Present and true when a list was cut to its limit */
  truncated?: true
}

export interface SignedSnapshot {
  payload: SnapshotPayload
  /** Ed25519 signature of `node` over `ioa:manage:snapshot:v1\n` || DAG-CBOR(payload) */
  sig: Uint8Array
}

const L = SNAPSHOT_LIMITS
const Str = z.string().min(1).max(L.maxString)
const Count = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER)
const DidField = z.string().max(L.maxString).refine(isDid, 'a did:key')

const PayloadSchema = z.object({
  v: z.literal(SNAPSHOT_VERSION),
  node: DidField,
  peer: Str,
  seq: Count,
  time: Count,
  domain: Str,
  role: z.enum(['node', 'agent']),
  addresses: z.array(Str).max(L.maxAddresses),
  agents: z.array(z.object({
    did: DidField,
    name: z.string().max(L.maxString),
    skills: z.array(Str).max(L.maxSkills)
  }).strict()).max(L.maxAgents),
  connections: z.array(z.object({
    peer: Str,
    direction: z.enum(['inbound', 'outbound']),
    addr: Str
  }).strict()).max(L.maxConnections),
  gateway: z.object({
    domain: Str,
    inner: Str,
    innerAddresses: z.array(Str).max(L.maxAddresses),
    exports: z.array(DidField).max(L.maxExports)
  }).strict().optional(),
  load: z.object({ activeTasks: Count }).strict(),
  tasks: z.object({ completed: Count, failed: Count, canceled: Count, refused: Count }).strict(),
  dht: z.object({ mode: z.enum(['client', 'server']), size: Count, buckets: Count }).strict(),
  proofs: z.array(z.object({ cid: Str, expiresAt: Count, audience: DidField, issuer: DidField }).strict()).min(1).max(L.maxProofs).optional(),
  truncated: z.literal(true).optional()
}).strict()

/** The bytes a snapshot signature covers: `ioa:manage:snapshot:v1\n` || DAG-CBOR(payload) */
export function snapshotSigningBytes (payload: SnapshotPayload): Uint8Array {
  return domainSeparated(PREFIX_BYTES, dagCbor.encode(payload))
}

/** Sign a snapshot payload with the node key (`payload.node` must be its did) */
export async function signSnapshot (identity: Identity, payload: SnapshotPayload): Promise<SignedSnapshot> {
  if (payload.node !== identity.did) throw new InvalidNodeSnapshotError(`The snapshot names ${payload.node}, not the signer ${identity.did}`)
  const checked = parseSnapshotPayload(payload)
  return { payload: checked, sig: await identity.sign(snapshotSigningBytes(checked)) }
}

/** Validate a snapshot payload received from anywhere (a clean copy); throws `InvalidNodeSnapshotError` */
export function parseSnapshotPayload (value: unknown): SnapshotPayload {
  const r = PayloadSchema.safeParse(value)
  if (!r.success) {
    const issue = r.error.issues[0]
    throw new InvalidNodeSnapshotError(`Snapshot ${issue?.path.join('.') ?? ''}: ${issue?.message ?? 'invalid'}`)
  }
  const p = r.data as SnapshotPayload
  // DAG-CBOR has no undefined: optional fields that are absent stay absent
  if (p.gateway === undefined) delete p.gateway
  if (p.truncated === undefined) delete p.truncated
  if (p.proofs === undefined) delete p.proofs
  return p
}

export interface VerifySnapshotOptions {
  /** The snapshot must be signed by this node (the did of the peer it came from) */
  node?: Did
}

/**
 * Check a signed snapshot: schema, size, the signature of `payload.node` and,
 * with `options.node`, who signed it. Returns a clean copy; throws
 * `InvalidNodeSnapshotError`.
 */
export async function verifySnapshot (value: unknown, options: VerifySnapshotOptions = {}): Promise<SignedSnapshot> {
  const v = value as { payload?: unknown, sig?: unknown } | null
  if (v == null || typeof v !== 'object' || Object.keys(v).some(k => k !== 'payload' && k !== 'sig')) {
    throw new InvalidNodeSnapshotError('A signed snapshot is a map { payload, sig }')
  }
  if (!(v.sig instanceof Uint8Array) || v.sig.byteLength !== 64) throw new InvalidNodeSnapshotError('The snapshot signature must be 64 bytes')
  const payload = parseSnapshotPayload(v.payload)
  if (options.node != null && payload.node !== options.node) {
    throw new InvalidNodeSnapshotError(`The snapshot is of ${payload.node}, not of ${options.node}`)
  }
  const bytes = snapshotSigningBytes(payload)
  if (bytes.byteLength > L.maxBytes) throw new InvalidNodeSnapshotError(`The snapshot is larger than ${L.maxBytes} bytes`)
  // parsed keys (and their native key objects) are kept in the verification cache
  if (!await defaultVerificationCache.verifySignature(payload.node, bytes, v.sig)) {
    throw new InvalidNodeSnapshotError(`The snapshot signature does not verify for ${payload.node}`)
  }
  return { payload, sig: new Uint8Array(v.sig) }
}

/** The did:key of a peer id's Ed25519 key (a node's identity in this protocol), or undefined for other keys */
export function peerDid (peer: { publicKey?: { type: string } }): Did | undefined {
  const key = peer.publicKey as Parameters<typeof publicKeyToDid>[0] | undefined
  if (key?.type !== 'Ed25519') return undefined
  return publicKeyToDid(key)
}
