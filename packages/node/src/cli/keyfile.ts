/**
 * Key files of the CLI: one Ed25519 identity (an agent, a user) as JSON
 * `{ "type": "ed25519", "seed": "<64 hex>", "did": "did:key:z…" }`, written
 * with mode 0600. The seed is the 32-byte Ed25519 private seed; `did` is the
 * identity it gives, checked on every read. Format: docs/cli.md.
 */
import { randomBytes } from 'node:crypto'
import { readFile, stat, writeFile } from 'node:fs/promises'
import { resolve } from 'node:path'
import { identityFromPrivateKey } from '@ioa/interconnect'
import { generateKeyPairFromSeed } from '@libp2p/crypto/keys'
import { CliError, EXIT } from './errors.js'
import type { Identity } from '@ioa/interconnect'

export interface KeyFile {
  type: 'ed25519'
  /** 32 bytes, lower-case hex */
  seed: string
  did: string
}

/** A key file is a few hundred bytes; anything much larger is not one */
const MAX_KEY_FILE = 4096
const SEED = /^[0-9a-fA-F]{64}$/

function keyError (message: string, field?: string): CliError {
  return new CliError('INVALID_KEY_FILE', message, { exit: EXIT.usage, field })
}

/** The identity of a 32-byte seed */
export async function identityFromSeed (seed: Uint8Array): Promise<Identity> {
  return identityFromPrivateKey(await generateKeyPairFromSeed('Ed25519', seed))
}

/** A new random key: the file's content and its identity */
export async function newKey (): Promise<{ file: KeyFile, identity: Identity }> {
  const seed = new Uint8Array(randomBytes(32))
  const identity = await identityFromSeed(seed)
  return { file: { type: 'ed25519', seed: Buffer.from(seed).toString('hex'), did: identity.did }, identity }
}

/** Write a key file with mode 0600; refuses to overwrite an existing file */
export async function writeKeyFile (path: string, file: KeyFile): Promise<void> {
  await writeNewFile(path, JSON.stringify(file, null, 2) + '\n', 0o600, '--out')
}

/** Create `path` with `text`, failing when it exists */
export async function writeNewFile (path: string, text: string, mode: number, flag: string): Promise<void> {
  try {
    await writeFile(path, text, { flag: 'wx', mode })
  } catch (err: any) {
    if (err?.code === 'EEXIST') throw new CliError('FILE_EXISTS', `${path} exists: refusing to overwrite it`, { exit: EXIT.usage, field: flag })
    throw new CliError('WRITE_FAILED', `Cannot write ${path}: ${err?.code ?? err?.message ?? err}`, { field: flag })
  }
}

/** Parse and check the content of a key file (the `did` must be that of the seed) */
export async function parseKeyFile (text: string, where: string): Promise<{ file: KeyFile, identity: Identity }> {
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch {
    // the parser's error is replaced by the key file error it means
    throw keyError(`${where} is not a key file (not JSON)`)
  }
  const f = json as Record<string, unknown> | null
  if (f == null || typeof f !== 'object' || Array.isArray(f)) throw keyError(`${where} is not a key file (not a JSON object)`)
  const unknown = Object.keys(f).filter(k => k !== 'type' && k !== 'seed' && k !== 'did')
  if (unknown.length > 0) throw keyError(`${where}: unknown field "${unknown[0].slice(0, 40)}"`, unknown[0].slice(0, 40))
  if (f.type !== 'ed25519') throw keyError(`${where}: "type" must be "ed25519"`, 'type')
  if (typeof f.seed !== 'string' || !SEED.test(f.seed)) throw keyError(`${where}: "seed" must be 64 hex digits (a 32-byte Ed25519 seed)`, 'seed')
  const identity = await identityFromSeed(Uint8Array.from(Buffer.from(f.seed, 'hex')))
  if (typeof f.did !== 'string') throw keyError(`${where}: "did" is missing`, 'did')
  if (f.did !== identity.did) throw keyError(`${where}: "did" is not the identity of the seed (the seed gives ${identity.did})`, 'did')
  return { file: { type: 'ed25519', seed: f.seed.toLowerCase(), did: identity.did }, identity }
}

/** Read a key file (`--key`); the result says whether others may read it */
export async function readKeyFile (path: string, cwd: string): Promise<{ file: KeyFile, identity: Identity, path: string, exposed: boolean }> {
  const full = resolve(cwd, path)
  let text: string
  let exposed: boolean
  try {
    const s = await stat(full)
    if (!s.isFile()) throw Object.assign(new Error('not a file'), { code: 'not a file' })
    if (s.size > MAX_KEY_FILE) throw Object.assign(new Error('too large'), { code: `larger than ${MAX_KEY_FILE} bytes` })
    exposed = (s.mode & 0o077) !== 0
    text = await readFile(full, 'utf8')
  } catch (err: any) {
    throw new CliError('INVALID_KEY_FILE', `Cannot read key file ${full}: ${err?.code ?? err?.message ?? err}`, { exit: EXIT.usage, field: '--key' })
  }
  return { ...await parseKeyFile(text, full), path: full, exposed }
}
