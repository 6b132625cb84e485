/**
 * `ioa start`: run a node from a config file until SIGINT / SIGTERM. With
 * `--json` its stdout is a stream of JSON lines: `ready`, one `event` per
 * node event, `stopped` (docs/cli.md, "ioa start --json").
 */
import { resolve } from 'node:path'
import { defaultLogger } from '@libp2p/logger'
import { enableLogging } from '../../logging.js'
import { parseDid, parseMultiaddr } from '../args.js'
import { UsageError, errorReport } from '../errors.js'
import { compact, elapsed } from '../output.js'
import type { NodeConfig } from '../../config.js'
import type { NodeLogEvent, StartedNode } from '../../start.js'
import type { Args, CommandContext, CommandSpec } from '../args.js'
import type { Output } from '../output.js'

/** The first line of `ioa start --json` */
export interface ReadyLine {
  type: 'ready'
  peerId: string
  /** Dialable addresses, each ending with /p2p/<peerId> */
  addresses: string[]
  domain: string
  agents: Array<{ key: string, did: string, name: string, skills: string[], kind: 'module' | 'command' | 'card' }>
  /** The domain gateway, when the config runs one: its domain and the addresses of its inner node */
  gateway: null | { domain: string, addresses: string[] }
  /** The management HTTP server's URL (`management.http`, `--http`), e.g. `http://127.0.0.1:9464`, else null */
  http: string | null
  /**
   * The one URL that logs the operator in to the management HTTP server (it
   * carries the token: spec/management.md 2.2), else null
   */
  login: string | null
}

/** One node event of `ioa start --json` */
export interface EventLine {
  type: 'event'
  /** ms since the Unix epoch */
  at: number
  /** An agent's config key, or `node` */
  source: string
  event: string
  data: Record<string, unknown>
}

export const startCommand: CommandSpec = {
  name: 'start',
  summary: 'run a node (its agents, gateway) from a config file until Ctrl-C',
  usage: ['start [--config <file>] [--listen <multiaddr>]... [--bootstrap <multiaddr>]... [--data-dir <dir>] [--domain <domain>] [--trust-root <did>]... [--gateway-bootstrap <multiaddr>]... [--http <host:port>] [--new-identity] [--log <namespaces>] [--json]'],
  description: [
    'Starts the node described by the config file (see docs/cli.md and the config reference), with the',
    'flags replacing the config\'s fields, and prints what happens until SIGINT or SIGTERM stops it.',
    '${NAME} in the config file\'s string values is replaced by the environment variable ($${ is a',
    'literal ${; an unset variable exits 2 naming it).',
    'With --json, stdout carries JSON lines: {"type":"ready",…} first, then {"type":"event",…} per',
    'event, and {"type":"stopped"} after a clean stop.',
    'With --http (or the config\'s management.http), the node serves /metrics (Prometheus text) and the',
    'management API on that address; the login URL it prints carries the operator\'s token.',
    'With --log, the debug logs of those namespaces (ioa:node, ioa:node:agents, :config, :gateway, :keys,',
    ':cli, the other layers\' ioa:*, libp2p:*) go to stderr; stdout is unchanged.'
  ].join('\n'),
  options: {
    config: { type: 'string', value: '<file>', description: 'the node\'s JSON config file (default: an empty config)' },
    listen: { type: 'string', multiple: true, value: '<multiaddr>', description: 'address to listen on (replaces the config\'s listen)' },
    bootstrap: { type: 'string', multiple: true, value: '<multiaddr>', description: 'peer to join through, with /p2p/ (replaces the config\'s bootstrap)' },
    'data-dir': { type: 'string', value: '<dir>', description: 'LevelDB state directory (replaces the config\'s dataDir; default: in memory)' },
    domain: { type: 'string', value: '<domain>', description: 'domain of the hosted agents (replaces the config\'s domain)' },
    'trust-root': { type: 'string', multiple: true, value: '<did>', description: 'accepted root principal of delegation chains, a did:key (replaces the config\'s tasks.roots)' },
    'new-identity': { type: 'boolean', description: 'let a data directory that holds state but no node key get a new identity (never needed for a new directory)' },
    'gateway-bootstrap': { type: 'string', multiple: true, value: '<multiaddr>', description: 'peer of the domain network the gateway joins (sets gateway.bootstrap)' },
    http: { type: 'string', value: '<host:port>', description: 'serve /metrics and the management API there, e.g. 127.0.0.1:9464 or 127.0.0.1:0 (sets management.http)' },
    log: { type: 'string', value: '<namespaces>', description: 'debug log namespaces to stderr, as DEBUG takes them (e.g. \'ioa:*\', \'ioa:node*,libp2p:dial*\')' }
  },
  examples: [
    'ioa start --config node.json',
    'ioa start --config hotel.json --bootstrap /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW… --json',
    'ioa start --config node.json --log \'ioa:*\'',
    'ioa start --config node.json --http 127.0.0.1:9464'
  ],
  run: runStart
}

