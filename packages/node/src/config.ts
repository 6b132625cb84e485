/**
 * The node's configuration file: JSON, validated with clear errors that name
 * the bad field.
 */
import { readFile } from 'node:fs/promises'
import { dirname, resolve } from 'node:path'
import { MAX_CARDS_PER_LIST, SkillSchema } from '@ioa/interconnect'
import { MESSAGING_DEFAULTS } from '@ioa/transport'
import { z } from 'zod'
import { substituteEnv } from './config-env.js'
import { CapabilityString, DidString, ListenAddr, MAX_TIMER_MS, PeerAddr, PeerIdString, duration } from './config-fields.js'
import { ConfigError } from './errors.js'
import { GrantFields, HttpConfig } from './config-management.js'

export { ConfigError }

const SkillConfig = z.object({
  id: CapabilityString,
  name: z.string().max(100).optional(),
  description: z.string().max(2000).optional(),
  tags: z.array(z.string().min(1).max(32)).max(16).optional(),
  /** A JSON Schema, bounded as on cards (16 KiB of DAG-CBOR, 32 levels, 2,048 items) */
  inputSchema: SkillSchema.shape.inputSchema,
  outputSchema: SkillSchema.shape.outputSchema
}).strict()

const AgentConfig = z.object({
  /** Key name in the node's key store: the same name keeps the same agent id */
  key: z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, 'letters, digits, ".", "_" or "-" (1-64)'),
  name: z.string().min(1).max(100),
  description: z.string().max(2000).optional(),
  domain: z.string().min(1).max(253).optional(),
  skills: z.array(SkillConfig).min(1).max(32),
  /**
   * A JavaScript module (path relative to the config file) whose default
   * export builds the agent's skill handlers (see `AgentModule`)
   */
  module: z.string().min(1).optional(),
  /**
   * An external agent program (argv; relative paths are resolved from the
   * config file's directory) speaking the local agent protocol on stdio
   * (`spec/node-agents.md`)
   */
  command: z.array(z.string().min(1)).min(1).max(64).optional(),
  /** Passed to the module (`ctx.options`) or, as JSON, to the program (`IOA_AGENT_OPTIONS`) */
  options: z.record(z.string(), z.unknown()).optional()
}).strict().refine(a => a.module == null || a.command == null, { message: 'an agent has a module or a command, not both', path: ['command'] })

/**
 * Tasks of `skill` (a skill pattern as in tokens: a capability name, `name.*`
 * or `*`; checked when the node is built) wait for their root principal's
 * approval: always, or when an input field is above its bound (a field that
 * is missing or not a number asks too)
 */
const ApprovalRule = z.object({
  skill: z.string().min(1).max(130),
  /** e.g. `{ "amount": 200 }` @default always ask */
  above: z.record(z.string().min(1).max(64), z.number()).refine(m => Object.keys(m).length <= 16, 'at most 16 fields').optional(),
  /** Shown to the approver (`task.auth.reason`) @default 'Approval by the principal required' */
  reason: z.string().min(1).max(512).optional()
}).strict()


/** A skill name or pattern of a token (`shop.order`, `shop.*`, `*`): the capability grammar of spec/interconnect.md */
const SkillPattern = z.string().max(130).regex(/^(\*|[a-z][a-z0-9-]{0,31}(\.[a-z][a-z0-9-]{0,31}){0,7}(\.\*)?)$/, 'a skill name or pattern such as shop.order, shop.* or *')

