/**
 * Where a node started from a config gets its key store passphrase: the
 * file the config's `keyStore.passphraseFile` names, else the environment
 * variable `IOA_KEY_PASSPHRASE` (spec/interconnect.md §1.3).
 */
import { readFile, stat } from 'node:fs/promises'
import { defaultLogger } from '@libp2p/logger'
import { ConfigError } from './config.js'
import type { NodeConfig } from './config.js'
import type { KeyStoreInit } from './keystore.js'

/** The environment variable holding the passphrase itself */
export const PASSPHRASE_ENV = 'IOA_KEY_PASSPHRASE'

/** A passphrase file is one line; anything much larger is not one */
const MAX_PASSPHRASE_FILE = 4096

const log = defaultLogger().forComponent('ioa:node:keystore')

/**
 * The key store options of a config: its passphrase (the file's content
 * without one trailing newline, or `$IOA_KEY_PASSPHRASE`) and where it came
 * from. Throws `ConfigError` (field `keyStore.passphraseFile`) when the file
 * cannot be read or is empty.
 */
export async function keyStoreFromConfig (config: NodeConfig, env: Record<string, string | undefined> = process.env): Promise<KeyStoreInit> {
  const insecurePlaintext = config.keyStore?.insecurePlaintext === true
  const file = config.keyStore?.passphraseFile
  if (file != null) return { ...await readPassphraseFile(file, 'keyStore.passphraseFile'), insecurePlaintext }
  return { ...passphraseFromEnv(env), insecurePlaintext }
}

/** `$IOA_KEY_PASSPHRASE`, when set and not empty */
export function passphraseFromEnv (env: Record<string, string | undefined>): KeyStoreInit {
  const passphrase = env[PASSPHRASE_ENV]
  return passphrase != null && passphrase !== '' ? { passphrase, source: `$${PASSPHRASE_ENV}` } : {}
}

/**
 * The passphrase in a file (its content without one trailing newline);
 * `field` names the config field or flag in the `ConfigError` of a file that
 * cannot be read or is empty
 */
export async function readPassphraseFile (file: string, field: string): Promise<KeyStoreInit & { passphrase: string }> {
  let text: string
  try {
    const s = await stat(file)
    if (!s.isFile()) throw Object.assign(new Error('not a file'), { code: 'not a file' })
    if (s.size > MAX_PASSPHRASE_FILE) throw Object.assign(new Error('too large'), { code: `larger than ${MAX_PASSPHRASE_FILE} bytes` })
    if ((s.mode & 0o077) !== 0) log('passphrase file %s can be read by other users: chmod 600 it', file)
    text = await readFile(file, 'utf8')
  } catch (err: any) {
    throw new ConfigError(`Cannot read the passphrase file ${file}: ${err?.code ?? err?.message ?? err}`, field)
  }
  const passphrase = text.replace(/\r?\n$/, '')
  if (passphrase === '') throw new ConfigError(`The passphrase file ${file} is empty`, field)
  return { passphrase, source: field }
}
