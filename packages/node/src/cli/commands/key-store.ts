/**
 * `ioa key list`: the keys a data directory holds (the node's peer id, its
 * agents' key names and ids), encrypted or not; `ioa key passphrase`: a new
 * passphrase for an encrypted one (spec/interconnect.md §1.3).
 */
import { access } from 'node:fs/promises'
import { defaultLogger } from '@libp2p/logger'
import { join, resolve } from 'node:path'
import { clientDataDir } from '../args.js'
import { attempt } from '../../logging.js'
import { CliError, EXIT } from '../errors.js'
import type { Args, CommandContext, CommandSpec } from '../args.js'
import type { KeyStoreInit } from '../../keystore.js'
import type { Datastore } from 'interface-datastore'

export const keyListCommand: CommandSpec = {
  name: 'key list',
  summary: 'list the keys of a data directory (peer id, agent keys) and whether they are encrypted',
  usage: ['key list [--data-dir <dir>] [--passphrase-file <file>] [--json]'],
  description: [
    'Opens the data directory of a node (or of the client, by default) and prints its peer id and',
    'the key name and did of every agent key; an encrypted directory needs its passphrase',
    '(--passphrase-file, $IOA_KEY_PASSPHRASE_FILE or $IOA_KEY_PASSPHRASE). A plaintext directory is listed, not changed:',
    '`ioa start` with a passphrase encrypts it. The directory must not be in use.'
  ].join('\n'),
  options: {
    'data-dir': { type: 'string', value: '<dir>', description: 'the data directory (default $IOA_HOME or ~/.ioa, the client\'s)' },
    'passphrase-file': { type: 'string', value: '<file>', description: 'file holding the passphrase (default $IOA_KEY_PASSPHRASE_FILE, or $IOA_KEY_PASSPHRASE itself)' }
  },
  examples: ['IOA_KEY_PASSPHRASE=… ioa key list --data-dir ./hotel-state --json'],
  async run (args, ctx) {
    const dir = dataDirOf(args, ctx)
    const keyStore = await currentPassphrase(args, ctx)
    const { listKeys } = await import('../../keystore.js')
    const { node, gateway } = await withNodeAndGateway(dir, async (store, d) => listKeys(store, { ...keyStore, where: d }))
    if (ctx.out.json) {
      ctx.out.emit({ dataDir: dir, ...node, ...(gateway != null ? { gateway } : {}) })
      return 0
    }
    for (const [label, l] of [['', node], ['gateway ', gateway]] as const) {
      if (l == null) continue
      ctx.out.print(`${label}${l.encrypted ? 'encrypted' : 'NOT ENCRYPTED (ioa start with a passphrase encrypts it)'}`)
      ctx.out.print(`  peer id  ${l.peerId ?? '(none yet)'}`)
      for (const a of l.agents) ctx.out.print(`  ${a.key}  ${a.did}`)
    }
    return 0
  }
}

/** The passphrase of `--passphrase-file`, else of the environment */
async function currentPassphrase (args: Args, ctx: CommandContext): Promise<KeyStoreInit> {
  const { passphraseFromEnv, readPassphraseFile } = await import('../../passphrase.js')
  const file = args.string('passphrase-file')
  return file != null ? readPassphraseFile(resolve(ctx.cwd, file), '--passphrase-file') : passphraseFromEnv(ctx.env, ctx.cwd)
}

/** `fn` on the data directory, then on its gateway's (`<dir>/gateway`) when there is one */
async function withNodeAndGateway<T> (dir: string, fn: (store: Datastore, dir: string) => Promise<T>): Promise<{ node: T, gateway?: T }> {
  const node = await withDataDir(dir, async store => fn(store, dir))
  const gatewayDir = join(dir, 'gateway')
  if (!await access(gatewayDir).then(() => true, () => false)) return { node }
  return { node, gateway: await withDataDir(gatewayDir, async store => fn(store, gatewayDir)) }
}

/** Run `fn` on the LevelDB of an existing data directory, closed afterwards */
async function withDataDir<T> (dir: string, fn: (store: Datastore) => Promise<T>): Promise<T> {
  if (!await access(dir).then(() => true, () => false)) {
    throw new CliError('DATA_DIR_UNAVAILABLE', `No data directory at ${dir}`, { exit: EXIT.usage, field: '--data-dir' })
  }
  const { openDataDir } = await import('../../data-dir.js')
  const store = await openDataDir(dir, { field: '--data-dir' })
  try {
    return await fn(store)
  } finally {
    await attempt(defaultLogger().forComponent('ioa:node:cli'), `closing ${dir}`, async () => { await store.close() })
  }
}

export const keyPassphraseCommand: CommandSpec = {
  name: 'key passphrase',
  summary: 'change the passphrase of an encrypted data directory',
  usage: ['key passphrase [--data-dir <dir>] [--passphrase-file <file>] --new-passphrase-file <file> [--json]'],
  description: [
    'Re-encrypts every key of the data directory (and of <dir>/gateway) under the passphrase in',
    '--new-passphrase-file, with a new salt, in one write: the directory is under the old passphrase or',
    'the new one, never half of each. The current passphrase: --passphrase-file, $IOA_KEY_PASSPHRASE_FILE',
    'or $IOA_KEY_PASSPHRASE. The directory must not be in use.'
  ].join('\n'),
  options: {
    'data-dir': keyListCommand.options['data-dir'],
    'passphrase-file': { type: 'string', value: '<file>', description: 'file holding the current passphrase (default $IOA_KEY_PASSPHRASE_FILE, or $IOA_KEY_PASSPHRASE itself)' },
    'new-passphrase-file': { type: 'string', value: '<file>', description: 'file holding the new passphrase (at least 20 characters)' }
  },
  examples: ['ioa key passphrase --data-dir ./hotel-state --passphrase-file old.pass --new-passphrase-file new.pass'],
  async run (args, ctx) {
    const dir = dataDirOf(args, ctx)
    const { readPassphraseFile } = await import('../../passphrase.js')
    const { changePassphrase } = await import('../../keystore.js')
    const next = await readPassphraseFile(resolve(ctx.cwd, args.required('new-passphrase-file')), '--new-passphrase-file')
    const current = await currentPassphrase(args, ctx)
    const passphrase = current.passphrase
    if (passphrase == null) {
      throw new CliError('PASSPHRASE_REQUIRED', 'The current passphrase is needed: --passphrase-file, $IOA_KEY_PASSPHRASE_FILE or $IOA_KEY_PASSPHRASE', { exit: EXIT.usage, field: '--passphrase-file' })
    }
    const { node: keys, gateway } = await withNodeAndGateway(dir, async (store, d) => changePassphrase(store, {
      passphrase, source: current.source, newPassphrase: next.passphrase, newSource: next.source, where: d
    }))
    if (ctx.out.json) ctx.out.emit({ dataDir: dir, keys, ...(gateway != null ? { gateway } : {}) })
    else ctx.out.print(`re-encrypted ${keys} key(s) of ${dir}${gateway != null ? ` and ${gateway} of its gateway` : ''} under the new passphrase`)
    return 0
  }
}

/** `--data-dir`, else the client's */
function dataDirOf (args: Args, ctx: CommandContext): string {
  const d = args.string('data-dir')
  return d != null ? resolve(ctx.cwd, d) : clientDataDir(args, ctx)
}
