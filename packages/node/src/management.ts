/**
 * The node's management plane (spec/management.md), loaded only when the
 * node is configured with it: `@ioa/management` (and with it
 * prom-client and libp2p's Prometheus metrics) is imported here, lazily, so
 * a node without a `management` section loads none of it and `@ioa/node`'s
 * import time does not grow. Logs on `ioa:node:management`.
 */
import type { IoaNode } from './ioa-node.js'
import type { ExecutorEvent, Orchestrator, RelayEvent } from '@ioa/collab'
import type { Interconnect } from '@ioa/interconnect'
import type * as Management from '@ioa/management'
import type { Dashboard, DashboardInit, LoginAuthority, ManagedNode as ProtocolNode, ManagementLayer, ManagementServer, ManagementServerInit, Tracing, TracingInit } from '@ioa/management'
import type { Token } from '@ioa/collab'
import type { TransportNodeInit } from '@ioa/transport'
import type { Logger } from '@libp2p/interface'

/** The management section of a node's options (the config file's `management`) */
export interface IoaManagementInit {
  /**
   * `host:port` of the management HTTP server (`127.0.0.1:9464`; port 0
   * picks a free one): `/metrics`, and the operator's API behind the token
   *
   * @default undefined (no HTTP server; metrics are still collected)
   */
  http?: string
  /**
   * The operator's token for the HTTP server (32-128 base64url characters)
   *
   * @default a random one, new at every start
   */
  token?: string
  /**
   * Host names, besides IP addresses and `localhost`, that requests to the
   * HTTP server may name in `Host` (a reverse proxy's)
   *
   * @default []
   */
  allowedHosts?: string[]
  /**
   * Limits of the HTTP server (spec/management.md 2.5): connections at once
   * and per remote address, body and head sizes, timeouts
   *
   * @default the server's (`HTTP_DEFAULTS` of @ioa/management)
   */
  httpLimits?: Pick<ManagementServerInit, 'maxConnections' | 'maxConnectionsPerAddress' | 'maxRequestBytes' | 'maxHeaderBytes' | 'headersTimeout' | 'requestTimeout' | 'keepAliveTimeout' | 'maxLoginLinks' | 'loginLinkTtl'>
  /**
   * Limits of a login-link request made with a chain from the operator's key
   * (`ioa login --http`, spec/management.md 2.2): the longest time to expiry
   * of its leaf token, leaves remembered as used
   *
   * @default the server's (300_000 ms, 1_024)
   */
  loginLimits?: Pick<LoginAuthority, 'maxLoginProofTtl' | 'maxUsedProofs'>
  /**
   * Limits of the dashboard's timeline (spec/management.md 2.5): entries
   * held, entries per answer, longest wait, readers waiting at once
   *
   * @default the dashboard's (`DASHBOARD_DEFAULTS` of @ioa/management)
   */
  dashboard?: Pick<DashboardInit, 'maxEvents' | 'maxBatch' | 'maxWait' | 'maxWaits'>
  /** `agent`: the node aggregates its domain's snapshots @default undefined */
  role?: 'agent'
  /**
   * With `role: 'agent'`: the operator's grant of `ioa.manage.*` to this
   * node's key (its did:key), leaf first; none when the node key is the
   * operator's own. Addressed to another key, not granting
   * `ioa.manage.watch`, or expired: the start fails with `InvalidGrantError`
   *
   * @default []
   */
  proofs?: Token[]
  /**
   * More tokens the node holds, listed in its snapshot's `proofs` besides
   * the grant (`proofs`) and the tokens of its agents' accepted submits
   * (`IoaNode.heldTokens`, always listed); read at each snapshot
   *
   * @default none
   */
  heldTokens?: () => readonly Token[]
  /** The operator's did:key @default undefined */
  operator?: string
  /**
   * Traces of the node's tasks and orchestrator runs (spec/management.md 3):
   * OTLP/HTTP export to `otlp` (or spans to `exporter`, e.g. an in-memory
   * one in tests), a parent-based ratio sampler, the spans' `service.name`
   *
   * @default undefined (no tracing: the OpenTelemetry SDK is not loaded)
   */
  tracing?: TracingInit
}

/** The management plane of a running node */
export interface IoaManagement {
  /** The management HTTP server, when `management.http` is set */
  readonly http?: Pick<ManagementServer, 'url' | 'loginUrl' | 'token' | 'route' | 'newLoginLink'>
  /**
   * The management protocol `/ioa/manage/1.0.0` and, with `role: 'agent'`,
   * the topology of the nodes it watches: served when `operator` or `role`
   * is set
   */
  readonly plane?: Pick<ManagementLayer, 'protocol' | 'topology'>
}

type ManagementModule = typeof Management

/** What the node needs before its libp2p node exists: libp2p's metrics component */
export interface PreparedManagement {
  readonly module: ManagementModule
  readonly metrics: NonNullable<TransportNodeInit['metrics']>
  readonly registry: ReturnType<ManagementModule['metricsRegistry']>
  /** The node's tracer provider, when `tracing` is set (its spans are flushed when the plane stops) */
  readonly tracing?: Tracing
}

