/**
 * From a node's config file to the options of `createIoaNode`.
 */
import { constraintPolicy } from '@ioa/collab'
import { withApprovalRules } from './approvals.js'
import { parseConfig } from './config.js'
import { domainKeySource } from './domain-key.js'
import { managementOf } from './config-management.js'
import type { NodeConfig, TasksConfig } from './config.js'
import type { DomainKeyOptions } from './domain-key.js'
import type { IoaNodeInit } from './ioa-node.js'
import type { TaskLimits, TaskServiceInit } from '@ioa/collab'

/**
 * Node options from a validated config file. The domain network's key comes
 * from the config or from `options.env` (see `domainKeySource`): it closes
 * the gateway's inner node when the config runs a gateway, else this node
 * (behind gateways).
 */
export function initFromConfig (config: NodeConfig | unknown, options: DomainKeyOptions = {}): IoaNodeInit {
  const c = parseConfig(config)
  const domainKey = domainKeySource(c, options)
  const init: IoaNodeInit = {
    listen: c.listen,
    bootstrap: c.bootstrap,
    dataDir: c.dataDir,
    ...(c.keyStore?.insecurePlaintext === true ? { keyStore: { insecurePlaintext: true } } : {}),
    domain: c.domain,
    transport: {
      providerTtl: c.providerTtl,
      maxConnections: c.limits?.maxConnections,
      allow: c.limits?.allow ?? [],
      transports: ['tcp', 'websockets'],
      ...(domainKey != null && c.gateway == null ? { privateNetwork: domainKey.init } : {})
    },
    messaging: {
      maxFrameSize: c.limits?.maxFrameSize,
      maxInFlightPerPeer: c.limits?.maxInFlightPerPeer,
      requestTimeout: c.limits?.requestTimeout
    },
    ...(c.behindGateways != null || c.limits?.interconnect != null
      ? {
          interconnect: {
            ...c.limits?.interconnect,
            ...(c.behindGateways != null
              ? {
                  private: true,
                  gateways: c.behindGateways.map(g => g.outer),
                  trustedGateways: c.behindGateways.map(g => g.inner)
                }
              : {})
          }
        }
      : {}),
    tasks: {
      leaseInterval: c.tasks?.leaseInterval,
      roots: c.tasks?.roots,
      maxDepth: c.tasks?.maxDepth,
      clockSkew: c.tasks?.clockSkew,
      abandonAfter: c.tasks?.abandonAfter,
      ...(c.tasks != null ? taskLimitsOf(c.tasks) : {}),
      ...(c.tasks?.retention != null ? { retention: c.tasks.retention } : {}),
      ...constraintsOf(c.tasks?.enforceConstraints),
      ...(c.tasks?.requireEnvelope != null ? { session: { requireEnvelope: c.tasks.requireEnvelope } } : {}),
      ...(c.tasks?.auth != null ? { auth: c.tasks.auth } : {})
    },
    ...(c.management != null ? { management: managementOf(c.management) } : {}),
    ...(c.gateway != null
      ? {
          gateway: {
            domain: c.gateway.domain,
            listen: c.gateway.listen,
            bootstrap: c.gateway.bootstrap,
            exports: c.gateway.exports,
            innerCapabilities: c.gateway.innerCapabilities,
            rateLimit: c.gateway.rateLimit,
            refreshInterval: c.gateway.refreshInterval,
            ...(c.gateway.keepTrace != null ? { keepTrace: c.gateway.keepTrace } : {}),
            privateNetwork: domainKey?.init
          }
        }
      : {})
  }
  return withApprovalRules(init, c.tasks?.approvals)
}

/** The constraint policy of `tasks.enforceConstraints`: every skill, or the skills named, without the keys ignored */
function constraintsOf (e: TasksConfig['enforceConstraints']): Pick<TaskServiceInit, 'policy'> {
  if (e == null || e === false) return {}
  if (e === true) return { policy: constraintPolicy() }
  return { policy: constraintPolicy({ ...(e.skills != null ? { skills: e.skills } : {}), ...(e.ignore != null ? { ignore: e.ignore } : {}) }) }
}

/** The fair-share limits a config sets (unset ones keep the service's defaults) */
function taskLimitsOf (t: TasksConfig): Pick<TaskServiceInit, 'limits'> {
  const limits: Partial<TaskLimits> = {}
  if (t.maxActiveTasksPerPeer != null) limits.maxActiveTasksPerPeer = t.maxActiveTasksPerPeer
  if (t.maxActiveTasksPerCaller != null) limits.maxActiveTasksPerCaller = t.maxActiveTasksPerCaller
  if (t.maxActiveTasksPerAddress != null) limits.maxActiveTasksPerAddress = t.maxActiveTasksPerAddress
  return Object.keys(limits).length > 0 ? { limits } : {}
}