const TasksConfig = z.object({
  /** Executor heartbeat interval in ms; a requester reports a lapse after 3× this @default 1_000 */
  leaseInterval: duration(50, 20_000).optional(),
  /** Accepted root principals of delegation chains @default any */
  roots: z.array(DidString).max(256).optional(),
  /**
   * Enforce the constraints of the authorizing capability (maxAmount, currency, …) on task inputs:
   * `true` for every skill, or `{ skills, ignore }`: only the skills these names or patterns cover,
   * without the constraint keys of `ignore` @default false
   */
  enforceConstraints: z.union([z.boolean(), z.object({
    skills: z.array(SkillPattern).min(1).max(64).optional(),
    ignore: z.array(z.string().min(1).max(64)).max(32).optional()
  }).strict()]).optional(),
  /** Tasks that wait for their root principal's approval (spec/collab-tasks.md 4.2) @default [] (none) */
  approvals: z.array(ApprovalRule).max(64).optional(),
  /**
   * Skills (names or patterns) whose requests must carry their own signature
   * (envelope mode: payments, anything audited); a session-mode request for
   * one is refused with ENVELOPE_REQUIRED (spec/collab-tasks.md 2.6.5) @default [] (none)
   */
  requireEnvelope: z.array(SkillPattern).max(64).optional(),
  /**
   * How this node's agents authenticate their requests: `session` (a binding
   * signed once per connection, where the executor serves it) or `envelope`
   * (every request signed) (spec/collab-tasks.md 2.6) @default 'session'
   */
  auth: z.enum(['session', 'envelope']).optional(),
  /** Longest delegation chain @default 8 */
  maxDepth: z.number().int().min(1).max(32).optional(),
  /** Clock skew tolerated on token and envelope times, ms @default 30_000 */
  clockSkew: duration(0, 600_000).optional(),
  /**
   * A task that no stream (submit or resubscribe) follows for this long is
   * canceled with ABANDONED, ms; at least `leaseInterval` @default 3 × leaseInterval
   */
  abandonAfter: duration(50, 86_400_000).optional(),
  /** Active (non-terminal) tasks one remote peer may have here at once (fair share) @default 64 */
  maxActiveTasksPerPeer: z.number().int().min(1).max(1_000_000).optional(),
  /** Active tasks of one caller agent (the envelope's sender) at once @default 64 */
  maxActiveTasksPerCaller: z.number().int().min(1).max(1_000_000).optional(),
  /** Active tasks submitted from one remote IPv4 address or IPv6 /64 at once @default 256 */
  maxActiveTasksPerAddress: z.number().int().min(1).max(1_000_000).optional(),
  /** How long and how many finished tasks (and their idempotency keys) are kept */
  retention: z.object({
    /** Longest a finished task is kept after it ended, ms (compared with task end times, never a timer's delay) @default 86_400_000 */
    maxAge: z.number().int().min(1).max(31_536_000_000).optional(),
    /** Most finished tasks kept; the oldest are removed first @default 10_000 */
    maxTasks: z.number().int().min(1).max(100_000_000).optional()
  }).strict().optional()
}).strict().refine(t => t.abandonAfter == null || t.abandonAfter >= (t.leaseInterval ?? 1_000), {
  message: 'abandonAfter must be at least leaseInterval (1,000 ms unless set)',
  path: ['abandonAfter']
})

const GatewayConfig = z.object({
  /** The domain whose agents this gateway exports @default the node's domain */
  domain: z.string().min(1).max(253).optional(),
  /** Listen addresses of the gateway's node in the domain network @default ['/ip4/127.0.0.1/tcp/0'] */
  listen: z.array(ListenAddr).max(16).optional(),
  /** Peers of the domain network to join through @default [] */
  bootstrap: z.array(PeerAddr).max(64).optional(),
  /** What is exported; nothing is unless a rule covers it */
  exports: z.array(z.object({
    skill: z.string().min(1).max(128),
    domains: z.array(z.string().min(1).max(253)).max(64).optional()
  }).strict()).min(1).max(256),
  /** Capability prefixes looked up in the domain for '*' rules @default [] */
  innerCapabilities: z.array(z.string().min(1).max(128)).max(64).optional(),
  /** Requests each outside peer may make per period @default { requests: 50, per: 1000 } */
  rateLimit: z.object({ requests: z.number().int().positive().max(1_000_000), per: duration(1) }).strict().optional(),
  /** How often the domain's agents are looked up again, ms @default 30_000 */
  refreshInterval: duration(100).optional(),
  /** Forward the `trace` field of relayed 2.0.0 requests into the domain (spec/management.md 3.4) @default false (stripped) */
  keepTrace: z.boolean().optional()
}).strict()

