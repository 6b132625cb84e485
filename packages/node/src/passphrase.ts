/**
 * Where a node started from a config gets its key store passphrase: the
 * file the config's `keyStore.passphraseFile` names, else the file
 * `$IOA_KEY_PASSPHRASE_FILE` names, else `$IOA_KEY_PASSPHRASE` itself
 * (spec/interconnect.md §1.3).
 */
import { readFile, stat } from 'node:fs/promises'
import { resolve } from 'node:path'
import { ConfigError } from './config.js'
import type { NodeConfig } from './config.js'
import type { KeyStoreInit } from './keystore.js'

/** The environment variable holding the passphrase itself */
export const PASSPHRASE_ENV = 'IOA_KEY_PASSPHRASE'
/** The environment variable naming a file that holds the passphrase */
export const PASSPHRASE_FILE_ENV = 'IOA_KEY_PASSPHRASE_FILE'

/** A passphrase file is one line; anything much larger is not one */
const MAX_PASSPHRASE_FILE = 4096

/** Key store options with what the operator should hear about them */
export interface KeyStoreSource extends KeyStoreInit {
  /** Set when the passphrase file can be read by other users (group or other bits of its mode) */
  exposed?: string
}

/**
 * The key store options of a config: its passphrase and where it came from.
 * Throws `ConfigError` (field `keyStore.passphraseFile`, or the variable's
 * name) when a passphrase file cannot be read or is empty.
 */
export async function keyStoreFromConfig (config: NodeConfig, env: Record<string, string | undefined> = process.env, cwd = process.cwd()): Promise<KeyStoreSource> {
  const insecurePlaintext = config.keyStore?.insecurePlaintext === true
  const file = config.keyStore?.passphraseFile
  if (file != null) return { ...await readPassphraseFile(file, 'keyStore.passphraseFile'), insecurePlaintext }
  return { ...await passphraseFromEnv(env, cwd), insecurePlaintext }
}

/**
 * The passphrase of the environment: the file `$IOA_KEY_PASSPHRASE_FILE`
 * names (relative to `cwd`), else `$IOA_KEY_PASSPHRASE`; none when neither is
 * set
 */
export async function passphraseFromEnv (env: Record<string, string | undefined>, cwd = process.cwd()): Promise<KeyStoreSource> {
  const file = env[PASSPHRASE_FILE_ENV]
  if (file != null && file !== '') return readPassphraseFile(resolve(cwd, file), `$${PASSPHRASE_FILE_ENV}`)
  const passphrase = env[PASSPHRASE_ENV]
  return passphrase != null && passphrase !== '' ? { passphrase, source: `$${PASSPHRASE_ENV}` } : {}
}

/**
 * The passphrase in a file (its content without one trailing newline);
 * `field` names the config field, flag or variable in the `ConfigError` of a
 * file that cannot be read or is empty
 */
export async function readPassphraseFile (file: string, field: string): Promise<KeyStoreSource & { passphrase: string }> {
  let text: string
  let exposed: string | undefined
  try {
    const s = await stat(file)
    if (!s.isFile()) throw Object.assign(new Error('not a file'), { code: 'not a file' })
    if (s.size > MAX_PASSPHRASE_FILE) throw Object.assign(new Error('too large'), { code: `larger than ${MAX_PASSPHRASE_FILE} bytes` })
    if ((s.mode & 0o077) !== 0) exposed = `the passphrase file ${file} can be read by other users: chmod 600 it`
    text = await readFile(file, 'utf8')
  } catch (err: any) {
    throw new ConfigError(`Cannot read the passphrase file ${file}: ${err?.code ?? err?.message ?? err}`, field)
  }
  const passphrase = text.replace(/\r?\n$/, '')
  if (passphrase === '') throw new ConfigError(`The passphrase file ${file} is empty`, field)
  return { passphrase, source: field, ...(exposed != null ? { exposed } : {}) }
}
