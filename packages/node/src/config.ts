/**
 * The node's configuration file: JSON, validated with clear errors that name
 * the bad field.
 */
import { readFile } from 'node:fs/promises'
import { dirname, resolve } from 'node:path'
import { z } from 'zod'

export class ConfigError extends Error {
  static override name = 'ConfigError'
  readonly code = 'INVALID_CONFIG'
  /** Dotted path of the bad field, e.g. `agents.0.skills` */
  readonly field?: string

  constructor (message: string, field?: string) {
    super(message)
    this.name = ConfigError.name
    this.field = field
  }
}

const SkillConfig = z.object({
  id: z.string().min(1).max(128),
  name: z.string().max(100).optional(),
  description: z.string().max(2000).optional(),
  tags: z.array(z.string().min(1).max(32)).max(16).optional(),
  inputSchema: z.record(z.string(), z.unknown()).optional(),
  outputSchema: z.record(z.string(), z.unknown()).optional()
}).strict()

const AgentConfig = z.object({
  /** Key name in the node's key store: the same name keeps the same agent id */
  key: z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, 'letters, digits, ".", "_" or "-" (1-64)'),
  name: z.string().min(1).max(100),
  description: z.string().max(2000).optional(),
  domain: z.string().min(1).max(253).optional(),
  skills: z.array(SkillConfig).min(1).max(32)
}).strict()

export const NodeConfigSchema = z.object({
  /** Addresses to listen on @default ['/ip4/127.0.0.1/tcp/0'] */
  listen: z.array(z.string().min(1)).max(16).optional(),
  /** Multiaddrs (with /p2p/…) of peers to join through @default [] */
  bootstrap: z.array(z.string().regex(/\/p2p\/[1-9A-HJ-NP-Za-km-z]+$/, 'a multiaddr ending in /p2p/<peer id>')).max(64).optional(),
  /** Directory of the node's LevelDB state (keys, agents, journals); relative to the config file @default in memory */
  dataDir: z.string().min(1).optional(),
  /** Organisation of the hosted agents @default 'local' */
  domain: z.string().min(1).max(253).regex(/^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$/, 'a lower-case domain name').optional(),
  /** Agents hosted by this node (handlers are attached in code, or by external agent programs) */
  agents: z.array(AgentConfig).max(1024).optional(),
  limits: z.object({
    maxFrameSize: z.number().int().positive().optional(),
    maxInFlightPerPeer: z.number().int().positive().optional(),
    requestTimeout: z.number().int().positive().optional(),
    maxConnections: z.number().int().positive().optional()
  }).strict().optional(),
  /** DHT provider-record lifetime in ms @default 600_000 */
  providerTtl: z.number().int().min(1000).optional()
}).strict()

export type NodeConfig = z.output<typeof NodeConfigSchema>
export type AgentConfig = z.output<typeof AgentConfig>

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

/**
 * Read and validate a JSON configuration file; `dataDir` is resolved
 * relative to the file
 */
export async function loadConfig (path: string): Promise<NodeConfig> {
  let text: string
  try {
    text = await readFile(path, 'utf8')
  } catch (err: any) {
    throw new ConfigError(`Cannot read config file ${path}: ${err?.code ?? err?.message ?? err}`)
  }
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch (err: any) {
    throw new ConfigError(`Config file ${path} is not valid JSON: ${err?.message ?? err}`)
  }
  const config = parseConfig(json)
  if (config.dataDir != null) {
    config.dataDir = resolve(dirname(path), config.dataDir)
  }
  return config
}
