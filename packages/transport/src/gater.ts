/**
 * Connection gaters for private networks.
 */
import { logger } from '@libp2p/logger'
import type { ComponentLogger, ConnectionGater, PeerId } from '@libp2p/interface'

export interface MembersOnlyGaterOptions {
  /**
   * Where refusals are logged (as `ioa:transport:gater`); by default the
   * process-wide `DEBUG` logger
   */
  logger?: ComponentLogger
}

/**
 * A gater that lets a node talk only to the members of a set of peer ids
 * (a domain's own network): dials to, and encrypted connections from or to,
 * any other peer are refused. The set is read at each decision, so members
 * may be added later (a node's own id before it starts, say).
 */
export function membersOnlyGater (members: ReadonlySet<string>, options: MembersOnlyGaterOptions = {}): ConnectionGater {
  const log = options.logger?.forComponent('ioa:transport:gater') ?? logger('ioa:transport:gater')
  const refuse = (what: string) => (peer: PeerId): boolean => {
    const id = peer.toString()
    if (members.has(id)) return false
    log('refusing %s %s: not a member', what, id)
    return true
  }
  return {
    denyDialPeer: refuse('dial to'),
    denyInboundEncryptedConnection: refuse('connection from'),
    denyOutboundEncryptedConnection: refuse('connection to')
  }
}
