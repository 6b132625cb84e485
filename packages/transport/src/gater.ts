/**
 * Connection gaters for private networks.
 */
import type { ConnectionGater, PeerId } from '@libp2p/interface'

/**
 * A gater that lets a node talk only to the members of a set of peer ids
 * (a domain's own network): dials to, and encrypted connections from or to,
 * any other peer are refused. The set is read at each decision, so members
 * may be added later (a node's own id before it starts, say).
 */
export function membersOnlyGater (members: ReadonlySet<string>): ConnectionGater {
  const stranger = (peer: PeerId): boolean => !members.has(peer.toString())
  return {
    denyDialPeer: stranger,
    denyInboundEncryptedConnection: stranger,
    denyOutboundEncryptedConnection: stranger
  }
}
