/**
 * The narrow slice of a libp2p node the interconnect uses (as kad-dht's
 * `KadDHTComponents`), so that it runs on stubs in tests and on anything that
 * provides these pieces; `componentsFromNode` slices a transport node.
 */
import { lookupStarted } from '@ioa/transport/internal'
import type { Messaging, TransportNode } from '@ioa/transport'
import type { AbortOptions, ComponentLogger, ContentRouting, Metrics, PeerId, PeerStore, PublicKey } from '@libp2p/interface'
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
  /** Publish-subscribe (the transport's gossipsub): capability announcements; absent turns them off */
  pubsub?: PubSub
  /** Marks a lookup of this node as running; the returned function ends it (the transport holds its first DHT self-query meanwhile) */
  lookups?: { started(): () => void }
  /**
   * The connected peers whose identify lists `protocol` (a newcomer's index
   * query asks them while it knows no peer of the gossip topic yet, spec
   * section 12.6); `events` tells of new ones with `peer:identify`. Absent:
   * only peers of the topic are asked.
   */
  identified?: { peers(protocol: string): Promise<PeerId[]> }
}

/**
 * A pubsub message as a topic validator sees it (gossipsub's `Message`);
 * a signed one's `sequenceNumber`, `signature` and `key` are kept so that
 * the snapshot can be handed on in index answers (spec section 12.6)
 */
export type PubSubMessage =
  | { type: 'signed', from: PeerId, topic: string, data: Uint8Array, sequenceNumber?: bigint, signature?: Uint8Array, key?: PublicKey }
  | { type: 'unsigned', topic: string, data: Uint8Array }

/** What a topic validator decides (the values of gossipsub's `TopicValidatorResult`) */
export type PubSubVerdict = 'accept' | 'ignore' | 'reject'

/** The slice of gossipsub the interconnect uses */
export interface PubSub {
  subscribe(topic: string): void
  unsubscribe(topic: string): void
  publish(topic: string, data: Uint8Array): Promise<{ recipients: PeerId[] }>
  getSubscribers(topic: string): PeerId[]
  /** Validators by topic; a message is delivered and forwarded only on `accept` */
  topicValidators: Map<string, (peer: PeerId, message: PubSubMessage) => PubSubVerdict | Promise<PubSubVerdict>>
  addEventListener(type: 'subscription-change', listener: (evt: CustomEvent<{ peerId: PeerId, subscriptions: Array<{ topic: string, subscribe: boolean }> }>) => void): void
  removeEventListener(type: 'subscription-change', listener: (evt: CustomEvent<{ peerId: PeerId, subscriptions: Array<{ topic: string, subscribe: boolean }> }>) => void): void
}

/** The connected peers of `node` whose identify (in its peer store) lists `protocol` */
async function identifiedPeers (node: TransportNode, protocol: string): Promise<PeerId[]> {
  const out: PeerId[] = []
  for (const peer of node.getPeers()) {
    // a connected peer not (or no longer) in the peer store has told nothing: it is not asked
    if (!await node.peerStore.has(peer)) continue
    if ((await node.peerStore.get(peer)).protocols.includes(protocol)) out.push(peer)
  }
  return out
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
    metrics: node.metrics,
    lookups: { started: () => lookupStarted(node.services.dht) },
    identified: { peers: async protocol => identifiedPeers(node, protocol) },
    // gossipsub's validator verdicts are an enum of these same strings
    ...(node.services.pubsub != null ? { pubsub: node.services.pubsub as unknown as PubSub } : {})
  }
}
