/**
 * The `ioa` command-line tool: dispatch to a command, one error line and an
 * exit code (0 done, 1 failed, 2 bad usage or config). Reference: docs/cli.md.
 */
// libp2p needs the Node 20 polyfills before any of its modules is evaluated
import '@ioa/transport/polyfill'
import { readFileSync } from 'node:fs'
import { COMMON_OPTIONS, commandHelp, parseCommandArgs } from './args.js'
import { CliError, UsageError, errorReport } from './errors.js'
import { Output } from './output.js'
import { COMMANDS } from './commands/index.js'
import type { CommandContext, CommandSpec } from './args.js'
import type { Streams } from './output.js'

export interface MainOptions {
  streams?: Streams
  env?: Record<string, string | undefined>
  cwd?: string
  /** Aborted to stop the command (SIGINT / SIGTERM in `run`) */
  signal?: AbortSignal
}

/** Commands with subcommands: `ioa key new` */
const GROUPS: Record<string, string> = {
  key: 'create and inspect key files',
  team: 'follow the conversations of teams'
}

function version (): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version?: string }
    return pkg.version ?? 'unknown'
  } catch {
    // handled: no readable package.json (a bundled copy) means an unknown version
    return 'unknown'
  }
}

/** The help of `ioa` itself */
export function mainHelp (): string {
  const rows: Array<[string, string]> = []
  for (const c of COMMANDS) rows.push([c.name, c.summary])
  const width = Math.max(...rows.map(r => r[0].length)) + 3
  return [
    'ioa — run and use an Internet of Agents node',
    '',
    'Usage:',
    '  ioa <command> [options]',
    '  ioa <command> --help',
    '',
    'Commands:',
    ...rows.map(([n, s]) => `  ${n.padEnd(width)}${s}`),
    '',
    'Common options:',
    `  --json       ${COMMON_OPTIONS.json.description}`,
    `  -h, --help   ${COMMON_OPTIONS.help.description}`,
    '  --version    print the version',
    '',
    'Exit codes: 0 success, 1 the operation failed, 2 bad usage or bad config.',
    'Reference: docs/cli.md'
  ].join('\n')
}

function groupHelp (group: string): string {
  const cmds = COMMANDS.filter(c => c.name.startsWith(group + ' '))
  const width = Math.max(...cmds.map(c => c.name.length)) + 3
  return [
    `ioa ${group} — ${GROUPS[group]}`,
    '',
    'Usage:',
    ...cmds.map(c => `  ioa ${c.usage[0]}`),
    '',
    'Commands:',
    ...cmds.map(c => `  ${c.name.padEnd(width)}${c.summary}`)
  ].join('\n')
}

/** Words before a `--` terminator */
function flagsOf (argv: string[]): string[] {
  const end = argv.indexOf('--')
  return end < 0 ? argv : argv.slice(0, end)
}

/** Find the command named by the first word(s) of argv */
function findCommand (argv: string[]): { spec?: CommandSpec, rest: string[], group?: string } {
  const [first, second] = argv
  if (first != null && GROUPS[first] != null) {
    const spec = second != null && !second.startsWith('-') ? COMMANDS.find(c => c.name === `${first} ${second}`) : undefined
    if (spec == null) {
      if (second == null || second.startsWith('-')) return { group: first, rest: argv.slice(1) }
      throw new UsageError(`unknown command "ioa ${first} ${second.slice(0, 40)}" (see ioa ${first} --help)`, second.slice(0, 40))
    }
    return { spec, rest: argv.slice(2) }
  }
  return { spec: COMMANDS.find(c => c.name === first && !c.name.includes(' ')), rest: argv.slice(1) }
}

/**
 * Run one `ioa` invocation (`argv` without `node` and the script) and return
 * its exit code. Output goes to `options.streams` (the process's by default).
 */
export async function main (argv: string[], options: MainOptions = {}): Promise<number> {
  const json = flagsOf(argv).includes('--json')
  const out = new Output(json, options.streams)
  const stdout = options.streams?.stdout ?? process.stdout
  try {
    const first = argv[0]
    if (first == null) {
      ;(options.streams?.stderr ?? process.stderr).write(mainHelp() + '\n')
      return 2
    }
    if (first === '--help' || first === '-h' || first === 'help') {
      const topic = first === 'help' ? argv.slice(1) : []
      if (topic.length > 0) return await main([...topic, '--help'], options)
      stdout.write(mainHelp() + '\n')
      return 0
    }
    if (first === '--version' || first === '-v') {
      stdout.write(`${version()}\n`)
      return 0
    }
    const { spec, rest, group } = findCommand(argv)
    if (group != null) {
      const flags = flagsOf(rest)
      if (flags.includes('--help') || flags.includes('-h')) {
        stdout.write(groupHelp(group) + '\n')
        return 0
      }
      throw new UsageError(`${group}: missing subcommand (see ioa ${group} --help)`)
    }
    if (spec == null) {
      throw new UsageError(first.startsWith('-')
        ? `unknown option ${first.slice(0, 40)} (see ioa --help)`
        : `unknown command "${first.slice(0, 40)}" (see ioa --help)`, first.slice(0, 40))
    }
    const args = parseCommandArgs(spec, rest)
    if (args.flag('help')) {
      stdout.write(commandHelp(spec) + '\n')
      return 0
    }
    const ctx: CommandContext = {
      out,
      signal: options.signal ?? new AbortController().signal,
      env: options.env ?? process.env,
      cwd: options.cwd ?? process.cwd()
    }
    return (await spec.run(args, ctx)) ?? 0
  } catch (err) {
    return out.error(errorReport(err))
  }
}

/**
 * The process entry point of `bin/ioa.js`: SIGINT / SIGTERM abort the
 * command (a second one exits at once), then the process exits with the
 * command's code once its output is flushed.
 */
export async function run (argv = process.argv.slice(2)): Promise<never> {
  const controller = new AbortController()
  const onSignal = (signal: NodeJS.Signals): void => {
    if (controller.signal.aborted) process.exit(signal === 'SIGINT' ? 130 : 143)
    controller.abort(new CliError('INTERRUPTED', `interrupted by ${signal}`))
  }
  process.on('SIGINT', onSignal)
  process.on('SIGTERM', onSignal)
  // a reader that goes away (`ioa … | head`) is not an error of ours
  process.stdout.on('error', () => {})
  process.stderr.on('error', () => {})
  const code = await main(argv, { signal: controller.signal })
  await new Promise<void>(resolve => process.stdout.write('', () => { resolve() }))
  await new Promise<void>(resolve => process.stderr.write('', () => { resolve() }))
  process.exit(code)
}
