/**
 * The node key as an identity (`IoaNode.nodeIdentity`): it signs what the
 * node itself claims, such as its management snapshots (spec/management.md).
 * The key is the one given (`transport.privateKey`), the key store's, or the
 * one libp2p loaded from the datastore; it must be the peer id's key.
 */
import { identityFromPrivateKey } from '@ioa/interconnect'
import type { Identity } from '@ioa/interconnect'
import type { TransportNode } from '@ioa/transport'
import type { PrivateKey } from '@libp2p/interface'

export function nodeIdentityOf (transport: TransportNode, key?: PrivateKey): Identity {
  // libp2p keeps the key it loaded on its components (not on the Libp2p interface)
  const k = key ?? (transport as unknown as { components?: { privateKey?: PrivateKey } }).components?.privateKey
  if (k == null || !k.publicKey.equals(transport.peerId.publicKey)) {
    throw new Error('The node key is not available, or is not the key of the node\'s peer id')
  }
  return identityFromPrivateKey(k)
}
