/**
 * Commands, their flags and help, parsed with `node:util` `parseArgs`, and
 * the parsers of flag values (durations, multiaddrs, DIDs, `@file`
 * arguments) shared by every command.
 *
 * This module and the command specs load no libp2p code: `--help` and usage
 * errors answer at once; a command imports the layers when it runs.
 *
 * Kept on `node:util` `parseArgs` rather than a CLI library (commander,
 * yargs): it is built in (no dependency, no start-up cost for `--help`), it
 * is strict about unknown flags, and the help and exit-2 usage errors that
 * `docs/cli.md` specifies (naming the flag at fault) are ours to word, which
 * the libraries would print in their own way.
 */
import { readFile, stat } from 'node:fs/promises'
import { homedir } from 'node:os'
import { join, resolve } from 'node:path'
import { parseArgs } from 'node:util'
import { UsageError } from './errors.js'
import type { Output } from './output.js'

export interface OptionSpec {
  type: 'string' | 'boolean'
  short?: string
  /** The flag may be given more than once */
  multiple?: boolean
  /** Placeholder of the value in the help, e.g. `<file>` */
  value?: string
  description: string
}

export interface CommandContext {
  readonly out: Output
  /** Aborted by SIGINT / SIGTERM */
  readonly signal: AbortSignal
  readonly env: Record<string, string | undefined>
  readonly cwd: string
}

export interface CommandSpec {
  /** As typed after `ioa`, e.g. `discover` or `key new` */
  name: string
  /** One line for the command list */
  summary: string
  /** Usage lines, without the leading `ioa ` */
  usage: string[]
  /** Paragraphs shown in the help after the usage */
  description?: string
  /** How many positional arguments the command takes @default 0 */
  positionals?: number
  options: Record<string, OptionSpec>
  examples?: string[]
  /** Returns the exit code (0 when nothing is returned) */
  run(args: Args, ctx: CommandContext): Promise<number | void>
}

/** `--json` and `--help`, accepted by every command */
export const COMMON_OPTIONS: Record<string, OptionSpec> = {
  json: { type: 'boolean', description: 'machine-readable output (JSON on stdout, a JSON error line on stderr)' },
  help: { type: 'boolean', short: 'h', description: 'show this help' }
}

/** Flags of every command that runs a client node */
export const CLIENT_OPTIONS: Record<string, OptionSpec> = {
  bootstrap: { type: 'string', multiple: true, value: '<multiaddr>', description: 'a peer of the network to join through, with /p2p/<peer id> (repeatable; default $IOA_BOOTSTRAP)' },
  'data-dir': { type: 'string', value: '<dir>', description: 'state of the client node (its peer key); one process at a time (default $IOA_HOME or ~/.ioa)' },
  timeout: { type: 'string', value: '<ms|duration>', description: 'how long to wait for the network, e.g. 10000 or 10s (default 10s)' }
}

/** Parsed flags and positionals of one command */
export class Args {
  constructor (
    readonly command: string,
    private readonly values: Record<string, string | boolean | Array<string | boolean> | undefined>,
    readonly positionals: string[]
  ) {}

  flag (name: string): boolean {
    return this.values[name] === true
  }

  string (name: string): string | undefined {
    const v = this.values[name]
    if (Array.isArray(v)) return v.length > 0 ? String(v[v.length - 1]) : undefined
    return typeof v === 'string' ? v : undefined
  }

  strings (name: string): string[] {
    const v = this.values[name]
    if (Array.isArray(v)) return v.map(String)
    return typeof v === 'string' ? [v] : []
  }

  required (name: string): string {
    const v = this.string(name)
    if (v == null || v === '') throw new UsageError(`${this.command}: missing required option --${name}`, `--${name}`)
    return v
  }

  /** The positional argument at `index`, required */
  positional (index: number, name: string): string {
    const v = this.positionals[index]
    if (v == null || v === '') throw new UsageError(`${this.command}: missing argument <${name}>`, name)
    return v
  }
}

