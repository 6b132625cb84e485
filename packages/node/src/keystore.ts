/**
 * Keys at rest: the node's peer key and its agents' keys, encrypted in the
 * node's datastore by `@libp2p/keychain` with a passphrase, decrypted once
 * per start and then kept in memory. A plaintext data directory of the
 * earlier layout is migrated on the first start with a passphrase. Layout
 * and rules: `spec/interconnect.md` §1.3.
 */
import { randomBytes } from 'node:crypto'
import { identityFromPrivateKey } from '@ioa/interconnect'
import { generateKeyPair, privateKeyFromProtobuf } from '@libp2p/crypto/keys'
import { defaultLogger } from '@libp2p/logger'
import { MemoryDatastore, NamespaceDatastore } from 'datastore-core'
import { Key } from 'interface-datastore'
import { KeyStoreError } from './errors.js'
import type { AgentKeyStore, Identity } from '@ioa/interconnect'
import type { ComponentLogger, Logger, PrivateKey } from '@libp2p/interface'
import type { DEKConfig, Keychain, KeychainComponents, KeychainInit } from '@libp2p/keychain'
import type { Datastore } from 'interface-datastore'

export { KeyStoreError }

/** The peer key option of a node: `override` (a key given in `transport.privateKey`) wins over the key store's */
export function nodeKeyOption (keys: EncryptedKeyStore | undefined, override?: PrivateKey): { privateKey?: PrivateKey } {
  const privateKey = override ?? keys?.nodeKey
  return privateKey != null ? { privateKey } : {}
}

/** Fixed parameters of the key store (`spec/interconnect.md` §10) */
export const KEYSTORE_DEFAULTS = Object.freeze({
  /** Shortest passphrase (NIST SP 800-132, as `@libp2p/keychain` enforces) */
  minPassphraseLength: 20,
  /** PBKDF2 iterations deriving the keychain's key from the passphrase */
  iterationCount: 10_000,
  /** Random salt bytes, one salt per datastore */
  saltLength: 24,
  /** Derived key bytes */
  keyLength: 64,
  hash: 'sha2-512'
})

export interface KeyStoreInit {
  /**
   * The passphrase that encrypts the keys (at least 20 characters). The
   * `ioa start` path reads it from `keyStore.passphraseFile` or
   * `$IOA_KEY_PASSPHRASE`.
   *
   * @default undefined
   */
  passphrase?: string

  /**
   * Allow a data directory without a passphrase: its keys are then stored
   * unencrypted (the earlier layout). For test keys only; a passphrase, when
   * given, is used anyway.
   *
   * @default false
   */
  insecurePlaintext?: boolean

  /**
   * Where the passphrase came from (`keyStore.passphraseFile`,
   * `$IOA_KEY_PASSPHRASE`): the `field` of a `KeyStoreError` about it
   *
   * @default undefined
   */
  source?: string
}

export interface OpenKeyStoreOptions extends KeyStoreInit {
  /** The datastore is a data directory the node opened (not memory, not the caller's) */
  persistent: boolean
  /** Names the store in messages (the data directory) */
  where: string
  logger?: ComponentLogger
}

/** What a running node reports about its key store (`IoaNode.keyStore`) */
export interface KeyStoreStatus {
  /** The keys are encrypted at rest */
  encrypted: boolean
  /** What opening the store cost at start-up, ms (0 when not encrypted) */
  openedIn: number
  /** Plaintext keys of the earlier layout moved into the store at this start */
  migrated: number
}

/** Datastore key of the store's PBKDF2 parameters; its presence marks an encrypted store */
export const KEYSTORE_PARAMS_KEY = '/ioa/keystore/params'
/** `@libp2p/keychain`, loaded when a key store first needs it (not with the package) */
async function loadKeychain (): Promise<(init?: KeychainInit) => (components: KeychainComponents) => Keychain> {
  return (await import('@libp2p/keychain')).keychain
}

/** Namespace of the keychain's entries (`<ns>/pkcs8/<name>`, `<ns>/info/<name>`) */
export const KEYSTORE_NAMESPACE = '/ioa/keystore/chain'
/** Keychain name of the node's peer key */
const NODE_KEY = 'self'
/** The earlier, unencrypted layout: agent keys as protobuf under this prefix… */
const LEGACY_AGENT_PREFIX = '/ioa/agent-keys'
/** …and the peer key in libp2p's keychain without a passphrase */
const LEGACY_SELF = new Key('/pkcs8/self')
const LEGACY_SELF_INFO = new Key('/info/self')
const NAME = /^[A-Za-z0-9._-]{1,64}$/