/** The node's tracing (spec/management.md 3): where spans go, how many traces are sampled */
const TracingConfig = z.object({
  /** URL of an OTLP/HTTP traces endpoint (JSON), e.g. `http://127.0.0.1:4318/v1/traces` */
  otlp: z.string().max(2048).refine(s => {
    try {
      const u = new URL(s)
      return u.protocol === 'http:' || u.protocol === 'https:'
    } catch {
      return false
    }
  }, 'not an http(s) URL'),
  /** Share of new traces sampled, 0-1 (a continued trace follows its parent's decision) @default 1 */
  sampleRatio: z.number().min(0).max(1).optional(),
  /** `service.name` of the node's spans @default 'ioa-node' */
  serviceName: z.string().min(1).max(128).optional()
}).strict()

/**
 * The management plane (spec/management.md): metrics, the management HTTP
 * server, the node's role. A node without this section loads none of it.
 */
const ManagementConfig = z.object({
  /**
   * Where the management HTTP server listens (`host:port`; an IPv6 host in
   * brackets; port 0 picks a free one): `/metrics` and the operator's API;
   * or `{ listen, allowedHosts, maxConnections, …, dashboard: { maxEvents, … } }`
   * with the server's and the dashboard's limits (config-management.ts)
   * @default undefined (no HTTP server; metrics are still collected)
   */
  http: HttpConfig.optional(),
  /** `agent`: this node is a management agent that aggregates its domain's snapshots @default undefined (a plain node) */
  role: z.enum(['agent']).optional(),
  /** The operator's did:key: delegations for `ioa.manage.*` must come from it @default undefined */
  operator: DidString.optional(),
  /** Traces of the node's tasks (spec/management.md 3), exported over OTLP/HTTP @default undefined (no tracing: the OpenTelemetry SDK is not loaded) */
  tracing: TracingConfig.optional(),
  ...GrantFields
}).strict().superRefine((m, ctx) => {
  for (const field of ['proofs', 'proofsFile'] as const) {
    if (m[field] != null && m.role !== 'agent') ctx.addIssue({ code: 'custom', path: [field], message: 'a management agent\'s grant: only with role "agent"' })
  }
  if (m.proofs != null && m.proofsFile != null) ctx.addIssue({ code: 'custom', path: ['proofsFile'], message: 'give the grant as proofs or proofsFile, not both' })
})

/** The interconnect's cache bounds: discovery results, routes, card bytes, ranking history */
const InterconnectLimits = z.object({
  maxCachedLookups: z.number().int().positive().optional(),
  maxCachedRoutes: z.number().int().positive().optional(),
  maxCacheBytes: z.number().int().positive().optional(),
  maxResultsPerLookup: z.number().int().positive().optional(),
  maxCardsPerProvider: z.number().int().positive().max(MAX_CARDS_PER_LIST).optional(),
  maxHistory: z.number().int().positive().optional()
}).strict()

/** Smallest `limits.maxFrameSize`: a task frame with its envelope and a delegation chain needs a few KiB */
const MIN_FRAME_SIZE = 4096
/** Largest `limits.maxFrameSize`: one frame must fit the per-peer buffer budget (`maxBufferedPerPeer`, 8 MiB) with room to spare */
const MAX_FRAME_SIZE = Math.min(4_194_304, MESSAGING_DEFAULTS.maxBufferedPerPeer / 2)

export { MAX_TIMER_MS }

