/**
 * `IoaNode`: one object that stacks the transport, interconnect and
 * collaboration layers on one libp2p node and owns their lifecycle. Its
 * pieces: the gateway role (`gateway.ts`), custom layers (`layers.ts`),
 * events (`events.ts`), config-to-init mapping (`config-init.ts`). Logs on
 * `ioa:node`.
 */
import { RevocationStore, createAssignmentService, createOrchestrator, createRevocation, createRevocationService, createTaskService, createTeamService, delegate } from '@ioa/collab'
import { createInterconnect } from '@ioa/interconnect'
import { createTransportNode } from '@ioa/transport'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { defaultLogger } from '@libp2p/logger'
import { openNodeStore } from './data-dir.js'
import { LayerError } from './errors.js'
import { TaskEvents } from './events.js'
import { HeldTokens } from './held-tokens.js'
import { closeOwned, startGateway } from './gateway.js'
import { nodeKeyOption, openKeyStore } from './keystore.js'
import { Layers } from './layers.js'
import { nodeIdentityOf } from './node-identity.js'
import { attempt } from './logging.js'
import { prepareManagement, startManagement } from './management.js'
import type { KeyStoreInit, KeyStoreStatus } from './keystore.js'
import type { IoaManagement, IoaManagementInit, StartedManagement } from './management.js'
import type { AssignmentService, AssignmentsInit, FormOptions, Team, TeamGoalInit, TeamService, TeamsInit } from '@ioa/collab'
import type {
  DelegateInit, DelegateOptions, ExecutorEvent, Orchestrator, OrchestratorInit, RelayEvent, RevocationService, SkillHandler, SubmitOptions, TaskEvent, TaskRequest,
  RevocationServiceInit, RevocationStoreInit, TaskService, TaskServiceInit, Token
} from '@ioa/collab'
import type { Did, Identity, Gateway, GatewayExportedEvent, GatewayInit, DiscoveredAgent, DiscoverOptions, DiscoveryQuery, HostAgentInit, HostedAgent, InboxHandler, Interconnect, InterconnectInit } from '@ioa/interconnect'
import type { MessagingInit, PrivateNetworkInit, TransportNode, TransportNodeInit } from '@ioa/transport'
import type { AbortOptions, ComponentLogger, Logger, PrivateKey } from '@libp2p/interface'
import type { Datastore } from 'interface-datastore'

export { initFromConfig } from './config-init.js'

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
   * How the node key and agent keys are kept at rest (`spec/interconnect.md`
   * §1.3): with a `passphrase` they are encrypted by `@libp2p/keychain`; a
   * `dataDir` without one is refused (`KeyStoreError` `PASSPHRASE_REQUIRED`)
   * unless `insecurePlaintext` is set. Memory and a caller's `datastore`
   * keep keys unencrypted when no passphrase is given.
   *
   * @default {}
   */
  keyStore?: KeyStoreInit

  /**
   * Let a `dataDir` that holds state but no node key start with a new
   * identity (`ioa start --new-identity`); without it such a directory is
   * refused with `IdentityMissingError` (`IDENTITY_MISSING`). A new or empty
   * directory never needs it.
   *
   * @default false
   */
  newIdentity?: boolean

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
  interconnect?: Omit<InterconnectInit, 'datastore' | 'domain' | 'keys'>

  /**
   * Task service options (policy, lease, roots, limits)
   *
   * @default {}
   */
  tasks?: Omit<TaskServiceInit, 'datastore' | 'revocations' | 'isRevoked'>

  /**
   * Team options (limits, timers, acceptor, matcher; `spec/teams.md` 9).
   * Teams are kept in the node's datastore and survive a restart.
   *
   * @default {}
   */
  teams?: Omit<TeamsInit, 'datastore' | 'revocations'>

  /**
   * Assignment options (`spec/teams.md` 10.6: reassignments, open and served
   * assignments per team and per assignee, progress rate, entry, result and
   * attempt timeouts)
   *
   * @default {}
   */
  assignments?: AssignmentsInit

  /**
   * Revocation store quotas and flooding limits. The store trusts
   * `tasks.roots`, the agents hosted here and `isTrusted`; its `clockSkew`
   * defaults to `tasks.clockSkew`
   *
   * @default {}
   */
  revocations?: Omit<RevocationStoreInit, 'logger' | 'prefix' | 'roots'> & RevocationServiceInit

  /**
   * Custom layers stacked on top, started in order after the built-in layers
   * and stopped in reverse order before them (see {@link IoaLayer})
   *
   * @default []
   */
  layers?: IoaLayer[]

  /**
   * Run a domain gateway: a second libp2p node joins the domain's own network
   * and the skills its export rules name are offered (and forwarded) here.
   * The gateway's state is kept in `<dataDir>/gateway` or in memory.
   *
   * @default undefined
   */
  gateway?: IoaGatewayInit

  /**
   * The management plane (spec/management.md): metrics of libp2p and of the
   * layers (`ioa_*`), the management HTTP server (`http`). Loaded only when
   * set (a dynamic import of `@ioa/management`).
   *
   * @default undefined (no metrics, nothing loaded)
   */
  management?: IoaManagementInit
}