/** Keychain name of an agent key: hex keeps every allowed name a valid keychain name */
function agentEntry (name: string): string {
  return `agent-${Buffer.from(name, 'utf8').toString('hex')}`
}

function agentName (entry: string): string | undefined {
  return entry.startsWith('agent-') ? Buffer.from(entry.slice(6), 'hex').toString('utf8') : undefined
}

interface StoredParams extends DEKConfig {
  version: 1
}

/** Parameters of a new store: the defaults and a new random salt */
function freshParams (): StoredParams {
  return {
    version: 1,
    salt: randomBytes(KEYSTORE_DEFAULTS.saltLength).toString('base64'),
    iterationCount: KEYSTORE_DEFAULTS.iterationCount,
    keyLength: KEYSTORE_DEFAULTS.keyLength,
    hash: KEYSTORE_DEFAULTS.hash
  }
}

async function readParams (datastore: Datastore, where: string): Promise<StoredParams | undefined> {
  const key = new Key(KEYSTORE_PARAMS_KEY)
  if (!await datastore.has(key)) return undefined
  let p: Partial<StoredParams>
  try {
    p = JSON.parse(Buffer.from(await datastore.get(key)).toString('utf8'))
  } catch (err) {
    throw new KeyStoreError('KEYSTORE_DAMAGED', `The key store parameters of ${where} are unreadable`, { cause: err })
  }
  if (p?.version !== 1 || typeof p.salt !== 'string' || p.salt.length < 16 || !Number.isInteger(p.iterationCount) ||
    (p.iterationCount ?? 0) < 1000 || !Number.isInteger(p.keyLength) || (p.keyLength ?? 0) < 14 || p.hash !== 'sha2-512') {
    throw new KeyStoreError('KEYSTORE_DAMAGED', `The key store parameters of ${where} are not version 1 parameters`)
  }
  return p as StoredParams
}

/**
 * The node's keys, encrypted in its datastore. The peer key is decrypted
 * when the store opens; an agent key when it is first asked for; both stay
 * in memory until the node stops.
 */
export class EncryptedKeyStore implements AgentKeyStore {
  /** Cost of `open`, ms: key derivation, decryption, migration */
  openedIn = 0
  /** Plaintext keys of the earlier layout moved into the store by `open` */
  migrated = 0
  private readonly cache = new Map<string, Promise<Identity & { privateKey: PrivateKey }>>()

  private constructor (
    private readonly chain: Keychain,
    private readonly entries: Datastore,
    private readonly log: Logger,
    private readonly where: string,
    /** The node's peer key */
    readonly nodeKey: PrivateKey
  ) {}

  /**
   * Open (or create) the encrypted store of `datastore`. Throws
   * `KeyStoreError` `PASSPHRASE_TOO_SHORT`, `WRONG_PASSPHRASE` (the peer key
   * does not decrypt) or `KEYSTORE_DAMAGED`.
   */
  static async open (datastore: Datastore, options: OpenKeyStoreOptions & { passphrase: string }): Promise<EncryptedKeyStore> {
    const started = Date.now()
    const logger = options.logger ?? defaultLogger()
    const log = logger.forComponent('ioa:node:keys')
    if (options.passphrase.length < KEYSTORE_DEFAULTS.minPassphraseLength) {
      throw new KeyStoreError('PASSPHRASE_TOO_SHORT', `The key store passphrase has ${options.passphrase.length} characters: it needs at least ${KEYSTORE_DEFAULTS.minPassphraseLength}`, { field: options.source })
    }
    let params = await readParams(datastore, options.where)
    if (params == null) {
      params = freshParams()
      await datastore.put(new Key(KEYSTORE_PARAMS_KEY), Buffer.from(JSON.stringify(params)))
      log('created an encrypted key store in %s', options.where)
    }
    const { version: _, ...dek } = params
    const entries = new NamespaceDatastore(datastore, new Key(KEYSTORE_NAMESPACE))
    // PBKDF2 of the passphrase: the one slow step (~150 ms), once per start
    const chain = (await loadKeychain())({ pass: options.passphrase, dek })({ datastore: entries, logger })

    let nodeKey: PrivateKey | undefined
    if (await entries.has(new Key(`/pkcs8/${NODE_KEY}`))) {
      try {
        nodeKey = await chain.exportKey(NODE_KEY)
      } catch (err) {
        log.error('the node key of %s does not decrypt - %e', options.where, err)
        throw new KeyStoreError('WRONG_PASSPHRASE', `The keys in ${options.where} do not decrypt with this passphrase (wrong passphrase, or a damaged key store)`, { field: options.source, cause: err })
      }
    }
    const legacy = await migrateLegacy(datastore, chain, entries, logger, log, options.where)
    nodeKey ??= legacy.nodeKey
    if (nodeKey == null) {
      nodeKey = await generateKeyPair('Ed25519')
      await chain.importKey(NODE_KEY, nodeKey)
    }
    const store = new EncryptedKeyStore(chain, entries, log, options.where, nodeKey)
    store.migrated = legacy.count
    store.openedIn = Date.now() - started
    log('opened the key store of %s in %d ms', options.where, store.openedIn)
    return store
  }

