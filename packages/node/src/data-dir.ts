/**
 * Opening a node's data directory (a LevelDB database) and telling apart why
 * it does not open: held by another process (`DATA_DIR_LOCKED`), damaged
 * (`DATA_DIR_CORRUPT`, naming the file), or unusable (`DATA_DIR_UNAVAILABLE`).
 * A directory that holds state but no node key is refused
 * (`IDENTITY_MISSING`) unless a new identity is asked for: a node never
 * replaces its identity silently.
 *
 * LevelDB, asked to create a missing database, treats a directory whose
 * `CURRENT` file is gone as a new one and deletes the old tables; so the
 * directory is looked at first, and an existing database is opened with
 * `createIfMissing: false`.
 */
import { mkdir, readFile, readdir, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { defaultLogger } from '@libp2p/logger'
import { MemoryDatastore } from 'datastore-core'
import { Key } from 'interface-datastore'
import { DataDirCorruptError, DataDirLockedError, DataDirUnavailableError, IdentityMissingError } from './errors.js'
import type { ComponentLogger, Logger } from '@libp2p/interface'
import type { LevelDatastore } from 'datastore-level'
import type { Datastore } from 'interface-datastore'

export interface OpenDataDirOptions {
  /** The config field or flag that names the directory, the `field` of the errors @default 'dataDir' */
  field?: string
  logger?: ComponentLogger
}

/** Files LevelDB writes that hold data: tables, write-ahead logs, manifests */
const LEVEL_DATA = /^(\d+\.(ldb|sst|log)|MANIFEST-\d+)$/
/** What `CURRENT` holds: the name of the current manifest and a newline */
const CURRENT_TEXT = /^MANIFEST-\d+\n$/
/** Most bytes of `CURRENT` read (it holds ~16) */
const MAX_CURRENT = 256
/** A file named in a LevelDB error message */
const NAMED_FILE = /(\d+\.(?:ldb|sst|log)|MANIFEST-\d+|CURRENT|LOCK)\b/

const RECOVER = 'Nothing was changed: restore the directory from a backup, or move it away to start afresh (a new identity)'

/** The node key in the encrypted layout and in the earlier plaintext one (`spec/interconnect.md` §1.3) */
const NODE_KEYS = [new Key('/ioa/keystore/chain/pkcs8/self'), new Key('/pkcs8/self')]

/**
 * The manifest of the LevelDB database in `dir`, or undefined when there is
 * none (absent or new); throws `DataDirCorruptError` for a damaged one
 */
async function inspect (dir: string, field: string): Promise<string | undefined> {
  let names: string[]
  try {
    names = await readdir(dir)
  } catch (err: any) {
    if (err?.code === 'ENOENT') return undefined
    throw new DataDirUnavailableError(`Cannot read the data directory ${dir}: ${err?.code ?? err?.message ?? err}`, { dir, field, cause: err })
  }
  const data = names.filter(n => LEVEL_DATA.test(n))
  const manifests = data.filter(n => n.startsWith('MANIFEST-')).sort((a, b) => Number(a.slice(9)) - Number(b.slice(9)))
  if (!names.includes('CURRENT')) {
    if (data.length === 0) return undefined
    const newest = manifests.at(-1)
    throw new DataDirCorruptError(`The data directory ${dir} is damaged: its file CURRENT is missing (LevelDB would start an empty database there and delete the old tables). ${
      newest != null ? `If ${newest} is intact, \`printf '${newest}\\n' > ${join(dir, 'CURRENT')}\` restores it; else ${RECOVER.charAt(0).toLowerCase()}${RECOVER.slice(1)}` : RECOVER}`, { dir, file: 'CURRENT', field })
  }
  let current: string
  try {
    const bytes = await readFile(join(dir, 'CURRENT'))
    current = bytes.subarray(0, MAX_CURRENT).toString('latin1')
  } catch (err: any) {
    throw new DataDirUnavailableError(`Cannot read ${join(dir, 'CURRENT')}: ${err?.code ?? err?.message ?? err}`, { dir, file: 'CURRENT', field, cause: err })
  }
  if (!CURRENT_TEXT.test(current)) {
    throw new DataDirCorruptError(`The data directory ${dir} is damaged: its file CURRENT is truncated or overwritten (${current.length} bytes, not "MANIFEST-<number>" and a newline)${
      manifests.length > 0 ? `; the newest manifest is ${manifests.at(-1)}` : ''}. ${RECOVER}`, { dir, file: 'CURRENT', field })
  }
  const manifest = current.trim()
  if (!names.includes(manifest)) {
    throw new DataDirCorruptError(`The data directory ${dir} is damaged: its manifest ${manifest}, named by CURRENT, is missing. ${RECOVER}`, { dir, file: manifest, field })
  }
  const size = await stat(join(dir, manifest)).then(s => s.size, () => -1)
  if (size === 0) {
    throw new DataDirCorruptError(`The data directory ${dir} is damaged: its manifest ${manifest} is empty. ${RECOVER}`, { dir, file: manifest, field })
  }
  return manifest
}

/** The typed error for a LevelDB open failure */
function openError (dir: string, err: unknown, field: string, manifest: string | undefined): Error {
  // abstract-level wraps the binding's error, which has the code, as `cause`
  const cause = ((err as { cause?: unknown })?.cause ?? err) as { code?: unknown, message?: unknown }
  const code = typeof cause?.code === 'string' ? cause.code : ''
  const text = String(cause?.message ?? cause)
  // LevelDB calls the manifest "descriptor" and does not name it
  const file = NAMED_FILE.exec(text)?.[1] ?? (/descriptor/.test(text) ? manifest : undefined)
  if (code === 'LEVEL_LOCKED') {
    return new DataDirLockedError(`The data directory ${dir} is in use by another process (its LevelDB lock ${join(dir, 'LOCK')} is held): stop that process (one ioa process per directory), or use another directory`, { dir, file: 'LOCK', field, cause: err })
  }
  if (code === 'LEVEL_CORRUPTION' || (code === 'LEVEL_IO_ERROR' && /No such file/i.test(text)) || /create_if_missing is false/.test(text)) {
    return new DataDirCorruptError(`The data directory ${dir} is damaged${file != null ? ` (${file})` : ''}: ${text.slice(0, 300)}. ${RECOVER}`, { dir, file, field, cause: err })
  }
  return new DataDirUnavailableError(`Cannot open the data directory ${dir}: ${text.slice(0, 300)}`, { dir, file, field, cause: err })
}

/**
 * Open (or create, mode 0700) the LevelDB data directory `dir`. Throws
 * `DataDirLockedError`, `DataDirCorruptError` (the directory is not
 * changed) or `DataDirUnavailableError`.
 */
export async function openDataDir (dir: string, options: OpenDataDirOptions = {}): Promise<LevelDatastore> {
  const field = options.field ?? 'dataDir'
  const log = (options.logger ?? defaultLogger()).forComponent('ioa:node:data-dir')
  try {
    const manifest = await inspect(dir, field)
    const existing = manifest != null
    if (!existing) {
      try {
        await mkdir(dir, { recursive: true, mode: 0o700 })
      } catch (err: any) {
        throw new DataDirUnavailableError(`Cannot create the data directory ${dir}: ${err?.code ?? err?.message ?? err}`, { dir, field, cause: err })
      }
    }
    // LevelDB (its native binding included) loads for a node that keeps state on disk, not at import
    const { LevelDatastore } = await import('datastore-level')
    const store = new LevelDatastore(dir)
    try {
      // the database itself, not `store.open()`: that keeps only the message of LevelDB's error
      await store.db.open({ createIfMissing: !existing, compression: false })
    } catch (err) {
      throw openError(dir, err, field, manifest)
    }
    log('opened %s%s', dir, existing ? '' : ' (new)')
    return store
  } catch (err: any) {
    log.error('cannot open %s: %s (%s)', dir, err?.message ?? err, err?.code ?? 'ERROR')
    throw err
  }
}

export interface CheckIdentityOptions {
  /** The data directory, for messages */
  dir: string
  /** Let a directory with state but no node key get a new identity @default false */
  newIdentity?: boolean
  field?: string
  log: Logger
}

/**
 * Refuse (`IdentityMissingError`) a datastore that holds state but no node
 * key, unless `newIdentity`: opening it would give the node a new peer id
 */
export async function checkIdentity (datastore: Datastore, options: CheckIdentityOptions): Promise<void> {
  for (const key of NODE_KEYS) {
    if (await datastore.has(key)) return
  }
  let entries = 0
  for await (const _ of datastore.queryKeys({ limit: 1 })) entries++
  if (entries === 0) return
  if (options.newIdentity === true) {
    options.log('%s holds state but no node key: a new identity is created (newIdentity)', options.dir)
    return
  }
  options.log.error('%s holds state but no node key: refused without newIdentity', options.dir)
  throw new IdentityMissingError(`The data directory ${options.dir} holds state but no node key: starting would give the node a new peer id (and its agents new ids where their keys are gone too). Restore the directory from a backup, or pass --new-identity (newIdentity: true) to start with a new identity`, { dir: options.dir, field: options.field ?? 'dataDir' })
}

/**
 * The datastore of a node (or of a gateway's inner node): the caller's, a
 * data directory (opened here and checked for its identity), or memory
 */
export async function openNodeStore (init: {
  dataDir?: string
  datastore?: Datastore
  newIdentity?: boolean
  /** The node key is given (not the store's): the store need not hold one */
  keyGiven?: boolean
  logger?: ComponentLogger
}): Promise<{ datastore: Datastore, owned: boolean }> {
  if (init.datastore != null) return { datastore: init.datastore, owned: false }
  if (init.dataDir == null) return { datastore: new MemoryDatastore(), owned: false }
  const store = await openDataDir(init.dataDir, { logger: init.logger })
  if (init.keyGiven !== true) {
    const log = (init.logger ?? defaultLogger()).forComponent('ioa:node:data-dir')
    try {
      await checkIdentity(store, { dir: init.dataDir, newIdentity: init.newIdentity, log })
    } catch (err) {
      // the refusal is what the caller needs; a close that fails too is only logged
      await store.close().catch((closeErr: unknown) => { log.error('could not close %s after refusing it - %e', init.dataDir, closeErr) })
      throw err
    }
  }
  return { datastore: store, owned: true }
}
