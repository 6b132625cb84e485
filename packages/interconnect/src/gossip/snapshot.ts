/**
 * Capability snapshots (spec `interconnect.md` 12.2): the DAG-CBOR message a
 * node publishes on its domain's gossip topic, listing every capability it
 * announces. The announcer is the gossipsub message's signer, never a field
 * of the payload. Decoding checks the byte bound before parsing and throws a
 * typed error (`SnapshotTooLargeError`, `InvalidSnapshotError`) that the
 * topic validator turns into a rejection.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { multiaddr } from '@multiformats/multiaddr'
import { isCapability } from '../capability.js'
import { InvalidSnapshotError, SnapshotTooLargeError } from '../errors.js'

/** Version of the snapshot schema (also the `1` of the topic name) */
export const SNAPSHOT_VERSION = 1

/** Topic names start with this; the domain follows */
export const GOSSIP_TOPIC_PREFIX = '/ioa/caps/1/'

/** The gossip topic of a domain: `/ioa/caps/1/<domain>` */
export function gossipTopic (domain: string): string {
  return GOSSIP_TOPIC_PREFIX + domain
}

/** Most addresses in a snapshot, and the longest one (characters), as on a card */
export const SNAPSHOT_MAX_ADDRS = 16
const MAX_ADDR_LENGTH = 256

/** The largest `seq` and `ttl`: integers a reader of any language holds exactly */
const MAX_SEQ = Number.MAX_SAFE_INTEGER
const MAX_TTL = 2_147_483_647

/** A node's whole set of announced capabilities */
export interface CapabilitySnapshot {
  v: 1
  /** Strictly increasing per announcer (the reference publisher uses its clock in ms) */
  seq: number
  /** How long the receiver keeps the snapshot, in ms (clamped by the receiver) */
  ttl: number
  /** Capability names, each once; empty withdraws everything */
  caps: string[]
  /** Set on a node's first snapshot: receivers republish their own soon */
  hello?: true
  /**
   * Where the announcer listens (multiaddr strings, as on its cards), so that
   * a receiver fetches its cards without asking the DHT for its address;
   * absent or empty when it lists none
   */
  addrs?: string[]
}

export interface SnapshotLimits {
  /** Most bytes of an encoded snapshot */
  maxBytes: number
  /** Most capabilities in one snapshot */
  maxCapabilities: number
}

/** The DAG-CBOR bytes of a snapshot (map keys in canonical order; `hello` only when set, `addrs` only when not empty) */
export function encodeSnapshot (snapshot: CapabilitySnapshot): Uint8Array {
  const { v, seq, ttl, caps, hello, addrs } = snapshot
  return dagCbor.encode({ v, seq, ttl, caps, ...(hello === true ? { hello } : {}), ...(addrs != null && addrs.length > 0 ? { addrs } : {}) })
}

/** Check the `addrs` of a received snapshot: a list of at most 16 multiaddr strings */
function checkAddrs (addrs: unknown): string[] {
  if (!Array.isArray(addrs)) throw new InvalidSnapshotError('addrs must be a list')
  if (addrs.length > SNAPSHOT_MAX_ADDRS) throw new InvalidSnapshotError(`addrs holds ${addrs.length} addresses, at most ${SNAPSHOT_MAX_ADDRS}`)
  for (const a of addrs) {
    if (typeof a !== 'string' || a.length > MAX_ADDR_LENGTH) throw new InvalidSnapshotError(`addrs entries must be multiaddr strings of at most ${MAX_ADDR_LENGTH} characters`)
    try {
      multiaddr(a)
    } catch {
      throw new InvalidSnapshotError(`addrs holds ${JSON.stringify(a).slice(0, 80)}, not a multiaddr`)
    }
  }
  return addrs
}

const isUint = (x: unknown, max: number): x is number => typeof x === 'number' && Number.isInteger(x) && x >= 0 && x <= max

/**
 * Parse and check a received snapshot. Other keys than the schema's are
 * ignored (later versions of this schema may add some).
 */
export function decodeSnapshot (bytes: Uint8Array, limits: SnapshotLimits): CapabilitySnapshot {
  if (bytes.byteLength > limits.maxBytes) {
    throw new SnapshotTooLargeError(`snapshot of ${bytes.byteLength} bytes exceeds ${limits.maxBytes}`)
  }
  let value: unknown
  try {
    value = dagCbor.decode(bytes)
  } catch (err: any) {
    throw new InvalidSnapshotError(`not DAG-CBOR: ${err?.message ?? err}`)
  }
  if (value == null || typeof value !== 'object' || Array.isArray(value) || value instanceof Uint8Array) {
    throw new InvalidSnapshotError('snapshot is not a map')
  }
  const m = value as Record<string, unknown>
  if (m.v !== SNAPSHOT_VERSION) throw new InvalidSnapshotError(`unknown snapshot version ${String(m.v).slice(0, 16)}`)
  if (!isUint(m.seq, MAX_SEQ) || m.seq < 1) throw new InvalidSnapshotError('seq must be an integer 1 to 2^53-1')
  if (!isUint(m.ttl, MAX_TTL) || m.ttl < 1) throw new InvalidSnapshotError('ttl must be an integer 1 to 2^31-1 ms')
  if (!Array.isArray(m.caps)) throw new InvalidSnapshotError('caps must be a list')
  if (m.caps.length > limits.maxCapabilities) {
    throw new SnapshotTooLargeError(`snapshot of ${m.caps.length} capabilities exceeds ${limits.maxCapabilities}`)
  }
  const seen = new Set<string>()
  for (const c of m.caps) {
    if (!isCapability(c)) throw new InvalidSnapshotError(`caps holds an invalid capability name ${JSON.stringify(c)?.slice(0, 140)}`)
    if (seen.has(c)) throw new InvalidSnapshotError(`caps lists ${c} twice`)
    seen.add(c)
  }
  if (m.hello !== undefined && m.hello !== true) throw new InvalidSnapshotError('hello must be true when present')
  const addrs = m.addrs === undefined ? [] : checkAddrs(m.addrs)
  return { v: SNAPSHOT_VERSION, seq: m.seq, ttl: m.ttl, caps: m.caps as string[], ...(m.hello === true ? { hello: true as const } : {}), ...(addrs.length > 0 ? { addrs } : {}) }
}