  /** The agent identity stored under `name`, or a new one stored encrypted; decrypted once, then from memory */
  async loadOrCreate (name: string, options?: { signal?: AbortSignal }): Promise<Identity & { privateKey: PrivateKey }> {
    let identity = this.cache.get(name)
    if (identity == null) {
      // the promise is the cache entry, so concurrent calls share one decryption
      identity = this.load(name, options)
      this.cache.set(name, identity)
      // handled: a failed load is not cached (the caller gets the error from `identity`)
      identity.catch(() => { this.cache.delete(name) })
    }
    return identity
  }

  private async load (name: string, options?: { signal?: AbortSignal }): Promise<Identity & { privateKey: PrivateKey }> {
    if (!NAME.test(name)) throw new KeyStoreError('INVALID_KEY_NAME', `Invalid key name "${name.slice(0, 80)}": letters, digits, ".", "_" or "-" (1-64)`)
    options?.signal?.throwIfAborted()
    const entry = agentEntry(name)
    let key: PrivateKey
    if (await this.entries.has(new Key(`/pkcs8/${entry}`))) {
      try {
        key = await this.chain.exportKey(entry)
      } catch (err) {
        this.log.error('agent key %s of %s does not decrypt - %e', name, this.where, err)
        throw new KeyStoreError('KEYSTORE_DAMAGED', `The key of agent "${name}" in ${this.where} does not decrypt`, { cause: err })
      }
    } else {
      key = await generateKeyPair('Ed25519')
      await this.chain.importKey(entry, key)
      this.log('stored a new key for agent %s', name)
    }
    return identityFromPrivateKey(key)
  }

  /** Names of the agent keys in the store */
  async agentNames (): Promise<string[]> {
    const names: string[] = []
    for (const info of await this.chain.listKeys()) {
      const n = agentName(info.name)
      if (n != null) names.push(n)
    }
    return names.sort()
  }
}

/** The keys of the earlier unencrypted layout found in a datastore */
interface LegacyKeys {
  nodeKey?: PrivateKey
  agents: Array<{ name: string, key: PrivateKey, entry: Key }>
  /** Their datastore entries */
  entries: Key[]
}

/** Read the keys of the earlier unencrypted layout (nothing is changed) */
async function readLegacy (datastore: Datastore, logger: ComponentLogger, where: string): Promise<LegacyKeys> {
  const out: LegacyKeys = { agents: [], entries: [] }
  if (await datastore.has(LEGACY_SELF)) {
    try {
      // libp2p's own layout: the keychain with no passphrase
      out.nodeKey = await (await loadKeychain())({})({ datastore, logger }).exportKey('self')
    } catch (err) {
      throw new KeyStoreError('KEYSTORE_DAMAGED', `The unencrypted node key in ${where} is unreadable`, { cause: err })
    }
    out.entries.push(LEGACY_SELF, LEGACY_SELF_INFO)
  }
  for await (const { key, value } of datastore.query({ prefix: LEGACY_AGENT_PREFIX + '/' })) {
    const name = key.toString().slice(LEGACY_AGENT_PREFIX.length + 1)
    try {
      out.agents.push({ name, key: privateKeyFromProtobuf(value), entry: key })
    } catch (err) {
      throw new KeyStoreError('KEYSTORE_DAMAGED', `The unencrypted key of agent "${name.slice(0, 80)}" in ${where} is unreadable`, { cause: err })
    }
    out.entries.push(key)
  }
  return out
}

