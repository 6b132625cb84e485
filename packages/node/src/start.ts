/**
 * Start a node from a validated config: the node with its layers, a domain
 * gateway when configured, and the hosted agents with their handlers (a
 * JavaScript module, or an external program on stdio).
 */
import { pathToFileURL } from 'node:url'
import { defaultLogger } from '@libp2p/logger'
import { programProblem } from './agents/program.js'
import { ConfigError, parseConfig } from './config.js'
import { readGrantFile } from './config-management.js'
import { domainKeySource } from './domain-key.js'
import { startExternalAgent } from './external-agent.js'
import { createIoaNode, initFromConfig } from './ioa-node.js'
import { attempt } from './logging.js'
import { keyStoreFromConfig } from './passphrase.js'
import type { AgentConfig, NodeConfig } from './config.js'
import type { ExternalAgent } from './external-agent.js'
import type { IoaLayer, IoaNode, IoaNodeInit } from './ioa-node.js'
import type { SkillHandler } from '@ioa/collab'
import type { HostedAgent } from '@ioa/interconnect'

/** What an agent module's default export receives */
export interface AgentModuleContext {
  readonly node: IoaNode
  /** The agent, hosted (its card is published once the module returns) */
  readonly agent: HostedAgent
  /** The agent's `options` from the config */
  readonly options: Record<string, unknown>
  /** Report something worth showing (the `ioa start` timeline prints it) */
  log(event: string, data?: Record<string, unknown>): void
  /** Aborted when the node stops */
  readonly signal: AbortSignal
}

/** What an agent module returns: its skill handlers and optional lifecycle hooks */
export interface AgentImplementation {
  handlers?: Record<string, SkillHandler>
  /** Called once every agent of the node is hosted and serving */
  start?(): void | Promise<void>
  stop?(): void | Promise<void>
}

/** The default export of an agent module */
export type AgentModule = (ctx: AgentModuleContext) => AgentImplementation | Promise<AgentImplementation>

/** An event of a node started from a config */
export interface NodeLogEvent {
  at: number
  /** Who reports: an agent's config key, or `node` */
  source: string
  event: string
  data: Record<string, unknown>
}

export interface StartFromConfigOptions {
  /** Receives agents' `log` events and the node's task events */
  onEvent?(event: NodeLogEvent): void
  /** Custom layers to stack on the node */
  layers?: IoaLayer[]
  /** Node options that override the config's (e.g. a datastore) */
  overrides?: Partial<IoaNodeInit>
  /** Where `IOA_DOMAIN_PSK_FILE` / `IOA_DOMAIN_PSK`, `$IOA_KEY_PASSPHRASE_FILE` and `$IOA_KEY_PASSPHRASE` are read @default process.env */
  env?: Record<string, string | undefined>
  /** Base of a relative `IOA_DOMAIN_PSK_FILE` @default process.cwd() */
  cwd?: string
}

export interface RunningAgent {
  readonly config: AgentConfig
  readonly agent: HostedAgent
  readonly kind: 'module' | 'command' | 'card'
}

export interface StartedNode {
  readonly node: IoaNode
  readonly agents: RunningAgent[]
  stop(): Promise<void>
}

/**
 * Start a node from a config (already resolved against its file with
 * `loadConfig`): host its agents and attach their handlers. Throws
 * `ConfigError` for a bad config or an agent module that cannot be loaded.
 */
