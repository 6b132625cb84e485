/**
 * The narrow slice of a libp2p node the interconnect uses (as kad-dht's
 * `KadDHTComponents`), so that it runs on stubs in tests and on anything that
 * provides these pieces; `componentsFromNode` slices a transport node.
 */
import type { Messaging, TransportNode } from '@ioa/transport'
import type { AbortOptions, ComponentLogger, ContentRouting, Metrics, PeerId, PeerStore } from '@libp2p/interface'
import type { Multiaddr } from '@multiformats/multiaddr'
import type { CID } from 'multiformats/cid'

export interface InterconnectComponents {
  /** This node's peer id: hosted agents' cards are bound to it */
  peerId: PeerId
  /** Announce and find capability and agent-id records (the DHT) */
  contentRouting: Pick<ContentRouting, 'provide' | 'findProviders'>
  /** Stop re-providing a withdrawn record (the DHT's reprovider) */
  reprovider: { cancelReprovide(cid: CID, options?: AbortOptions): Promise<void> }
  /** The framed request/response service (card and route protocols) */
  messaging: Pick<Messaging, 'handle' | 'unhandle' | 'request'>
  /** Addresses of providers found in the DHT are kept here */
  peerStore: Pick<PeerStore, 'merge'>
  /** This node's addresses, listed on hosted agents' cards */
  addresses: { getMultiaddrs(): Multiaddr[] }
  /** Tells when this node's addresses change (cards are re-signed) */
  events: Pick<EventTarget, 'addEventListener' | 'removeEventListener'>
  /** Round trips to a peer */
  ping: { ping(peer: PeerId, options?: AbortOptions): Promise<number> }
  logger: ComponentLogger
  metrics?: Metrics
}

/** The interconnect's slice of a transport node */
export function componentsFromNode (node: TransportNode): InterconnectComponents {
  return {
    peerId: node.peerId,
    contentRouting: node.contentRouting,
    reprovider: node.services.dht,
    messaging: node.services.messaging,
    peerStore: node.peerStore,
    addresses: node,
    events: node as unknown as InterconnectComponents['events'],
    ping: node.services.ping,
    logger: node.logger,
    metrics: node.metrics
  }
}
