/**
 * Where a node started from a config gets its domain network's pre-shared
 * key: the config (`domainPskFile`, `domainPsk`) or the environment
 * (`IOA_DOMAIN_PSK_FILE`, `IOA_DOMAIN_PSK`). A node behind gateways, or
 * running a gateway, is in a private domain network and needs one
 * (spec/interconnect.md, section 8.1).
 */
import { resolve } from 'node:path'
import { ConfigError } from './config.js'
import type { NodeConfig } from './config.js'
import type { PrivateNetworkInit } from '@ioa/transport'

/** Environment variable naming a key file (relative paths: from the working directory) */
export const DOMAIN_PSK_FILE_ENV = 'IOA_DOMAIN_PSK_FILE'
/** Environment variable holding the key itself */
export const DOMAIN_PSK_ENV = 'IOA_DOMAIN_PSK'

/** The key of the domain network and the config field or variable it came from */
export interface DomainKeySource {
  /** `domainPskFile`, `domainPsk`, `IOA_DOMAIN_PSK_FILE` or `IOA_DOMAIN_PSK` */
  readonly field: string
  readonly init: PrivateNetworkInit
}

export interface DomainKeyOptions {
  /** The environment @default {} (no variables) */
  env?: Record<string, string | undefined>
  /** Base of a relative `IOA_DOMAIN_PSK_FILE` @default process.cwd() */
  cwd?: string
}

const given = (v: string | undefined): v is string => v != null && v !== ''

/**
 * The domain key of a node of a domain network (behind gateways, or running
 * a gateway): named by the config, else by the environment; undefined for
 * any other node (which ignores the variables). Throws `ConfigError` when
 * both fields, or both variables, are set, when a node of a domain network
 * has no key, and when a config names a key but is not in a domain network.
 */
export function domainKeySource (c: NodeConfig, options: DomainKeyOptions = {}): DomainKeySource | undefined {
  const env = options.env ?? {}
  const inDomain = c.behindGateways != null || c.gateway != null
  if (c.domainPskFile != null && c.domainPsk != null) {
    throw new ConfigError('Give the domain key as domainPskFile or domainPsk, not both', 'domainPsk')
  }
  const field = c.domainPskFile != null ? 'domainPskFile' : c.domainPsk != null ? 'domainPsk' : undefined
  if (field != null && !inDomain) {
    throw new ConfigError(`${field} is the key of a domain network: it needs behindGateways (a node inside the network) or gateway`, field)
  }
  // the variables serve only the nodes of a domain network: a public node ignores them
  if (!inDomain) return undefined
  if (c.domainPskFile != null) return { field: 'domainPskFile', init: { pskFile: c.domainPskFile } }
  if (c.domainPsk != null) return { field: 'domainPsk', init: { psk: c.domainPsk } }
  const file = env[DOMAIN_PSK_FILE_ENV]
  const key = env[DOMAIN_PSK_ENV]
  if (given(file) && given(key)) throw new ConfigError(`Set ${DOMAIN_PSK_FILE_ENV} or ${DOMAIN_PSK_ENV}, not both`, DOMAIN_PSK_ENV)
  if (given(file)) return { field: DOMAIN_PSK_FILE_ENV, init: { pskFile: resolve(options.cwd ?? process.cwd(), file) } }
  if (given(key)) return { field: DOMAIN_PSK_ENV, init: { psk: key } }
  const role = c.gateway != null ? 'A gateway\'s inner node' : 'A node behind gateways'
  throw new ConfigError(
    `${role} is in a private domain network and needs its pre-shared key: set domainPskFile (or domainPsk, ` +
    `$${DOMAIN_PSK_FILE_ENV}, $${DOMAIN_PSK_ENV}); make a key with: ioa key new --domain-psk --out domain.key`,
    'domainPsk'
  )
}