/**
 * Move the keys of the earlier unencrypted layout into the encrypted store,
 * then delete them and compact the database so their bytes leave its files.
 * Safe to repeat after a crash: a key already in the store is not imported
 * again.
 */
async function migrateLegacy (
  datastore: Datastore, chain: Keychain, entries: Datastore, logger: ComponentLogger, log: Logger, where: string
): Promise<{ nodeKey?: PrivateKey, count: number }> {
  const legacy = await readLegacy(datastore, logger, where)
  const count = (legacy.nodeKey != null ? 1 : 0) + legacy.agents.length
  if (count === 0) return { count }
  if (legacy.nodeKey != null && !await entries.has(new Key(`/pkcs8/${NODE_KEY}`))) await chain.importKey(NODE_KEY, legacy.nodeKey)
  for (const a of legacy.agents) {
    const entry = agentEntry(a.name)
    if (NAME.test(a.name) && !await entries.has(new Key(`/pkcs8/${entry}`))) await chain.importKey(entry, a.key)
  }
  const batch = datastore.batch()
  for (const k of legacy.entries) batch.delete(k)
  await batch.commit()
  const compacted = await compact(datastore)
  log('migrated %d unencrypted key(s) of %s into the encrypted key store; the plaintext entries are deleted%s', count, where,
    compacted ? ' and the database compacted' : ' (their bytes stay in the database files until LevelDB compacts them)')
  return { nodeKey: legacy.nodeKey, count }
}

/** Compact a LevelDB datastore so deleted values leave its files; false when the store is not one */
async function compact (datastore: Datastore): Promise<boolean> {
  const db = (datastore as { db?: { compactRange?: (start: string, end: string) => Promise<void> } }).db
  if (typeof db?.compactRange !== 'function') return false
  // every datastore key starts with '/', and '0' sorts right after it
  await db.compactRange('/', '0')
  return true
}

/**
 * The key store of a node's datastore, by the rules of `spec/interconnect.md`
 * §1.3: with a passphrase, the encrypted store (created, opened or migrated
 * to); without one, `undefined` (the unencrypted layout) for memory or a
 * caller's datastore, and for a data directory only with
 * `insecurePlaintext`; an encrypted store without its passphrase is refused
 * (`PASSPHRASE_REQUIRED`), never replaced by a new identity.
 */
export async function openKeyStore (datastore: Datastore, options: OpenKeyStoreOptions): Promise<EncryptedKeyStore | undefined> {
  const { passphrase } = options
  if (passphrase != null) return EncryptedKeyStore.open(datastore, { ...options, passphrase })
  const log = (options.logger ?? defaultLogger()).forComponent('ioa:node:keys')
  if (await datastore.has(new Key(KEYSTORE_PARAMS_KEY))) {
    throw new KeyStoreError('PASSPHRASE_REQUIRED', `The keys in ${options.where} are encrypted: give the passphrase (keyStore.passphraseFile in the config, or $IOA_KEY_PASSPHRASE)`, { field: options.source })
  }
  if (options.persistent && options.insecurePlaintext !== true) {
    throw new KeyStoreError('PASSPHRASE_REQUIRED', `${options.where} would hold the node's keys: give a passphrase to encrypt them (keyStore.passphraseFile in the config, or $IOA_KEY_PASSPHRASE), or set keyStore.insecurePlaintext for test keys`, { field: options.source })
  }
  if (options.persistent) log('keys of %s are stored UNENCRYPTED (insecurePlaintext)', options.where)
  else log.trace('keys of %s are not encrypted (no passphrase)', options.where)
  return undefined
}

export interface ChangePassphraseOptions extends Omit<OpenKeyStoreOptions, 'persistent' | 'insecurePlaintext' | 'passphrase'> {
  /** The store's passphrase */
  passphrase: string
  /** The passphrase that replaces it (at least 20 characters) */
  newPassphrase: string
  /** Where the new passphrase came from, the `field` of an error about it */
  newSource?: string
}