/** The config of the file with the flags applied, validated */
export async function startConfig (args: Args, cwd: string, env: Record<string, string | undefined> = process.env): Promise<NodeConfig> {
  const { loadConfig, parseConfig } = await import('../../config.js')
  const file = args.string('config')
  const base: NodeConfig = file != null ? await loadConfig(resolve(cwd, file), { env }) : {}
  const config: NodeConfig = { ...base }
  const listen = await Promise.all(args.strings('listen').map(async a => parseMultiaddr(a, '--listen', false)))
  if (listen.length > 0) config.listen = listen
  const bootstrap = await Promise.all(args.strings('bootstrap').map(async a => parseMultiaddr(a, '--bootstrap', true)))
  if (bootstrap.length > 0) config.bootstrap = bootstrap
  const dataDir = args.string('data-dir')
  if (dataDir != null) config.dataDir = resolve(cwd, dataDir)
  const domain = args.string('domain')
  if (domain != null) config.domain = domain
  const roots = await Promise.all(args.strings('trust-root').map(async r => parseDid(r, '--trust-root')))
  if (roots.length > 0) config.tasks = { ...config.tasks, roots }
  const gatewayBootstrap = await Promise.all(args.strings('gateway-bootstrap').map(async a => parseMultiaddr(a, '--gateway-bootstrap', true)))
  if (gatewayBootstrap.length > 0) {
    if (config.gateway == null) throw new UsageError('--gateway-bootstrap: the config runs no gateway (add a "gateway" section)', '--gateway-bootstrap')
    config.gateway = { ...config.gateway, bootstrap: gatewayBootstrap }
  }
  const http = args.string('http')
  // --http sets the address; limits the config gives with it (management.http as an object) stay
  const given = config.management?.http
  if (http != null) config.management = { ...config.management, http: given != null && typeof given === 'object' ? { ...given, listen: http } : http }
  try {
    return parseConfig(config)
  } catch (err) {
    // the flag's value is checked as the config field it sets
    const field = (err as { field?: string }).field
    if (http != null && (field === 'management.http' || field === 'management.http.listen')) throw new UsageError(`--http: ${(err as Error).message.replace(/^Invalid config at "management.http(\.listen)?": /, '')}`, '--http')
    throw err
  }
}

/** An address with the node's /p2p/ suffix */
function withPeer (addr: string, peerId: string): string {
  return addr.includes('/p2p/') ? addr : `${addr}/p2p/${peerId}`
}

export function readyLine (started: StartedNode): ReadyLine {
  const node = started.node
  const peerId = node.transport.peerId.toString()
  const gateway = node.gateway
  return {
    type: 'ready',
    peerId,
    addresses: node.addresses().map(a => withPeer(a, peerId)),
    domain: node.interconnect.domain,
    agents: started.agents.map(r => ({
      key: r.config.key,
      did: r.agent.did,
      name: r.agent.card.card.name,
      skills: r.agent.card.card.skills.map(s => s.id),
      kind: r.kind
    })),
    gateway: gateway != null
      ? { domain: gateway.gateway.domain, addresses: gateway.addresses().map(a => withPeer(a, gateway.inner.peerId.toString())) }
      : null,
    http: node.management?.http?.url ?? null,
    login: node.management?.http?.loginUrl ?? null
  }
}

