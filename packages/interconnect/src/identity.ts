/**
 * Agent identity: an Ed25519 key pair whose public key, rendered as a
 * `did:key`, is the agent id. One libp2p node may host many agents.
 */
import { BoundedMap } from '@ioa/transport/internal'
import { generateKeyPair, privateKeyFromProtobuf, privateKeyToProtobuf, publicKeyFromRaw } from '@libp2p/crypto/keys'
import { Key } from 'interface-datastore'
import { base58btc } from 'multiformats/bases/base58'
import { InvalidDidError } from './errors.js'
import type { Ed25519PrivateKey, PrivateKey, PublicKey } from '@libp2p/interface'
import type { Datastore } from 'interface-datastore'

/** Multicodec of an Ed25519 public key (`ed25519-pub`), as its varint bytes */
const ED25519_PUB_PREFIX = new Uint8Array([0xed, 0x01])
const DID_KEY_PREFIX = 'did:key:'

/** A `did:key` string of an Ed25519 key */
export type Did = string

/**
 * Render an Ed25519 public key as a `did:key`:
 * `did:key:` + base58btc multibase of (0xed 0x01 || 32-byte raw key)
 */
export function publicKeyToDid (key: PublicKey): Did {
  if (key.type !== 'Ed25519') {
    throw new InvalidDidError(`Only Ed25519 keys have a did:key here, got ${key.type}`)
  }
  const bytes = new Uint8Array(ED25519_PUB_PREFIX.length + key.raw.length)
  bytes.set(ED25519_PUB_PREFIX)
  bytes.set(key.raw, ED25519_PUB_PREFIX.length)
  return DID_KEY_PREFIX + base58btc.encode(bytes)
}

/**
 * How many parsed did:keys are kept (least recently used first out): a
 * requester names the same few agents in every call, and each parse is a
 * base58 decode and a key made (spec/interconnect.md, "Limits and defaults")
 */
const PARSED_DID_CACHE = 1_024

/** Valid did:keys parsed before (a malformed one is parsed, and refused, each time) */
const parsedDids = new BoundedMap<string, PublicKey>({ maxEntries: PARSED_DID_CACHE })

/**
 * Parse a `did:key` back to the Ed25519 public key it names
 */
export function didToPublicKey (did: string): PublicKey {
  const known = typeof did === 'string' ? parsedDids.get(did) : undefined
  if (known != null) return known
  const key = parseDid(did)
  parsedDids.set(did, key)
  return key
}

function parseDid (did: string): PublicKey {
  if (typeof did !== 'string' || !did.startsWith(DID_KEY_PREFIX + 'z') || did.length > 128) {
    throw new InvalidDidError(`Not an Ed25519 did:key: ${String(did).slice(0, 80)}`)
  }
  let bytes: Uint8Array
  try {
    bytes = base58btc.decode(did.slice(DID_KEY_PREFIX.length))
  } catch (err: any) {
    throw new InvalidDidError(`Bad multibase in did:key: ${err?.message ?? err}`)
  }
  if (bytes.length !== 34 || bytes[0] !== ED25519_PUB_PREFIX[0] || bytes[1] !== ED25519_PUB_PREFIX[1]) {
    throw new InvalidDidError('did:key is not an Ed25519 public key')
  }
  try {
    return publicKeyFromRaw(bytes.subarray(2))
  } catch (err: any) {
    throw new InvalidDidError(`Bad Ed25519 key in did:key: ${err?.message ?? err}`)
  }
}

/** Is this string a syntactically valid Ed25519 did:key? */
export function isDid (value: unknown): value is Did {
  if (typeof value !== 'string') return false
  try {
    didToPublicKey(value)
    return true
  } catch {
    // the parse failure is the answer: not a did:key
    return false
  }
}

/**
 * An identity that can sign: an agent, a user, or a domain
 */
export interface Identity {
  readonly did: Did
  readonly publicKey: PublicKey
  sign(data: Uint8Array): Promise<Uint8Array>
}

class KeyIdentity implements Identity {
  readonly did: Did
  readonly publicKey: PublicKey
  readonly privateKey: PrivateKey