/**
 * Re-encrypt every key of an encrypted store under a new passphrase and a
 * new salt. The new entries are prepared aside and written, with the new
 * parameters, in one batch: a crash leaves the store under the old
 * passphrase or the new one, never half of each. Resolves to the number of
 * keys. `NOT_ENCRYPTED` for a store of the unencrypted layout (start it with
 * a passphrase first).
 */
export async function changePassphrase (datastore: Datastore, options: ChangePassphraseOptions): Promise<number> {
  const logger = options.logger ?? defaultLogger()
  if (!await datastore.has(new Key(KEYSTORE_PARAMS_KEY))) {
    throw new KeyStoreError('NOT_ENCRYPTED', `The keys in ${options.where} are not encrypted: start the node once with a passphrase to encrypt them`)
  }
  if (options.newPassphrase.length < KEYSTORE_DEFAULTS.minPassphraseLength) {
    throw new KeyStoreError('PASSPHRASE_TOO_SHORT', `The new passphrase has ${options.newPassphrase.length} characters: it needs at least ${KEYSTORE_DEFAULTS.minPassphraseLength}`, { field: options.newSource })
  }
  const store = await EncryptedKeyStore.open(datastore, { ...options, persistent: true })
  const params = freshParams()
  const { version: _, ...dek } = params
  const aside = new MemoryDatastore()
  const chain = (await loadKeychain())({ pass: options.newPassphrase, dek })({ datastore: aside, logger })
  await chain.importKey(NODE_KEY, store.nodeKey)
  const names = await store.agentNames()
  for (const name of names) await chain.importKey(agentEntry(name), (await store.loadOrCreate(name)).privateKey)
  const written = new Map<string, Uint8Array>()
  for await (const { key, value } of aside.query({})) written.set(KEYSTORE_NAMESPACE + key.toString(), value)
  const batch = datastore.batch()
  for await (const key of datastore.queryKeys({ prefix: KEYSTORE_NAMESPACE + '/' })) {
    if (!written.has(key.toString())) batch.delete(key)
  }
  for (const [key, value] of written) batch.put(new Key(key), value)
  batch.put(new Key(KEYSTORE_PARAMS_KEY), Buffer.from(JSON.stringify(params)))
  await batch.commit()
  await compact(datastore)
  logger.forComponent('ioa:node:keys')('re-encrypted %d key(s) of %s under a new passphrase', names.length + 1, options.where)
  return names.length + 1
}

/** What a datastore's key store holds (`ioa key list`) */
export interface KeyStoreListing {
  encrypted: boolean
  /** The peer id of the node's key (its public key's multihash, base58btc), when it has one */
  peerId?: string
  agents: Array<{ key: string, did: string }>
}

/**
 * List the keys of a datastore without changing an unencrypted one: an
 * encrypted store needs its passphrase (`PASSPHRASE_REQUIRED`,
 * `WRONG_PASSPHRASE` otherwise)
 */
export async function listKeys (datastore: Datastore, options: Omit<OpenKeyStoreOptions, 'persistent' | 'insecurePlaintext'>): Promise<KeyStoreListing> {
  const logger = options.logger ?? defaultLogger()
  if (!await datastore.has(new Key(KEYSTORE_PARAMS_KEY))) {
    const legacy = await readLegacy(datastore, logger, options.where)
    return {
      encrypted: false,
      ...(legacy.nodeKey != null ? { peerId: legacy.nodeKey.publicKey.toString() } : {}),
      agents: legacy.agents.map(a => ({ key: a.name, did: identityFromPrivateKey(a.key).did })).sort((a, b) => a.key < b.key ? -1 : 1)
    }
  }
  const store = await openKeyStore(datastore, { ...options, persistent: true })
  if (store == null) throw new KeyStoreError('PASSPHRASE_REQUIRED', `The keys in ${options.where} are encrypted: give the passphrase`, { field: options.source })
  const agents: KeyStoreListing['agents'] = []
  for (const key of await store.agentNames()) agents.push({ key, did: (await store.loadOrCreate(key)).did })
  return { encrypted: true, peerId: store.nodeKey.publicKey.toString(), agents }
}