async function runStart (args: Args, ctx: CommandContext): Promise<number> {
  const out = ctx.out
  const t0 = Date.now()
  const namespaces = args.string('log')
  if (namespaces != null) {
    if (namespaces.trim() === '') throw new UsageError('--log needs namespaces, e.g. \'ioa:*\'', '--log')
    // before the node is created, so that its loggers see the namespaces
    enableLogging(namespaces)
  }
  const config = await startConfig(args, ctx.cwd, ctx.env)

  // events that happen while the node starts wait for the ready line
  let pending: NodeLogEvent[] | undefined = []
  const write = (e: NodeLogEvent): void => { printEvent(out, e, t0) }
  const onEvent = (e: NodeLogEvent): void => {
    if (pending != null) {
      if (pending.length < 10_000) pending.push(e)
      return
    }
    write(e)
  }

  out.progress('starting the node…')
  const { startFromConfig } = await import('../../start.js')
  // a data directory that does not open is a typed DataDirError (docs/cli.md, "Errors")
  const started: StartedNode = await startFromConfig(config, { onEvent, env: ctx.env, cwd: ctx.cwd, ...(args.flag('new-identity') ? { overrides: { newIdentity: true } } : {}) })
  const ready = readyLine(started)
  if (out.json) out.emit(ready)
  else printHeader(out, ready, t0)
  const early = pending
  pending = undefined
  for (const e of early) write(e)

  // when the agents' DHT announcements have been made (or tried), say so
  if (ready.agents.length > 0) {
    void started.node.interconnect.announced({ signal: ctx.signal }).then(() => {
      if (!ctx.signal.aborted) onEvent({ at: Date.now(), source: 'node', event: 'announced', data: { agents: ready.agents.length } })
    }, (err) => {
      // the stop aborted the wait, or an announcement failed: no `announced` line then
      defaultLogger().forComponent('ioa:node:cli')('announcements not confirmed: %s', (err as Error)?.message ?? err)
    })
  }

  if (!ctx.signal.aborted) {
    await new Promise<void>(resolve => { ctx.signal.addEventListener('abort', () => { resolve() }, { once: true }) })
  }
  out.progress('stopping…')
  try {
    await started.stop()
  } catch (err) {
    return out.error({ ...errorReport(err), message: `stop failed: ${errorReport(err).message}` })
  }
  if (out.json) out.emit({ type: 'stopped' })
  else out.print(`${elapsed(Date.now(), t0)}  node  stopped`)
  return 0
}

function printHeader (out: Output, ready: ReadyLine, t0: number): void {
  out.print(`node ${ready.peerId}  (domain ${ready.domain}, up in ${Date.now() - t0} ms)`)
  out.print('listening on')
  for (const a of ready.addresses) out.print(`  ${a}`)
  if (ready.agents.length === 0) out.print('agents: none')
  else out.print('agents')
  for (const a of ready.agents) {
    out.print(`  ${a.key}  ${a.name}  [${a.kind}]`)
    out.print(`    did     ${a.did}`)
    out.print(`    skills  ${a.skills.join(', ')}`)
  }
  if (ready.gateway != null) {
    out.print(`gateway of ${ready.gateway.domain}; its domain network joins through`)
    for (const a of ready.gateway.addresses) out.print(`  ${a}`)
  }
  if (ready.http != null) {
    out.print(`management on ${ready.http} (/metrics); the dashboard: open (once, it holds the operator's token)`)
    out.print(`  ${ready.login ?? ''}`)
  }
  out.print('press Ctrl-C to stop')
  out.print('')
}

function printEvent (out: Output, e: NodeLogEvent, t0: number): void {
  if (out.json) {
    const line: EventLine = { type: 'event', at: e.at, source: e.source, event: e.event, data: e.data ?? {} }
    out.emit(line)
    return
  }
  const text = typeof e.data?.text === 'string' ? e.data.text : compact(e.data)
  out.print(`${elapsed(e.at, t0)}  ${e.source}  ${e.event}  ${text}`)
}