export interface IoaGatewayInit extends Omit<GatewayInit, 'inner' | 'outer' | 'domain'> {
  /** @default the node's domain */
  domain?: string
  /** Listen addresses in the domain network @default ['/ip4/127.0.0.1/tcp/0'] */
  listen?: string[]
  /** Peers of the domain network @default [] */
  bootstrap?: string[]
  /**
   * The domain network's pre-shared key: the inner node is then a member of
   * the private network (the outer node never is)
   *
   * @default undefined (the inner node is open to any peer)
   */
  privateNetwork?: PrivateNetworkInit
  /**
   * Forward the `trace` field of relayed 2.0.0 requests to the executor
   * (spec/management.md 3.4): the domain's spans then join the caller's trace
   *
   * @default false (the relay strips it: a trace context is unsigned)
   */
  keepTrace?: boolean
}

/** A running domain gateway */
export interface IoaGateway {
  /** The gateway's node in the domain network */
  readonly inner: Interconnect
  readonly gateway: Gateway
  /** Addresses of the inner node (for the domain's nodes to bootstrap from) */
  addresses(): string[]
}

/**
 * A layer added on top of the node without editing the packages: it gets the
 * started node (its transport, interconnect, task service and events) and may
 * register its own protocol on `node.transport.services.messaging`, watch
 * `node.events`, wrap policies, and so on. Names are unique per node.
 */
export interface IoaLayer {
  readonly name: string
  start(node: IoaNode): void | Promise<void>
  stop?(): void | Promise<void>
}

/**
 * What the node's executor did with the requests to the agents hosted here:
 * a handler started, a task ended (`task-completed`, or `task-failed` with
 * the state and error its requester got), a request was refused before any
 * handler ran (`task-refused`: its code, caller and skill)
 */
export type NodeTaskEvent = ExecutorEvent

