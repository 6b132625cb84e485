/**
 * `ioa key new` and `ioa key show`: Ed25519 key files (format: keyfile.ts).
 */
import { resolve } from 'node:path'
import type { CommandContext, CommandSpec } from '../args.js'

/** `ioa key new --domain-psk`: a pre-shared key file of a private domain network */
async function newDomainKey (outPath: string | undefined, ctx: CommandContext): Promise<number> {
  const { generateDomainKey, parseDomainKey } = await import('@ioa/transport')
  const { writeNewFile } = await import('../keyfile.js')
  const text = generateDomainKey()
  const { dhtProtocol } = parseDomainKey(text)
  if (outPath == null) {
    // the key file itself, for a redirect
    if (ctx.out.json) ctx.out.emit({ type: 'domain-psk', psk: text, dhtProtocol })
    else ctx.out.print(text.trimEnd())
    ctx.out.warn('the key was printed, not saved: keep it secret (use --out <file> to write a 0600 file)')
    return 0
  }
  const path = resolve(ctx.cwd, outPath)
  await writeNewFile(path, text, 0o600, '--out')
  if (ctx.out.json) ctx.out.emit({ type: 'domain-psk', file: path, dhtProtocol })
  else ctx.out.print(`wrote ${path} (mode 0600): the pre-shared key of a domain network, DHT ${dhtProtocol}`)
  return 0
}

export const keyNewCommand: CommandSpec = {
  name: 'key new',
  summary: 'create an Ed25519 key file (an identity that signs delegations and requests), or a domain network key',
  usage: ['key new [--out <file>] [--json]', 'key new --domain-psk [--out <file>] [--json]'],
  description: [
    'Writes {"type":"ed25519","seed":"<64 hex>","did":"did:key:z…"} to --out with mode 0600 (never',
    'over an existing file) and prints the did. Without --out the key file itself is printed on stdout.',
    'With --domain-psk, writes a new pre-shared key of a private domain network instead (libp2p swarm',
    'key format: "/key/swarm/psk/1.0.0/", "/base16/", 64 hex digits) and prints its DHT protocol id;',
    'name it in the configs of the gateway and the nodes behind it as "domainPskFile".'
  ].join('\n'),
  options: {
    out: { type: 'string', value: '<file>', description: 'where to write the key file (refuses to overwrite)' },
    'domain-psk': { type: 'boolean', description: 'make a domain network\'s pre-shared key (spec/interconnect.md 8.1) instead of an identity' }
  },
  examples: ['ioa key new --out alice.key', 'ioa key new --domain-psk --out riviera.psk'],
  async run (args, ctx) {
    if (args.flag('domain-psk')) return newDomainKey(args.string('out'), ctx)
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
