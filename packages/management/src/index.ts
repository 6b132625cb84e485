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