/** Parse `argv` (the words after the command name) for `spec`; throws `UsageError` */
export function parseCommandArgs (spec: CommandSpec, argv: string[]): Args {
  const options: Record<string, { type: 'string' | 'boolean', short?: string, multiple?: boolean }> = {}
  for (const [name, o] of Object.entries({ ...spec.options, ...COMMON_OPTIONS })) {
    options[name] = { type: o.type, ...(o.short != null ? { short: o.short } : {}), ...(o.multiple === true ? { multiple: true } : {}) }
  }
  let parsed: { values: Record<string, string | boolean | Array<string | boolean> | undefined>, positionals: string[] }
  try {
    parsed = parseArgs({ args: argv, options, strict: true, allowPositionals: true }) as typeof parsed
  } catch (err: any) {
    throw parseError(spec.name, err)
  }
  if (parsed.values.help === true) return new Args(spec.name, parsed.values, parsed.positionals)
  const max = spec.positionals ?? 0
  if (parsed.positionals.length > max) {
    const extra = parsed.positionals[max]
    throw new UsageError(`${spec.name}: unexpected argument "${extra.slice(0, 80)}" (see ioa ${spec.name} --help)`, extra.slice(0, 80))
  }
  return new Args(spec.name, parsed.values, parsed.positionals)
}

function parseError (command: string, err: any): UsageError {
  const message = String(err?.message ?? err)
  if (err?.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
    const flag = /'([^']+)'/.exec(message)?.[1] ?? message
    return new UsageError(`${command}: unknown option ${flag} (see ioa ${command} --help)`, flag)
  }
  const flag = /'(-[^' ]+)/.exec(message)?.[1]
  if (err?.code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' && flag != null) {
    if (/argument missing/.test(message)) return new UsageError(`${command}: option ${flag} needs a value`, flag)
    if (/does not take an argument/.test(message)) return new UsageError(`${command}: option ${flag} takes no value`, flag)
    if (/ambiguous/.test(message)) return new UsageError(`${command}: option ${flag} needs a value (for a value that starts with "-", write ${flag}=<value>)`, flag)
  }
  return new UsageError(`${command}: ${message.split(/\.\s/)[0]}`, flag)
}

/** The help text of a command */
export function commandHelp (spec: CommandSpec): string {
  const lines = [`ioa ${spec.name} — ${spec.summary}`, '', 'Usage:']
  for (const u of spec.usage) lines.push(`  ioa ${u}`)
  if (spec.description != null) lines.push('', ...spec.description.split('\n').map(l => l === '' ? '' : `${l}`))
  const entries = Object.entries({ ...spec.options, ...COMMON_OPTIONS }).map(([name, o]) => {
    const left = `${o.short != null ? `-${o.short}, ` : '    '}--${name}${o.value != null ? ` ${o.value}` : ''}`
    return { left, right: o.description + (o.multiple === true && !o.description.includes('repeatable') ? ' (repeatable)' : '') }
  })
  const width = Math.min(34, Math.max(...entries.map(e => e.left.length)) + 2)
  lines.push('', 'Options:')
  for (const e of entries) {
    lines.push(e.left.length + 2 > width ? `  ${e.left}\n  ${' '.repeat(width)}${e.right}` : `  ${e.left.padEnd(width)}${e.right}`)
  }
  if (spec.examples != null && spec.examples.length > 0) {
    lines.push('', 'Examples:')
    for (const e of spec.examples) lines.push(`  ${e}`)
  }
  return lines.join('\n')
}

// ---------------------------------------------------------------------------
// values

const UNITS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }
/** Longest duration a flag takes: ten years */
export const MAX_DURATION = 3650 * 86_400_000

/** `30s`, `5m`, `2h`, `7d`, `250ms`, or a number of milliseconds */
export function parseDuration (text: string, flag: string, max = MAX_DURATION): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(text.trim())
  const ms = m != null ? Math.round(Number(m[1]) * UNITS[m[2] ?? 'ms']) : NaN
  if (!Number.isFinite(ms) || ms <= 0) {
    throw new UsageError(`${flag}: "${text.slice(0, 40)}" is not a duration (e.g. 500ms, 30s, 5m, 2h, 7d, or milliseconds)`, flag)
  }
  if (ms > max) throw new UsageError(`${flag}: ${text} is longer than the longest allowed (${max} ms)`, flag)
  return ms
}

/** A whole number within [min, max] */
export function parseInteger (text: string, flag: string, min: number, max: number): number {
  const n = /^\d+$/.test(text.trim()) ? Number(text) : NaN
  if (!Number.isSafeInteger(n) || n < min || n > max) throw new UsageError(`${flag}: expected a whole number from ${min} to ${max}, got "${text.slice(0, 40)}"`, flag)
  return n
}