export const NodeConfigSchema = z.object({
  /** Addresses to listen on @default ['/ip4/127.0.0.1/tcp/0'] */
  listen: z.array(ListenAddr).max(16).optional(),
  /** Multiaddrs (with /p2p/…) of peers to join through @default [] */
  bootstrap: z.array(PeerAddr).max(64).optional(),
  /** Directory of the node's LevelDB state (keys, agents, journals); relative to the config file @default in memory */
  dataDir: z.string().min(1).optional(),
  /**
   * How the node's keys are kept at rest in `dataDir` (spec/interconnect.md §1.3): encrypted with
   * the passphrase in `passphraseFile` (relative to the config file) or, when it names none, in
   * the file `$IOA_KEY_PASSPHRASE_FILE` names or in `$IOA_KEY_PASSPHRASE`; `insecurePlaintext` lets a data directory run without a passphrase
   * (unencrypted test keys) @default {} (a data directory needs a passphrase)
   */
  keyStore: z.object({
    passphraseFile: z.string().min(1).optional(),
    insecurePlaintext: z.boolean().optional()
  }).strict().optional(),
  /** Organisation of the hosted agents @default 'local' */
  domain: z.string().min(1).max(253).regex(/^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$/, 'a lower-case domain name').optional(),
  /** Agents hosted by this node (handlers are attached in code, or by external agent programs) */
  agents: z.array(AgentConfig).max(1024).optional(),
  limits: z.object({
    /** Largest frame body sent or accepted, bytes (4 KiB … 4 MiB) @default 1_048_576 */
    maxFrameSize: z.number().int().min(MIN_FRAME_SIZE).max(MAX_FRAME_SIZE).optional(),
    /** Calls one remote peer may have running here @default 64 */
    maxInFlightPerPeer: z.number().int().min(1).max(100_000).optional(),
    /** How long a call waits for its answer, ms (100 … 2^31-1) @default 10_000 */
    requestTimeout: duration(100).optional(),
    /** Open connections @default 300 */
    maxConnections: z.number().int().min(1).max(1_000_000).optional(),
    /**
     * IP prefixes (`/ip4/127.0.0.1`, `/ip4/10.0.0.0/ipcidr/8`) whose
     * connections bypass maxConnections and libp2p's inbound rate limit; only
     * for hosts you control (a demo of many nodes on one machine) @default []
     */
    allow: z.array(z.string().max(256).regex(/^\/ip[46]\/[^/]+(\/ipcidr\/\d{1,3})?$/, 'an IP prefix such as /ip4/127.0.0.1 or /ip4/10.0.0.0/ipcidr/8')).max(64).optional(),
    /** The interconnect's cache bounds (`InterconnectInit`, spec/interconnect.md 7 and 10) @default the interconnect's defaults */
    interconnect: InterconnectLimits.optional()
  }).strict().optional(),
  /** DHT provider-record lifetime in ms @default 600_000 */
  providerTtl: duration(1000).optional(),
  /** Task service: leases, trusted roots, constraint enforcement, fair share, abandonment, retention */
  tasks: TasksConfig.optional(),
  /**
   * This node is inside a domain network, reachable from outside only through
   * these gateways: its agents' cards name the gateways and carry no
   * addresses, and only the gateways' inner nodes may ask for export cards
   */
  behindGateways: z.array(z.object({
    /** Peer id of the gateway's node in the public network */
    outer: PeerIdString,
    /** Peer id of the gateway's node in the domain network */
    inner: PeerIdString
  }).strict()).min(1).max(16).optional(),
  /** Run a domain gateway: a second node in the domain network, exporting selected skills here */
  gateway: GatewayConfig.optional(),
  /**
   * Key file (relative to the config file) of the domain network's
   * pre-shared key (`ioa key new --domain-psk`). The domain network is
   * private: the gateway's inner node (with `gateway`) or this node (with
   * `behindGateways`) connects only to holders of the key. Required (or
   * `domainPsk`, or $IOA_DOMAIN_PSK_FILE / $IOA_DOMAIN_PSK) with
   * `behindGateways` or `gateway`, refused without them
   * @default $IOA_DOMAIN_PSK_FILE
   */
  domainPskFile: z.string().min(1).max(4096).optional(),
  /** The pre-shared key inline (the key file's text, or its 64 hex digits); prefer `domainPskFile` @default $IOA_DOMAIN_PSK */
  domainPsk: z.string().min(1).max(1024).optional(),
  /** The management plane: metrics, the management HTTP server (`http`), the node's role and operator @default undefined (none of it is loaded) */
  management: ManagementConfig.optional()
}).strict().superRefine((c, ctx) => {
  // two agents with one key would be one identity: the second is refused at start, so name it here
  const seen = new Map<string, number>()
  for (const [i, a] of (c.agents ?? []).entries()) {
    const first = seen.get(a.key)
    if (first != null) ctx.addIssue({ code: 'custom', path: ['agents', i, 'key'], message: `key "${a.key}" is also the key of agents.${first}: each agent needs its own key` })
    else seen.set(a.key, i)
  }
})