/** Load the management plane (a dynamic import), make libp2p's metrics component and, with `tracing`, the tracer provider (which loads the OpenTelemetry SDK) */
export async function prepareManagement (init: IoaManagementInit = {}): Promise<PreparedManagement> {
  const module = await import('@ioa/management')
  const { metrics, registry } = module.libp2pMetrics()
  const tracing = init.tracing != null ? await module.createTracing(init.tracing) : undefined
  return { module, metrics, registry, ...(tracing != null ? { tracing } : {}) }
}

/** The parts of a started node the management plane counts and serves */
interface ManagedNode {
  readonly interconnect: Interconnect
  readonly tasks: IoaNode['tasks']
  readonly teams: IoaNode['teams']
  readonly events: {
    onTask(listener: (event: ExecutorEvent) => void): () => void
    onGateway(listener: (event: RelayEvent) => void): () => void
  }
  readonly gateway?: IoaNode['gateway']
  readonly logger: IoaNode['logger']
  readonly transport: IoaNode['transport']
  /** The node's layers by name (the dashboard shows a management layer's topology) */
  readonly layer?: (name: string) => unknown
}

/** A started management plane and how to stop it */
export interface StartedManagement extends IoaManagement {
  /** Count an orchestrator's runs */
  orchestrator(o: Orchestrator): void
  stop(): Promise<void>
}

/** Count the node's work and start the HTTP server; throws `InvalidHttpAddressError` or `HttpListenError` */
export async function startManagement (p: PreparedManagement, node: ManagedNode & ProtocolNode, init: IoaManagementInit, log: Logger): Promise<StartedManagement> {
  const metrics = p.module.attachMetrics({ interconnect: node.interconnect, tasks: node.tasks, events: node.events, gatewayInner: node.gateway?.inner, teams: node.teams }, { registry: p.registry, log })
  let server: ManagementServer | undefined
  let plane: ManagementLayer | undefined
  let dashboard: Dashboard | undefined
  try {
    if (init.operator != null || init.role === 'agent') {
      plane = p.module.createManagement({
        operator: init.operator,
        role: init.role ?? 'node',
        ...(init.heldTokens != null ? { heldTokens: init.heldTokens } : {}),
        ...(init.proofs != null ? { topology: { proofs: init.proofs } } : {})
      })
      await plane.start(node)
      log('management protocol served (role %s)', init.role ?? 'node')
    }
    if (init.http != null) {
      server = await p.module.startManagementServer({
        ...init.httpLimits,
        listen: init.http,
        registry: p.registry,
        logger: node.logger,
        token: init.token,
        allowedHosts: init.allowedHosts,
        // `ioa login`: a new login link for a chain from the operator's key (spec/management.md 2.2)
        loginAuthority: {
          ...init.loginLimits,
          node: node.nodeIdentity.did,
          ...(init.operator != null ? { operator: init.operator } : {}),
          ...(node.revocationStore != null ? { isRevoked: async (cid, issuers) => await node.revocationStore?.isRevoked(cid, issuers) ?? false } : {})
        }
      })
      server.route('GET', '/api/v1/node', () => ({ body: nodeStatus(node) }))
      // the topology of a management agent: the config's (`role: 'agent'`) or a management layer the node was given
      const topology = (): ManagementLayer['topology'] => plane?.topology ?? (node.layer?.('management') as ManagementLayer | undefined)?.topology
      dashboard = await p.module.serveDashboard(server, node, { ...init.dashboard, log, topology: () => topology()?.snapshot(), onSubmitted: metrics.onSubmitted })
      log('management HTTP server on %s', server.url)
    }
  } catch (err) {
    metrics.detach()
    dashboard?.close()
    await plane?.stop().catch((e: unknown) => { log.error('could not stop the management protocol after a failed start: %e', e) })
    throw err
  }
  const s = server
  const pl = plane
  return {
    ...(s != null ? { http: { url: s.url, loginUrl: s.loginUrl, token: s.token, route: s.route.bind(s), newLoginLink: s.newLoginLink } } : {}),
    ...(pl != null ? { plane: pl } : {}),
    orchestrator: (o) => { metrics.orchestrator(o) },
    stop: async () => {
      metrics.detach()
      dashboard?.close()
      await pl?.stop()
      await s?.close()
      // the spans of the node's last tasks are exported before it stops
      await p.tracing?.shutdown().catch((err: unknown) => { log.error('could not export the last spans: %e', err) })
    }
  }
}

/** `GET /api/v1/node` (spec/management.md 2.4) */
function nodeStatus (node: ManagedNode): unknown {
  return {
    peerId: node.transport.peerId.toString(),
    domain: node.interconnect.domain,
    addresses: node.transport.getMultiaddrs().map(a => a.toString()),
    connections: node.transport.getConnections().length,
    agents: node.interconnect.agents().map(a => ({ did: a.did, name: a.card.card.name, skills: a.card.card.skills.map(s => s.id) })),
    gateway: node.gateway != null ? { domain: node.gateway.gateway.domain, addresses: node.gateway.addresses() } : null
  }
}
