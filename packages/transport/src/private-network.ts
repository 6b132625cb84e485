/**
 * Private networks: a domain's own libp2p network, closed to every peer that
 * does not hold the domain's pre-shared key (libp2p's pnet connection
 * protector, `@libp2p/pnet`), with a DHT protocol id derived from that key.
 * Key format and rules: spec/interconnect.md, "Private domain networks".
 */
import { createHash, randomBytes } from 'node:crypto'
import { readFile, stat } from 'node:fs/promises'
import { CodedError } from './errors.js'
import type { ConnectionProtector } from '@libp2p/interface'

/** The first two lines of a key file (libp2p's swarm key format, version 1, base16) */
export const DOMAIN_KEY_HEADER = '/key/swarm/psk/1.0.0/\n/base16/\n'

/** Prefix of the DHT protocol id of a private network */
export const PRIVATE_DHT_PREFIX = '/ioa/kad/1.0.0/psk/'

/** A key file is 95 bytes; anything much larger is not one */
export const MAX_DOMAIN_KEY_FILE = 1024

const KEY_HEX = /^[0-9a-fA-F]{64}$/

/** A pre-shared key that is missing, malformed or unreadable */
export class InvalidDomainKeyError extends CodedError {
  static override name = 'InvalidDomainKeyError'
  static code = 'INVALID_DOMAIN_KEY'
  constructor (message: string, options?: ErrorOptions) {
    super(InvalidDomainKeyError.code, message, options)
  }
}

/** Where a node's pre-shared key comes from: the key itself, or a key file */
export interface PrivateNetworkInit {
  /**
   * The key: the text (or bytes) of a key file, or its 64 hex digits alone
   *
   * @default undefined (then `pskFile` is required)
   */
  psk?: string | Uint8Array

  /**
   * Path of a key file (`ioa key new --domain-psk --out <file>`); used when
   * `psk` is absent
   *
   * @default undefined
   */
  pskFile?: string
}

/** A parsed pre-shared key */
export interface DomainKey {
  /** The 32 key bytes */
  readonly key: Uint8Array
  /** The DHT protocol id of the network this key closes */
  readonly dhtProtocol: string
  /** The key in its canonical file form (what `@libp2p/pnet` reads) */
  readonly file: string
  /** The key file, when read from one, can be read by other users */
  readonly exposed?: boolean
}

/**
 * The DHT protocol id of a private network: `/ioa/kad/1.0.0/psk/` followed by
 * the first 8 bytes, in lower-case hex, of SHA-256 over the ASCII bytes of
 * `/ioa/kad/1.0.0/psk` and the 32 key bytes
 */
export function privateDhtProtocol (key: Uint8Array): string {
  const digest = createHash('sha256').update(PRIVATE_DHT_PREFIX.slice(0, -1)).update(key).digest()
  return PRIVATE_DHT_PREFIX + digest.subarray(0, 8).toString('hex')
}

/**
 * Parse a key: the text of a key file (three lines: `/key/swarm/psk/1.0.0/`,
 * `/base16/`, 64 hex digits; one trailing line break allowed; `\r\n` line
 * breaks accepted) or the 64 hex digits alone. Throws `InvalidDomainKeyError`.
 */
export function parseDomainKey (input: string | Uint8Array, where = 'the domain key'): DomainKey {
  const text = typeof input === 'string' ? input : new TextDecoder('utf-8', { fatal: false }).decode(input)
  if (text.length > MAX_DOMAIN_KEY_FILE) throw new InvalidDomainKeyError(`${where} is not a pre-shared key (longer than ${MAX_DOMAIN_KEY_FILE} bytes)`)
  const lines = text.replace(/\r?\n$/, '').split(/\r?\n/)
  let hex: string
  if (lines.length === 1) {
    hex = lines[0].trim()
  } else if (lines.length === 3 && lines[0] === '/key/swarm/psk/1.0.0/' && lines[1] === '/base16/') {
    hex = lines[2]
  } else {
    throw new InvalidDomainKeyError(`${where} is not a pre-shared key: expected "/key/swarm/psk/1.0.0/", "/base16/" and 64 hex digits on three lines (ioa key new --domain-psk)`)
  }
  if (!KEY_HEX.test(hex)) throw new InvalidDomainKeyError(`${where} is not a pre-shared key: the key must be 64 hex digits (32 bytes)`)
  const key = Uint8Array.from(Buffer.from(hex, 'hex'))
  if (key.every(b => b === 0)) throw new InvalidDomainKeyError(`${where} is all zeros: generate a key with ioa key new --domain-psk`)
  return { key, dhtProtocol: privateDhtProtocol(key), file: DOMAIN_KEY_HEADER + hex.toLowerCase() + '\n' }
}

/** Read and parse a key file (bounded); `exposed` says whether others may read it */
export async function readDomainKeyFile (path: string): Promise<DomainKey> {
  let bytes: Uint8Array
  let exposed: boolean
  try {
    const s = await stat(path)
    if (!s.isFile()) throw Object.assign(new Error('not a file'), { code: 'not a file' })
    if (s.size > MAX_DOMAIN_KEY_FILE) throw Object.assign(new Error('too large'), { code: `larger than ${MAX_DOMAIN_KEY_FILE} bytes` })
    exposed = (s.mode & 0o077) !== 0
    bytes = await readFile(path)
  } catch (err: any) {
    throw new InvalidDomainKeyError(`Cannot read the pre-shared key file ${path}: ${err?.code ?? err?.message ?? err}`, { cause: err })
  }
  return { ...parseDomainKey(bytes, `the key file ${path}`), exposed }
}

/** The key of a private-network option: its inline key, or its key file */
export async function loadDomainKey (init: PrivateNetworkInit): Promise<DomainKey> {
  if (init.psk != null) return parseDomainKey(init.psk)
  if (init.pskFile != null && init.pskFile !== '') return readDomainKeyFile(init.pskFile)
  throw new InvalidDomainKeyError('A private network needs a pre-shared key (psk) or a key file (pskFile)')
}

/** A new random key, as the text of a key file: the header, 32 random bytes in lower-case hex */
export function generateDomainKey (): string {
  return DOMAIN_KEY_HEADER + randomBytes(32).toString('hex') + '\n'
}

/**
 * The libp2p connection protector of a key (`@libp2p/pnet` is loaded here,
 * by the first node of a private network, not when the package is imported)
 */
export async function domainKeyProtector (key: DomainKey): Promise<() => ConnectionProtector> {
  const { preSharedKey } = await import('@libp2p/pnet')
  return preSharedKey({ psk: new TextEncoder().encode(key.file) })
}