  constructor (privateKey: PrivateKey) {
    this.privateKey = privateKey
    this.publicKey = privateKey.publicKey
    this.did = publicKeyToDid(privateKey.publicKey)
  }

  async sign (data: Uint8Array): Promise<Uint8Array> {
    return this.privateKey.sign(data)
  }
}

/** Create an identity from an existing Ed25519 private key */
export function identityFromPrivateKey (key: PrivateKey): Identity & { privateKey: PrivateKey } {
  if (key.type !== 'Ed25519') {
    throw new InvalidDidError(`Identities use Ed25519 keys, got ${key.type}`)
  }
  return new KeyIdentity(key)
}

/** Create a new random identity (not persisted) */
export async function createIdentity (): Promise<Identity & { privateKey: PrivateKey }> {
  return new KeyIdentity(await generateKeyPair('Ed25519'))
}

/**
 * Verify an Ed25519 signature by the key a DID names. Never throws for a bad
 * signature or a malformed DID: it returns `false`.
 */
export async function verifyByDid (did: Did, data: Uint8Array, signature: Uint8Array): Promise<boolean> {
  try {
    return await didToPublicKey(did).verify(data, signature)
  } catch {
    // a malformed DID verifies nothing (documented above: never throws)
    return false
  }
}

/** Names of keys in a keystore: letters, digits, `.`, `_`, `-` */
const NAME = /^[A-Za-z0-9._-]{1,64}$/

/**
 * Where a host keeps its agents' keys by local name (`spec/interconnect.md`
 * §1.3): the same name gives the same identity after a restart
 */
export interface AgentKeyStore {
  /** Load the identity stored under `name`, or create and store a new one */
  loadOrCreate(name: string, options?: { signal?: AbortSignal }): Promise<Identity & { privateKey: PrivateKey }>
}

/**
 * Agent keys kept in the node's datastore, so that an agent hosted under the
 * same name after a restart has the same id. Keys are stored unencrypted:
 * `@ioa/node` passes an encrypted store instead (`InterconnectInit.keys`).
 */
export class KeyStore implements AgentKeyStore {
  private readonly datastore: Datastore
  private readonly prefix: string
  /** loads in progress, so concurrent calls for one name share one key */
  private readonly pending = new Map<string, Promise<Identity & { privateKey: PrivateKey }>>()

  constructor (datastore: Datastore, prefix = '/ioa/agent-keys') {
    this.datastore = datastore
    this.prefix = prefix
  }

  private key (name: string): Key {
    if (!NAME.test(name)) {
      throw new InvalidDidError(`Invalid key name "${name}"`)
    }
    return new Key(`${this.prefix}/${name}`)
  }

  /** Load the identity stored under `name`, or create and store a new one */
  async loadOrCreate (name: string, options?: { signal?: AbortSignal }): Promise<Identity & { privateKey: PrivateKey }> {
    const running = this.pending.get(name)
    if (running != null) return running
    const p = this.load(name, options)
    this.pending.set(name, p)
    try {
      return await p
    } finally {
      this.pending.delete(name)
    }
  }

  private async load (name: string, options?: { signal?: AbortSignal }): Promise<Identity & { privateKey: PrivateKey }> {
    const key = this.key(name)
    if (await this.datastore.has(key, options)) {
      const bytes = await this.datastore.get(key, options)
      return identityFromPrivateKey(privateKeyFromProtobuf(bytes) as Ed25519PrivateKey)
    }
    const identity = await createIdentity()
    await this.datastore.put(key, privateKeyToProtobuf(identity.privateKey), options)
    return identity
  }

  async has (name: string): Promise<boolean> {
    return this.datastore.has(this.key(name))
  }

  async delete (name: string): Promise<void> {
    await this.datastore.delete(this.key(name))
  }
}

/**
 * The bytes a signature covers: a domain-separation prefix (such as
 * `ioa:card:v1\n`) followed by the encoded payload, so a signature made for
 * one kind of record can never be replayed as another
 */
export function domainSeparated (prefix: Uint8Array, body: Uint8Array): Uint8Array {
  const out = new Uint8Array(prefix.length + body.length)
  out.set(prefix)
  out.set(body, prefix.length)
  return out
}