export interface NodeEvents {
  /** Called for every served task's start, end and refusal; returns a function that removes the listener */
  onTask(listener: (event: NodeTaskEvent) => void): () => void
  /** Called for every task submit the node's domain gateway relays or refuses */
  onGateway(listener: (event: RelayEvent) => void): () => void
  /**
   * Called when the node's domain gateway starts or stops exporting agents
   * (an `exported` event after each refresh that changed the set: the first
   * export included)
   */
  onExported(listener: (event: GatewayExportedEvent) => void): () => void
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
  /** Teams this node forms or is invited to (`spec/teams.md`) */
  readonly teams: TeamService
  /**
   * Assignments as tasks in the teams of this node's agents (`spec/teams.md`
   * 10.6): assign, pause, results; the handlers of hosted agents are served
   * through it, so a task that names a team assignment runs only if the
   * team's log gives it to that agent, and posts its progress and result
   */
  readonly assignments: AssignmentService
  readonly revocations: RevocationService
  readonly revocationStore: RevocationStore
  readonly datastore: Datastore
  /** The node key as an identity (`did:key` of the peer id's key): signs the node's own claims, e.g. its management snapshots */
  readonly nodeIdentity: Identity
  /** The node's component logger (libp2p's): `logger.forComponent('ioa:node:<part>')` */
  readonly logger: ComponentLogger
  /** How the node's keys are kept at rest, what opening them cost and how many plaintext keys were migrated */
  readonly keyStore: KeyStoreStatus
  /** Host an agent: its card is signed and published, its handlers serve tasks */
  host(init: HostAgentOptions, options?: AbortOptions): Promise<HostedAgent>
  /** Attach skill handlers to a hosted agent (served through the task protocol) */
  serve(agent: HostedAgent, handlers: Record<string, SkillHandler>): Promise<void>
  /** Find agents by capability, best first */
  discover(query: DiscoveryQuery, options?: DiscoverOptions): Promise<DiscoveredAgent[]>
  /**
   * Delegate authority from a hosted agent to another principal; the token is
   * checked against its proofs first (`EscalationError`, `PrincipalMismatchError`;
   * `options.verify: false` skips it)
   */
  delegate(issuer: HostedAgent, init: DelegateInit, options?: DelegateOptions): Promise<Token>
  /** Revoke a token issued by a hosted agent and tell the network */
  revoke(issuer: HostedAgent, token: Token, options?: AbortOptions): Promise<void>
  /** Ask agent `to` to run a task, as a hosted agent; streams its events until the end */
  submit(from: HostedAgent, to: Did, request: TaskRequest, options?: SubmitOptions): AsyncGenerator<TaskEvent, void, undefined>
  /**
   * The delegation tokens the node's agents rely on: those of the chains of
   * their submits (`submit`, a handler's `ctx.call`, an orchestrator's steps)
   * that an executor accepted, not yet expired, soonest to expire first; at
   * most 64 (past that, the soonest to expire are dropped). The node's
   * management snapshot lists them in `proofs` (spec/management.md 1.2)
   */
  heldTokens(): readonly Token[]
  /**
   * An orchestrator acting as a hosted agent, journaling in the node's
   * datastore; stopped with the node
   */
  orchestrator(agent: HostedAgent, init?: Omit<OrchestratorInit, 'ic' | 'tasks' | 'agent'>): Orchestrator
  /**
   * Form a team for a goal, convened by a hosted agent: candidates found by
   * capability (or given per role), invited with tokens narrowed from
   * `options.proofs`; resolves once every role has a member
   */
  team(convener: HostedAgent, goal: TeamGoalInit, options?: FormOptions): Promise<Team>
  /** Task events of the agents hosted here */
  readonly events: NodeEvents
  /** The domain gateway, when the node runs one */
  readonly gateway?: IoaGateway
  /** The management plane, when the node is configured with one: its HTTP server's URLs */
  readonly management?: IoaManagement
  /** A custom layer by name */
  layer<T extends IoaLayer = IoaLayer>(name: string): T | undefined
  /** Addresses other nodes can dial */
  addresses(): string[]
  /** Stop the layers (custom ones first), then the node; idempotent */
  stop(): Promise<void>
}

export { LayerError }

class DefaultIoaNode implements IoaNode {
  readonly logger: ComponentLogger
  readonly events: TaskEvents
  readonly nodeIdentity: Identity
  private readonly log: Logger
  private readonly layers: Layers
  private readonly orchestrators = new Set<Orchestrator>()
  private stopping?: Promise<void>
  gateway?: IoaGateway
  private stopGateway?: () => Promise<void>
  /** @internal The tracer of `management.tracing` (the orchestrators' spans go there too) */
  tracer?: NonNullable<OrchestratorInit['tracer']>
  management?: StartedManagement

  constructor (
    readonly transport: TransportNode,
    readonly interconnect: Interconnect,
    readonly tasks: TaskService,
    readonly teams: TeamService,
    readonly assignments: AssignmentService,
    readonly revocations: RevocationService,
    readonly revocationStore: RevocationStore,
    readonly datastore: Datastore,
    private readonly closeStore: () => Promise<void>,
    readonly keyStore: KeyStoreStatus,
    events: TaskEvents,
    private readonly held: HeldTokens,
    nodeKey?: PrivateKey
  ) {
    this.nodeIdentity = nodeIdentityOf(transport, nodeKey)
    this.logger = transport.logger
    this.log = transport.logger.forComponent('ioa:node')
    this.events = events
    this.layers = new Layers(this.log)
  }

  async host (init: HostAgentOptions, options?: AbortOptions): Promise<HostedAgent> {
    const { handlers, ...card } = init
    const agent = await this.interconnect.host(card, options)
    await this.serve(agent, handlers ?? {})
    // teams stored by an earlier run of this agent resume now that it is back
    await this.teams.resume()
    this.log('hosting %s (%s)', agent.did, agent.card.card.name)
    return agent
  }