export type NodeConfig = z.output<typeof NodeConfigSchema>
export type AgentConfig = z.output<typeof AgentConfig>
export type GatewayConfig = z.output<typeof GatewayConfig>
export type TasksConfig = z.output<typeof TasksConfig>
export type ApprovalRuleConfig = z.output<typeof ApprovalRule>

/**
 * Validate a configuration object. Throws `ConfigError` naming the first bad
 * field.
 */
export function parseConfig (value: unknown): NodeConfig {
  const result = NodeConfigSchema.safeParse(value)
  if (!result.success) {
    const issue = result.error.issues[0]
    const field = issue.path.join('.')
    const detail = issue.code === 'unrecognized_keys'
      ? `unknown field${issue.keys.length > 1 ? 's' : ''} ${issue.keys.map(k => `"${k}"`).join(', ')}`
      : issue.message
    throw new ConfigError(`Invalid config${field !== '' ? ` at "${field}"` : ''}: ${detail}`, field !== '' ? field : undefined)
  }
  return result.data
}

export interface LoadConfigOptions {
  /** Where `${NAME}` in the file's string values is looked up @default process.env */
  env?: Record<string, string | undefined>
}

/**
 * Read and validate a JSON configuration file (UTF-8, a leading byte order
 * mark is skipped): `${NAME}` in its string values is replaced by the
 * environment variable (`$${` is a literal `${`; an unset variable is a
 * `ConfigError` naming it), then the relative paths are resolved against the
 * file's directory
 */
export async function loadConfig (path: string, options: LoadConfigOptions = {}): Promise<NodeConfig> {
  let text: string
  try {
    text = await readFile(path, 'utf8')
  } catch (err: any) {
    throw new ConfigError(`Cannot read config file ${path}: ${err?.code ?? err?.message ?? err}`)
  }
  // editors on some systems start UTF-8 files with a byte order mark; JSON.parse refuses it
  if (text.charCodeAt(0) === 0xFEFF) text = text.slice(1)
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch (err: any) {
    throw new ConfigError(`Config file ${path} is not valid JSON: ${err?.message ?? err}`)
  }
  return resolvePaths(parseConfig(substituteEnv(json, options.env ?? process.env)), dirname(resolve(path)))
}

/**
 * Resolve the config's relative paths (data directory, key file, agent
 * modules and programs) against `baseDir`
 */
export function resolvePaths (config: NodeConfig, baseDir: string): NodeConfig {
  const out: NodeConfig = { ...config }
  if (out.dataDir != null) out.dataDir = resolve(baseDir, out.dataDir)
  if (out.domainPskFile != null) out.domainPskFile = resolve(baseDir, out.domainPskFile)
  if (out.management?.proofsFile != null) out.management = { ...out.management, proofsFile: resolve(baseDir, out.management.proofsFile) }
  if (out.keyStore?.passphraseFile != null) out.keyStore = { ...out.keyStore, passphraseFile: resolve(baseDir, out.keyStore.passphraseFile) }
  if (out.agents != null) {
    out.agents = out.agents.map(a => ({
      ...a,
      ...(a.module != null ? { module: resolve(baseDir, a.module) } : {}),
      ...(a.command != null ? { command: a.command.map((arg, i) => relativePath(arg, i) ? resolve(baseDir, arg) : arg) } : {})
    }))
  }
  return out
}

/** An argument that names a file relative to the config (./x, ../x, or the program itself when it has a slash) */
function relativePath (arg: string, index: number): boolean {
  if (arg.startsWith('./') || arg.startsWith('../')) return true
  return index === 0 && arg.includes('/') && !arg.startsWith('/')
}
