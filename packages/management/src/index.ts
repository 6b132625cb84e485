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
export const MANAGEMENT_PROTOCOL = '/ioa/manage/1.0.0'

// metrics and the management HTTP server (spec/management.md 2)
export { libp2pMetrics, metricsRegistry } from './metrics/registry.js'
export type { Libp2pMetrics } from './metrics/registry.js'
export { attachMetrics } from './metrics/attach.js'
export type { AttachedMetrics, AttachMetricsInit, MeteredNode } from './metrics/attach.js'
export type { MeteredOrchestrator } from './metrics/orchestration.js'
export type { MeteredTeams } from './metrics/teams.js'
export type { DiscoveringService, SubmittingService } from './metrics/metered.js'
export { startManagementServer, HTTP_DEFAULTS } from './http/server.js'
export type { ManagementServer, ManagementServerInit, RouteHandler, RouteOptions, RouteRequest, RouteResponse } from './http/server.js'
export { ManagementHttpError, InvalidHttpAddressError, HttpListenError } from './http/errors.js'
