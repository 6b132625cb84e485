/**
 * @packageDocumentation
 *
 * The management plane of the Internet of Agents (spec/management.md): what
 * lets an operator see the network. Metrics in Prometheus text through
 * libp2p's metrics component, the management HTTP server, the management
 * protocol `/ioa/manage/1.0.0` (a node's signed snapshot and change stream,
 * for authorized callers), the topology a management agent aggregates, and
 * the checks of `ioa doctor`.
 *
 * Heavy dependencies load only when a node is configured to use them: a node
 * imports this package lazily, when its config has a `management` section.
 */

/** The management protocol id (spec/management.md) */
export { MANAGEMENT_PROTOCOL } from './protocol/service.js'

// the management protocol, its snapshots and the management layer (issue 16, part 2)
export { createManagement } from './layer.js'
export type { ManagementLayer, ManagementLayerInit } from './layer.js'
export { ManagementProtocol, MANAGEMENT_DEFAULTS } from './protocol/service.js'
export type { ManagementProtocolInit, SnapshotResponse, WatchItem } from './protocol/service.js'
export type { ManagedNode } from './protocol/managed-node.js'
export {
  signSnapshot, verifySnapshot, parseSnapshotPayload, snapshotSigningBytes, peerDid,
  SNAPSHOT_VERSION, SNAPSHOT_SIG_PREFIX, SNAPSHOT_LIMITS
} from './protocol/snapshot.js'
export type {
  SignedSnapshot, SnapshotPayload, SnapshotAgent, SnapshotConnection, SnapshotGateway, SnapshotProof, VerifySnapshotOptions
} from './protocol/snapshot.js'
export { authorize, manageCapability, MAX_CHAIN_TOKENS } from './protocol/auth.js'
export type { AuthorizeOptions } from './protocol/auth.js'
export { ManagementCredentials, requestSnapshot, watchNode, DEFAULT_INVOCATION_TTL, WATCH_MARGIN } from './protocol/client.js'
export type {
  ManagementCredentialsInit, ManagementCallOptions, ReceivedSnapshot, WatchOptions, ReceivedWatchItem
} from './protocol/client.js'
export {
  ManagementError, NotOperatorError, WrongAudienceError, NoOperatorError, BadManagementRequestError,
  TooManyWatchesError, InvalidNodeSnapshotError, TopologyOverflowError, InvalidGrantError, fromRemote
} from './errors.js'
export { createTopology, TOPOLOGY_DEFAULTS } from './topology/topology.js'
export type { Topology, TopologyInit } from './topology/topology.js'
export type {
  TopologyNode, TopologyLink, TopologyCapability, TopologyDomain, TopologySnapshot, TopologyEvent
} from './topology/model.js'
export { runDoctor, worstOf, DOCTOR_DEFAULTS } from './doctor/doctor.js'
export type { DoctorInit, DoctorReport, DoctorCheck, Finding, Severity } from './doctor/doctor.js'

// metrics and the management HTTP server (spec/management.md 2)
export { libp2pMetrics, metricsRegistry } from './metrics/registry.js'
export type { Libp2pMetrics } from './metrics/registry.js'
export { attachMetrics } from './metrics/attach.js'
export type { AttachedMetrics, AttachMetricsInit, MeteredNode, SubmittedTask } from './metrics/attach.js'
export type { SubmittedOutcome } from './metrics/ioa-metrics.js'
export type { MeteredOrchestrator } from './metrics/orchestration.js'
export type { MeteredTeams } from './metrics/teams.js'
export type { DiscoveringService, SubmittingService } from './metrics/metered.js'
export { startManagementServer, HTTP_DEFAULTS } from './http/server.js'
export type { ManagementServer, ManagementServerInit, RouteHandler, RouteOptions, RouteRequest, RouteResponse } from './http/server.js'
export { ManagementHttpError, InvalidHttpAddressError, HttpListenError } from './http/errors.js'
export { LOGIN_CAPABILITY, LOGIN_AUTHORITY_DEFAULTS } from './http/login-link.js'
export type { LoginAuthority } from './http/login-link.js'

// the dashboard: its page and data API on the management HTTP server (spec/management.md 2.6)
export { serveDashboard, DASHBOARD_DEFAULTS } from './dashboard/dashboard.js'
export type { Dashboard, DashboardInit, DashboardNode } from './dashboard/dashboard.js'
export type { TimelineEntry, TaskEntry, ConversationEntry } from './dashboard/timeline.js'

// tracing: the node's tracer provider, OTLP/HTTP export (spec/management.md 3)
export { createTracing, otelTracer, TRACING_DEFAULTS } from './tracing/tracing.js'
export type { Tracing, TracingInit } from './tracing/tracing.js'
export { InvalidTracingConfigError } from './tracing/errors.js'