/** A multiaddr; with `needPeer`, one that ends with /p2p/<peer id>. Returns its string form */
export async function parseMultiaddr (text: string, flag: string, needPeer: boolean): Promise<string> {
  const { multiaddr } = await import('@multiformats/multiaddr')
  let addr
  try {
    addr = multiaddr(text)
  } catch (err: any) {
    throw new UsageError(`${flag}: "${text.slice(0, 120)}" is not a multiaddr (${String(err?.message ?? err).slice(0, 120)})`, flag, 'INVALID_MULTIADDR')
  }
  if (needPeer && addr.getComponents().findLast(c => c.name === 'p2p')?.value == null) {
    throw new UsageError(`${flag}: ${text.slice(0, 120)} names no peer: add /p2p/<peer id>`, flag, 'INVALID_MULTIADDR')
  }
  return addr.toString()
}

/** The peer id a multiaddr (checked by `parseMultiaddr`) ends with */
export function peerOf (addr: string): string {
  const i = addr.lastIndexOf('/p2p/')
  const id = i >= 0 ? addr.slice(i + 5).split('/')[0] : ''
  if (id === '') throw new UsageError(`${addr} names no peer`, undefined, 'INVALID_MULTIADDR')
  return id
}

export async function parseDid (text: string, flag: string): Promise<string> {
  const { isDid } = await import('@ioa/interconnect')
  if (!isDid(text)) throw new UsageError(`${flag}: "${String(text).slice(0, 100)}" is not an Ed25519 did:key`, flag, 'INVALID_DID')
  return text
}

/** Largest file an `@file` argument may name */
export const MAX_ARG_FILE = 1_048_576

/** The argument, or the text of the file it names as `@file` (bounded) */
export async function readArgument (text: string, flag: string, cwd: string): Promise<string> {
  if (!text.startsWith('@')) return text
  const path = resolve(cwd, text.slice(1))
  try {
    const s = await stat(path)
    if (!s.isFile()) throw new Error('not a file')
    if (s.size > MAX_ARG_FILE) throw new Error(`larger than ${MAX_ARG_FILE} bytes`)
    return await readFile(path, 'utf8')
  } catch (err: any) {
    throw new UsageError(`${flag}: cannot read ${path}: ${err?.code ?? err?.message ?? err}`, flag)
  }
}

/** A JSON value given on the command line or as `@file` */
export async function readJsonArgument (text: string, flag: string, cwd: string): Promise<unknown> {
  const raw = await readArgument(text, flag, cwd)
  try {
    return JSON.parse(raw)
  } catch (err: any) {
    throw new UsageError(`${flag}: not valid JSON: ${String(err?.message ?? err).slice(0, 160)}`, flag)
  }
}

/** The client state directory: `--data-dir`, `$IOA_HOME`, or `~/.ioa` */
export function clientDataDir (args: Args, ctx: CommandContext): string {
  const dir = args.string('data-dir') ?? ctx.env.IOA_HOME
  return dir != null && dir !== '' ? resolve(ctx.cwd, dir) : join(homedir(), '.ioa')
}

/** The bootstrap multiaddrs: `--bootstrap`, or `$IOA_BOOTSTRAP` (comma or space separated); at least one */
export async function bootstrapList (args: Args, ctx: CommandContext): Promise<string[]> {
  let list = args.strings('bootstrap')
  if (list.length === 0 && ctx.env.IOA_BOOTSTRAP != null) list = ctx.env.IOA_BOOTSTRAP.split(/[\s,]+/).filter(s => s !== '')
  if (list.length === 0) throw new UsageError(`${args.command}: missing required option --bootstrap (or set $IOA_BOOTSTRAP)`, '--bootstrap')
  if (list.length > 64) throw new UsageError('--bootstrap: at most 64 peers', '--bootstrap')
  return Promise.all(list.map(async a => parseMultiaddr(a, '--bootstrap', true)))
}

/** `--timeout`, default 10 s */
export function timeoutOf (args: Args, fallback = 10_000): number {
  const t = args.string('timeout')
  return t != null ? parseDuration(t, '--timeout', 600_000) : fallback
}
