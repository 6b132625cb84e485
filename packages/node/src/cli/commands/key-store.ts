/**
 * `ioa key list`: the keys a data directory holds (the node's peer id, its
 * agents' key names and ids), encrypted or not (spec/interconnect.md §1.3).
 */
import { access } from 'node:fs/promises'
import { join, resolve } from 'node:path'
import { clientDataDir } from '../args.js'
import { CliError, EXIT } from '../errors.js'
import type { CommandSpec } from '../args.js'
import type { KeyStoreListing } from '../../keystore.js'

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
    const dir = args.string('data-dir') != null ? resolve(ctx.cwd, args.string('data-dir') ?? '') : clientDataDir(args, ctx)
    const { passphraseFromEnv, readPassphraseFile } = await import('../../passphrase.js')
    const file = args.string('passphrase-file')
    const keyStore = file != null ? await readPassphraseFile(resolve(ctx.cwd, file), '--passphrase-file') : await passphraseFromEnv(ctx.env, ctx.cwd)
    const node = await listDir(dir, keyStore)
    const gatewayDir = join(dir, 'gateway')
    const gateway = await access(gatewayDir).then(async () => listDir(gatewayDir, keyStore), () => undefined)
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

async function listDir (dir: string, keyStore: { passphrase?: string, source?: string }): Promise<KeyStoreListing> {
  if (!await access(dir).then(() => true, () => false)) {
    throw new CliError('DATA_DIR_UNAVAILABLE', `No data directory at ${dir}`, { exit: EXIT.usage, field: '--data-dir' })
  }
  const { LevelDatastore } = await import('datastore-level')
  const { dataDirError } = await import('../client.js')
  const { listKeys } = await import('../../keystore.js')
  const store = new LevelDatastore(dir)
  try {
    await store.open()
  } catch (err) {
    throw await dataDirError(dir, err)
  }
  try {
    return await listKeys(store, { ...keyStore, where: dir })
  } finally {
    await store.close().catch(() => {})
  }
}
