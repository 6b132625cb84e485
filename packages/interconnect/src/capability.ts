/**
 * Capability names and their DHT keys.
 *
 * A capability is a dot-separated hierarchical name such as
 * `travel.hotel.booking`. Publishing it announces the hosting peer as a DHT
 * provider of the CID of the name and of each of its prefixes (`travel`,
 * `travel.hotel`, `travel.hotel.booking`), so a lookup of any prefix finds it.
 */
import { CID } from 'multiformats/cid'
import { sha256 } from 'multiformats/hashes/sha2'
import { InvalidCapabilityError } from './errors.js'

/** One segment: a lower-case letter, then lower-case letters, digits or `-` */
const SEGMENT = /^[a-z][a-z0-9-]{0,31}$/

/** Most segments in a name */
export const MAX_CAPABILITY_DEPTH = 8
/** Longest name, in characters */
export const MAX_CAPABILITY_LENGTH = 128

/** The raw multicodec: the CID names bytes, not IPLD data */
const RAW = 0x55

const encoder = new TextEncoder()

/** Throw `InvalidCapabilityError` unless `name` follows the grammar */
export function assertCapability (name: unknown): asserts name is string {
  if (typeof name !== 'string' || name.length === 0 || name.length > MAX_CAPABILITY_LENGTH) {
    throw new InvalidCapabilityError(`Capability must be 1-${MAX_CAPABILITY_LENGTH} characters`)
  }
  const segments = name.split('.')
  if (segments.length > MAX_CAPABILITY_DEPTH) {
    throw new InvalidCapabilityError(`Capability "${name}" has more than ${MAX_CAPABILITY_DEPTH} segments`)
  }
  for (const s of segments) {
    if (!SEGMENT.test(s)) {
      throw new InvalidCapabilityError(`Capability "${name}" has an invalid segment "${s}"`)
    }
  }
}

export function isCapability (name: unknown): name is string {
  try {
    assertCapability(name)
    return true
  } catch {
    // the grammar error is the answer: not a capability name
    return false
  }
}

/** `travel.hotel.booking` -> `['travel', 'travel.hotel', 'travel.hotel.booking']` */
export function capabilityPrefixes (name: string): string[] {
  assertCapability(name)
  const segments = name.split('.')
  return segments.map((_, i) => segments.slice(0, i + 1).join('.'))
}

/** Does `name` equal `prefix` or lie below it? (`travel.hotel` covers `travel.hotel.booking`) */
export function capabilityMatches (prefix: string, name: string): boolean {
  return name === prefix || name.startsWith(prefix + '.')
}

/**
 * The DHT key of a capability: CIDv1, raw codec, sha2-256 of the UTF-8 bytes
 * of `ioa:capability:v1:` followed by the name
 */
export async function capabilityCid (name: string): Promise<CID> {
  assertCapability(name)
  const digest = await sha256.digest(encoder.encode(`ioa:capability:v1:${name}`))
  return CID.createV1(RAW, digest)
}

/**
 * The DHT key under which an agent's hosting peer is found: CIDv1, raw codec,
 * sha2-256 of `ioa:agent:v1:` followed by the agent's did:key
 */
export async function agentCid (did: string): Promise<CID> {
  const digest = await sha256.digest(encoder.encode(`ioa:agent:v1:${did}`))
  return CID.createV1(RAW, digest)
}