  async serve (agent: HostedAgent, handlers: Record<string, SkillHandler>): Promise<void> {
    for (const [skill, handler] of Object.entries(handlers)) {
      if (typeof handler !== 'function') throw new TypeError(`The handler of ${skill} is not a function`)
      // tasks of team assignments are checked against the team's log; others run as they would
      await this.assignments.serve(agent.did, skill, handler)
    }
  }

  submit (from: HostedAgent, to: Did, request: TaskRequest, options?: SubmitOptions): AsyncGenerator<TaskEvent, void, undefined> {
    return this.tasks.submit(from.identity, to, request, options)
  }

  heldTokens (): readonly Token[] {
    return this.held.list()
  }

  orchestrator (agent: HostedAgent, init: Omit<OrchestratorInit, 'ic' | 'tasks' | 'agent'> = {}): Orchestrator {
    const o = createOrchestrator({
      datastore: this.datastore,
      ...(this.tracer != null ? { tracer: this.tracer } : {}),
      isRevoked: async (cid, issuers) => this.revocationStore.isRevoked(cid, issuers),
      ...init,
      ic: this.interconnect,
      tasks: this.tasks,
      agent
    })
    this.orchestrators.add(o)
    this.management?.orchestrator(o)
    return o
  }

  async team (convener: HostedAgent, goal: TeamGoalInit, options?: FormOptions): Promise<Team> {
    return await this.teams.form(convener.did, goal, options)
  }

  layer<T extends IoaLayer = IoaLayer> (name: string): T | undefined {
    return this.layers.get(name) as T | undefined
  }

  /** Start the domain gateway (see `gateway.ts`) */
  async startGateway (g: IoaGatewayInit, init: IoaNodeInit): Promise<void> {
    const started = await startGateway(g, init, this.interconnect, {
      onRelay: e => { this.events.gateway.emit(e) },
      onExported: e => { this.events.exported.emit(e) },
      // with keepTrace, relayed submits are spans of the node's tracer (spec/management.md 3.4)
      ...(this.tracer != null ? { tracer: this.tracer } : {})
    }, this.logger.forComponent('ioa:node:gateway'))
    this.gateway = started.gateway
    this.stopGateway = started.stop
  }

  /** Start custom layers in order */
  async startLayers (layers: IoaLayer[]): Promise<void> {
    await this.layers.start(layers, this)
  }

  async discover (query: DiscoveryQuery, options?: DiscoverOptions): Promise<DiscoveredAgent[]> {
    return this.interconnect.discoverAll(query, options)
  }

  async delegate (issuer: HostedAgent, init: DelegateInit, options?: DelegateOptions): Promise<Token> {
    return delegate(issuer.identity, init, options)
  }

  async revoke (issuer: HostedAgent, token: Token, options?: AbortOptions): Promise<void> {
    const rev = await createRevocation(issuer.identity, token)
    await this.revocations.publish(rev, options)
  }

  addresses (): string[] {
    return this.transport.getMultiaddrs().map(a => a.toString())
  }

  async stop (): Promise<void> {
    this.stopping ??= this.doStop()
    await this.stopping
  }

  private async doStop (): Promise<void> {
    this.log('stopping')
    await this.layers.stop()
    await attempt(this.log, 'stopping the management plane', async () => { await this.management?.stop() })
    for (const o of this.orchestrators) await attempt(this.log, 'stopping an orchestrator', async () => { await o.stop() })
    this.orchestrators.clear()
    await this.stopGateway?.()
    await attempt(this.log, 'stopping the assignments', async () => { await this.assignments.stop() })
    await this.teams.stop()
    await this.tasks.stop()
    await this.revocations.stop()
    await this.interconnect.stop()
    await this.transport.stop()
    await this.closeStore()
    this.log('stopped')
  }
}

/**
 * Start a node with every layer: transport (libp2p), interconnect (identity,
 * cards, discovery, routing) and collaboration (revocations, tasks). Agents
 * named in a config are hosted by the caller with `host()`, which attaches
 * their handlers.
 */
