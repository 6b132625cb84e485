/**
 * `IoaNode`: one object that stacks the transport, interconnect and
 * collaboration layers on one libp2p node and owns their lifecycle.
 */
import { RevocationStore, createRevocation, createRevocationService, createTaskService, delegate } from '@ioa/collab'
import { createInterconnect } from '@ioa/interconnect'
import { createTransportNode, openDatastore } from '@ioa/transport'
import { parseConfig } from './config.js'
import type { NodeConfig } from './config.js'
import type { DelegateInit, RevocationService, SkillHandler, TaskService, TaskServiceInit, Token } from '@ioa/collab'
import type { DiscoveredAgent, DiscoverOptions, DiscoveryQuery, HostAgentInit, HostedAgent, InboxHandler, Interconnect, InterconnectInit } from '@ioa/interconnect'
import type { MessagingInit, TransportNode, TransportNodeInit } from '@ioa/transport'
import type { AbortOptions } from '@libp2p/interface'
import type { Datastore } from 'interface-datastore'

export interface IoaNodeInit {
  /**
   * Addresses to listen on
   *
   * @default ['/ip4/127.0.0.1/tcp/0']
   */
  listen?: string[]

  /**
   * Peers to join through
   *
   * @default []
   */
  bootstrap?: string[]

  /**
   * Directory of the node's LevelDB state: the node key, agent keys, task
   * snapshots, revocations, orchestration journals. Without it all state is
   * in memory and lost when the node stops.
   *
   * @default undefined
   */
  dataDir?: string

  /**
   * A datastore to use instead of `dataDir` (the caller closes it)
   *
   * @default undefined
   */
  datastore?: Datastore

  /**
   * Organisation of the hosted agents
   *
   * @default 'local'
   */
  domain?: string

  /**
   * Transport options passed to `createTransportNode`
   *
   * @default {}
   */
  transport?: Omit<TransportNodeInit, 'listen' | 'bootstrap' | 'dataDir' | 'datastore'>

  /**
   * Messaging limits
   *
   * @default {}
   */
  messaging?: MessagingInit

  /**
   * Interconnect options
   *
   * @default {}
   */
  interconnect?: Omit<InterconnectInit, 'datastore' | 'domain'>

  /**
   * Task service options (policy, lease, roots, limits)
   *
   * @default {}
   */
  tasks?: Omit<TaskServiceInit, 'datastore' | 'revocations' | 'isRevoked'>
}

export interface HostAgentOptions extends HostAgentInit {
  /** Skill handlers run through the task protocol (delegation, policy, deadlines) */
  handlers?: Record<string, SkillHandler>
  /** Plain messages routed to the agent */
  inbox?: InboxHandler
}

export interface IoaNode {
  readonly transport: TransportNode
  readonly interconnect: Interconnect
  readonly tasks: TaskService
  readonly revocations: RevocationService
  readonly revocationStore: RevocationStore
  readonly datastore: Datastore
  /** Host an agent: its card is signed and published, its handlers serve tasks */
  host(init: HostAgentOptions, options?: AbortOptions): Promise<HostedAgent>
  /** Find agents by capability, best first */
  discover(query: DiscoveryQuery, options?: DiscoverOptions): Promise<DiscoveredAgent[]>
  /** Delegate authority from a hosted agent (or any identity) to another principal */
  delegate(issuer: HostedAgent, init: DelegateInit): Promise<Token>
  /** Revoke a token issued by a hosted agent and tell the network */
  revoke(issuer: HostedAgent, token: Token, options?: AbortOptions): Promise<void>
  /** Addresses other nodes can dial */
  addresses(): string[]
  stop(): Promise<void>
}

class DefaultIoaNode implements IoaNode {
  constructor (
    readonly transport: TransportNode,
    readonly interconnect: Interconnect,
    readonly tasks: TaskService,
    readonly revocations: RevocationService,
    readonly revocationStore: RevocationStore,
    readonly datastore: Datastore,
    private readonly closeStore: () => Promise<void>
  ) {}

  async host (init: HostAgentOptions, options?: AbortOptions): Promise<HostedAgent> {
    const { handlers, ...card } = init
    const agent = await this.interconnect.host(card, options)
    for (const [skill, handler] of Object.entries(handlers ?? {})) {
      await this.tasks.serve(agent.did, skill, handler)
    }
    return agent
  }

  async discover (query: DiscoveryQuery, options?: DiscoverOptions): Promise<DiscoveredAgent[]> {
    return this.interconnect.discoverAll(query, options)
  }

  async delegate (issuer: HostedAgent, init: DelegateInit): Promise<Token> {
    return delegate(issuer.identity, init)
  }

  async revoke (issuer: HostedAgent, token: Token, options?: AbortOptions): Promise<void> {
    const rev = await createRevocation(issuer.identity, token)
    await this.revocations.publish(rev, options)
  }

  addresses (): string[] {
    return this.transport.getMultiaddrs().map(a => a.toString())
  }

  async stop (): Promise<void> {
    await this.tasks.stop()
    await this.revocations.stop()
    await this.interconnect.stop()
    await this.transport.stop()
    await this.closeStore()
  }
}

/**
 * Start a node with every layer: transport (libp2p), interconnect (identity,
 * cards, discovery, routing) and collaboration (revocations, tasks). Agents
 * named in a config are hosted by the caller with `host()`, which attaches
 * their handlers.
 */
export async function createIoaNode (init: IoaNodeInit = {}): Promise<IoaNode> {
  const { datastore, owned } = init.datastore != null
    ? { datastore: init.datastore, owned: false }
    : await openDatastore({ dataDir: init.dataDir })
  const closeStore = async (): Promise<void> => {
    if (owned) await (datastore as unknown as { close(): Promise<void> }).close()
  }

  let transport: TransportNode | undefined
  let interconnect: Interconnect | undefined
  try {
    transport = await createTransportNode({
      ...init.transport,
      listen: init.listen,
      bootstrap: init.bootstrap,
      datastore,
      messaging: init.messaging
    })
    interconnect = await createInterconnect(transport, { ...init.interconnect, datastore, domain: init.domain })
    const revocationStore = await RevocationStore.open(datastore)
    const revocations = await createRevocationService(transport, revocationStore)
    const tasks = createTaskService(interconnect, {
      ...init.tasks,
      datastore,
      isRevoked: (cid, issuers) => revocationStore.isRevoked(cid, issuers)
    })
    return new DefaultIoaNode(transport, interconnect, tasks, revocations, revocationStore, datastore, closeStore)
  } catch (err) {
    await interconnect?.stop().catch(() => {})
    await Promise.resolve(transport?.stop()).catch(() => {})
    await closeStore().catch(() => {})
    throw err
  }
}

/** Node options from a validated config file */
export function initFromConfig (config: NodeConfig | unknown): IoaNodeInit {
  const c = parseConfig(config)
  return {
    listen: c.listen,
    bootstrap: c.bootstrap,
    dataDir: c.dataDir,
    domain: c.domain,
    transport: {
      providerTtl: c.providerTtl,
      maxConnections: c.limits?.maxConnections,
      transports: ['tcp', 'websockets']
    },
    messaging: {
      maxFrameSize: c.limits?.maxFrameSize,
      maxInFlightPerPeer: c.limits?.maxInFlightPerPeer,
      requestTimeout: c.limits?.requestTimeout
    }
  }
}
