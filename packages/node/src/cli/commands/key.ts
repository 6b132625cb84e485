/**
 * `ioa key new` and `ioa key show`: Ed25519 key files (format: keyfile.ts).
 */
import { resolve } from 'node:path'
import type { CommandSpec } from '../args.js'

export const keyNewCommand: CommandSpec = {
  name: 'key new',
  summary: 'create an Ed25519 key file (an identity that signs delegations and requests)',
  usage: ['key new [--out <file>] [--json]'],
  description: [
    'Writes {"type":"ed25519","seed":"<64 hex>","did":"did:key:z…"} to --out with mode 0600 (never',
    'over an existing file) and prints the did. Without --out the key file itself is printed on stdout.'
  ].join('\n'),
  options: {
    out: { type: 'string', value: '<file>', description: 'where to write the key file (refuses to overwrite)' }
  },
  examples: ['ioa key new --out alice.key'],
  async run (args, ctx) {
    const { newKey, writeKeyFile } = await import('../keyfile.js')
    const { file } = await newKey()
    const outPath = args.string('out')
    if (outPath == null) {
      // the key file itself, for a redirect
      ctx.out.emit(file)
      ctx.out.warn('the key was printed, not saved: keep it secret (use --out <file> to write a 0600 file)')
      return 0
    }
    const path = resolve(ctx.cwd, outPath)
    await writeKeyFile(path, file)
    if (ctx.out.json) ctx.out.emit({ did: file.did, file: path })
    else ctx.out.print(`${file.did}\nwrote ${path} (mode 0600)`)
    return 0
  }
}

export const keyShowCommand: CommandSpec = {
  name: 'key show',
  summary: 'check a key file and print its did',
  usage: ['key show --key <file> [--json]'],
  options: {
    key: { type: 'string', value: '<file>', description: 'the key file' }
  },
  async run (args, ctx) {
    const { readKeyFile } = await import('../keyfile.js')
    const key = await readKeyFile(args.required('key'), ctx.cwd)
    if (key.exposed) ctx.out.warn(`${key.path} can be read by other users: chmod 600 it`)
    if (ctx.out.json) {
      ctx.out.emit({ did: key.identity.did, type: key.file.type, file: key.path, publicKey: Buffer.from(key.identity.publicKey.raw).toString('hex') })
    } else {
      ctx.out.print(key.identity.did)
    }
    return 0
  }
}