export async function createIoaNode (init: IoaNodeInit = {}): Promise<IoaNode> {
  // libp2p's metrics component exists before the node (and the gateway's inner node) does
  const management = init.management != null ? await prepareManagement(init.management) : undefined
  if (management != null) init = { ...init, transport: { ...init.transport, metrics: management.metrics } }
  const { datastore, owned } = await openNodeStore({ ...init, keyGiven: init.transport?.privateKey != null })
  const closeStore = async (): Promise<void> => { await closeOwned(datastore, owned) }

  let transport: TransportNode | undefined
  let interconnect: Interconnect | undefined
  try {
    const where = init.dataDir ?? (init.datastore != null ? 'the node\'s datastore' : 'memory')
    const keys = await openKeyStore(datastore, { ...init.keyStore, persistent: owned, where })
    // a node with neither a data directory nor a datastore of the caller's
    // has a fresh identity that nothing reads back: made here, so that the
    // transport need not load the key loader (and keychain) to store it
    const ephemeral = init.dataDir == null && init.datastore == null && keys == null
    const nodeKey = init.transport?.privateKey ?? (ephemeral ? await generateKeyPair('Ed25519') : undefined)
    transport = await createTransportNode({
      ...init.transport,
      ...nodeKeyOption(keys, nodeKey),
      listen: init.listen,
      bootstrap: init.bootstrap,
      datastore,
      messaging: init.messaging
    })
    interconnect = await createInterconnect(transport, { ...init.interconnect, datastore, keys, domain: init.domain })
    const hosts = interconnect
    const revocationStore = await RevocationStore.open(datastore, {
      clockSkew: init.tasks?.clockSkew,
      ...init.revocations,
      roots: init.tasks?.roots,
      // the node's own agents have priority as well (spec/collab-delegation.md 7.4)
      isTrusted: iss => hosts.agents().some(a => a.did === iss) || init.revocations?.isTrusted?.(iss) === true,
      logger: transport.logger
    })
    const revocations = await createRevocationService(transport, revocationStore, init.revocations)
    const events = new TaskEvents(transport.logger.forComponent('ioa:node'))
    const onEvent = init.tasks?.onEvent
    const onAccepted = init.tasks?.onAccepted
    const held = new HeldTokens(transport.logger.forComponent('ioa:node:held-tokens'))
    const tracer = management?.tracing?.tracer
    const tasks = createTaskService(interconnect, {
      ...(tracer != null ? { tracer } : {}),
      ...init.tasks,
      onEvent: e => {
        events.emit(e)
        onEvent?.(e)
      },
      // the chains the node's agents rely on, for the management snapshot's `proofs`
      onAccepted: s => {
        held.record(s.proofs)
        onAccepted?.(s)
      },
      datastore,
      isRevoked: (cid, issuers) => revocationStore.isRevoked(cid, issuers)
    })
    const teams = createTeamService(interconnect, {
      ...init.teams,
      datastore,
      revocations: { isRevoked: (cid, issuers) => revocationStore.isRevoked(cid, issuers) }
    })
    const assignments = createAssignmentService({ logger: transport.logger, teams, tasks, interconnect }, init.assignments)
    const keyStore = { encrypted: keys != null, openedIn: keys?.openedIn ?? 0, migrated: keys?.migrated ?? 0 }
    const node = new DefaultIoaNode(transport, interconnect, tasks, teams, assignments, revocations, revocationStore, datastore, closeStore, keyStore, events, held, nodeKeyOption(keys, nodeKey).privateKey)
    if (tracer != null) node.tracer = tracer
    const log = transport.logger.forComponent('ioa:node')
    try {
      // teams answer invitations from the start, and stored teams resume
      await teams.start()
      if (init.gateway != null) await node.startGateway(init.gateway, init)
      if (management != null) node.management = await startManagement(management, node, init.management ?? {}, transport.logger.forComponent('ioa:node:management'))
      await node.startLayers(init.layers ?? [])
    } catch (err) {
      await attempt(log, 'stopping the node after a failed start', async () => { await node.stop() })
      throw err
    }
    log('started %s, listening on %s', transport.peerId.toString(), node.addresses().join(', '))
    return node
  } catch (err) {
    if ((err as Error)?.name === LayerError.name) throw err
    const log = (transport?.logger ?? defaultLogger()).forComponent('ioa:node')
    log.error('failed to start: %e', err)
    await attempt(log, 'stopping the interconnect', async () => { await interconnect?.stop() })
    await attempt(log, 'stopping the transport', async () => { await transport?.stop() })
    await attempt(log, 'closing the datastore', closeStore)
    throw err
  }
}