export async function startFromConfig (config: NodeConfig | unknown, options: StartFromConfigOptions = {}): Promise<StartedNode> {
  const c = parseConfig(config)
  let log = defaultLogger().forComponent('ioa:node:config')
  const emit = (source: string, event: string, data: Record<string, unknown> = {}): void => {
    try {
      options.onEvent?.({ at: Date.now(), source, event, data })
    } catch (err) {
      // a listener's failure is its own: logged, the node goes on
      log.error('onEvent listener failed on %s %s: %e', source, event, err)
    }
  }
  if (c.gateway != null) {
    const i = (c.agents ?? []).findIndex(a => a.module != null || a.command != null)
    if (i >= 0) throw new ConfigError('A gateway node relays tasks for its domain and cannot serve tasks of its own: host the agent on another node', `agents.${i}`)
  }
  const modules: Array<{ ref: AgentConfig, impl: AgentModule }> = []
  for (const [i, a] of (c.agents ?? []).entries()) {
    if (a.module == null) continue
    let mod: { default?: unknown }
    try {
      mod = await import(pathToFileURL(a.module).href)
    } catch (err: any) {
      const hint = err?.code === 'ERR_UNKNOWN_FILE_EXTENSION' && /\.[cm]?ts$/.test(a.module)
        ? ' (this Node.js loads JavaScript modules only: compile it with tsc and name the .js file, or run node with a TypeScript loader such as --import tsx)'
        : ''
      throw new ConfigError(`Cannot load agent module ${a.module}: ${err?.message ?? err}${hint}`, `agents.${i}.module`)
    }
    if (typeof mod.default !== 'function') {
      throw new ConfigError(`Agent module ${a.module} has no default export function`, `agents.${i}.module`)
    }
    modules.push({ ref: a, impl: mod.default as AgentModule })
  }
  for (const [i, a] of (c.agents ?? []).entries()) {
    // `node` is the Node.js running this process (below)
    if (a.command == null || a.command[0] === 'node') continue
    const problem = await programProblem(a.command[0])
    if (problem != null) throw new ConfigError(`Agent ${a.key}: cannot run its command: ${problem}`, `agents.${i}.command`)
  }

  const keyOptions = { env: options.env ?? process.env, cwd: options.cwd }
  const init = { ...initFromConfig(c, keyOptions), ...options.overrides, layers: options.layers ?? options.overrides?.layers }
  // the passphrase protects keys at rest: read only when the node keeps any
  if (options.overrides?.keyStore == null && (init.dataDir != null || init.datastore != null)) {
    const { exposed, ...keyStore } = await keyStoreFromConfig(c, options.env)
    init.keyStore = keyStore
    if (exposed != null) emit('node', 'warning', { text: exposed })
    if (keyStore.passphrase == null && keyStore.insecurePlaintext === true && init.dataDir != null) {
      emit('node', 'warning', { text: `the keys in ${init.dataDir} are stored unencrypted (keyStore.insecurePlaintext): test keys only` })
    }
  }
  // a management agent's grant in a file (management.proofsFile) is read here, where the config's other files are
  if (c.management?.proofsFile != null && init.management != null) init.management = { ...init.management, proofs: await readGrantFile(c.management.proofsFile) }
  const node = await createIoaNode(init).catch((err) => {
    // a key file that cannot be read or parsed is a config error of its field
    if ((err as Error)?.name === 'InvalidDomainKeyError') throw new ConfigError((err as Error).message, domainKeySource(c, keyOptions)?.field)
    // so is a management address that cannot be listened on (a port taken)
    if ((err as Error)?.name === 'HttpListenError') throw new ConfigError((err as Error).message, 'management.http', { cause: err })
    // and a management agent's grant that cannot work (another key's, expired)
    if ((err as Error)?.name === 'InvalidGrantError') throw new ConfigError((err as Error).message, c.management?.proofsFile != null ? 'management.proofsFile' : 'management.proofs', { cause: err })
    throw err
  })
  log = node.logger.forComponent('ioa:node:config')
  if (node.keyStore.migrated > 0) {
    emit('node', 'keys-migrated', { count: node.keyStore.migrated, text: `encrypted ${node.keyStore.migrated} plaintext key(s) of ${init.dataDir ?? 'the datastore'}; the plaintext is deleted` })
  }
  const controller = new AbortController()
  const running: RunningAgent[] = []
  const impls: AgentImplementation[] = []
  const externals: ExternalAgent[] = []
  const offTasks = node.events.onTask(e => {
    const source = running.find(r => r.agent.did === e.agent)?.config.key ?? 'node'
    const { type, ...data } = e
    emit(source, type, data)
  })
  const offGateway = node.events.onGateway(e => {
    const { type, ...data } = e
    const who = `${e.from.slice(0, 16)}…${e.domain != null ? ` of ${e.domain}` : ''}`
    const text = type === 'relayed'
      ? `gateway: relayed ${e.skill} from ${who} to ${e.agent.slice(0, 16)}… inside ${node.gateway?.gateway.domain ?? 'the domain'}${e.refused != null ? `, refused by executor: ${e.refused.code}` : ''}`
      : `gateway: refused ${e.skill} from ${who}: ${e.code}`
    emit('gateway', type === 'relayed' ? 'gateway-relayed' : 'gateway-refused', { ...data, text })
  })

  const stop = async (): Promise<void> => {
    controller.abort()
    for (const impl of impls.reverse()) await attempt(log, 'stopping an agent module', async () => { await impl.stop?.() })
    for (const ext of externals) await attempt(log, `stopping agent program ${ext.pid ?? ''}`, async () => { await ext.stop() })
    offTasks()
    offGateway()
    await node.stop()
  }

  try {
    for (const [i, a] of (c.agents ?? []).entries()) {
      const card = { key: a.key, name: a.name, description: a.description, domain: a.domain, skills: a.skills }
      if (a.command != null) {
        const ext = await startExternalAgent(node, {
          // `node` is the Node.js running this process (PATH may lack it)
          command: a.command[0] === 'node' ? [process.execPath, ...a.command.slice(1)] : a.command,
          card,
          options: a.options,
          onEvent: (event, data) => emit(a.key, event, data),
          onLog: line => emit(a.key, 'stderr', { line })
        })
        externals.push(ext)
        running.push({ config: a, agent: ext.agent, kind: 'command' })
        continue
      }
      const entry = modules.find(m => m.ref === a)
      if (entry == null) {
        running.push({ config: a, agent: await node.host(card), kind: 'card' })
        continue
      }
      // host the card first so the module knows its agent; handlers are attached next
      const agent = await node.host(card)
      const impl = await entry.impl({
        node,
        agent,
        options: a.options ?? {},
        log: (event, data) => emit(a.key, event, data ?? {}),
        signal: controller.signal
      })
      if (impl == null || typeof impl !== 'object') {
        throw new ConfigError(`Agent module ${a.module} returned no implementation`, `agents.${i}.module`)
      }
      await node.serve(agent, impl.handlers ?? {}).catch((err) => {
        throw new ConfigError(`Agent ${a.key}: ${err?.message ?? err}`, `agents.${i}.module`)
      })
      impls.push(impl)
      running.push({ config: a, agent, kind: 'module' })
    }
    for (const impl of impls) await impl.start?.()
  } catch (err) {
    log.error('agents failed to start: %e', err)
    await attempt(log, 'stopping the node after a failed start', stop)
    throw err
  }
  log('started %d agent(s): %s', running.length, running.map(r => `${r.config.key} (${r.kind})`).join(', '))
  return { node, agents: running, stop }
}
