/**
 * A libp2p node configured for agents.
 */
import './polyfill.js'
import { logger } from '@libp2p/logger'
import { peerIdFromString } from '@libp2p/peer-id'
import { CODE_P2P, multiaddr } from '@multiformats/multiaddr'
import { MemoryDatastore } from 'datastore-core'
import { InvalidArgumentError } from './errors.js'
import { messaging } from './messaging.js'
import { corkEncrypted } from './cork-writes.js'
import { holdFirstSelfQuery, releaseFirstQueries } from './dht-start.js'
import { guardControlFrames } from './muxer-guard.js'
import { domainKeyProtector, loadDomainKey } from './private-network.js'
import { loadGossipsub, loadLevelDatastore, loadMdns, loadSelfKeyLoader, loadStack, loadTransport } from './stack.js'
import type { Messaging, MessagingInit } from './messaging.js'
import type { PrivateNetworkInit } from './private-network.js'
import type { GossipSub } from '@libp2p/gossipsub'
import type { Identify } from '@libp2p/identify'
import type { ComponentLogger, ConnectionGater, Libp2p, Metrics, PeerDiscovery, PrivateKey } from '@libp2p/interface'
import type { KadDHT } from '@libp2p/kad-dht'
import type { LevelDatastore } from 'datastore-level'
import type { Ping } from '@libp2p/ping'
import type { Datastore } from 'interface-datastore'

/** Logs what happens before a node (and its own logger) exists */
const log = logger('ioa:transport:node')

/** The DHT protocol of the agent network (kept apart from the IPFS DHT) */
export const IOA_DHT_PROTOCOL = '/ioa/kad/1.0.0'

export type TransportKind = 'tcp' | 'websockets' | 'memory'

export interface TransportNodeInit {
  /**
   * Addresses to listen on. Use `/ip4/…/tcp/…` for TCP, `…/tcp/…/ws` for
   * WebSockets and `/memory/<name>` for the in-memory transport.
   *
   * @default ['/ip4/127.0.0.1/tcp/0']
   */
  listen?: string[]

  /**
   * Transports to enable
   *
   * @default ['tcp', 'websockets']
   */
  transports?: TransportKind[]

  /**
   * Multiaddrs (with `/p2p/<peer id>`) to dial at start-up to join the network
   *
   * @default []
   */
  bootstrap?: string[]

  /**
   * Discover peers on the local network with multicast DNS
   *
   * @default false
   */
  mdns?: boolean

  /**
   * Where node state lives: a datastore instance, or a directory that is
   * opened as a LevelDB datastore. Takes precedence over `dataDir`.
   *
   * @default an in-memory datastore
   */
  datastore?: Datastore

  /**
   * Directory of a LevelDB datastore (created if missing) for node state
   *
   * @default undefined (state is kept in memory)
   */
  dataDir?: string

  /**
   * The node's private key. When absent the key is loaded from the datastore,
   * or created and saved there, so the peer id survives restarts of a node
   * with a persistent datastore.
   *
   * @default loaded from or created in the datastore
   */
  privateKey?: PrivateKey

  /**
   * Keep private and loopback addresses in the DHT (a LAN, a test network or
   * one machine). Set to `false` on the public internet.
   *
   * @default true
   */
  allowPrivateAddresses?: boolean

  /**
   * Run the DHT in client mode (query, but do not answer queries)
   *
   * @default false
   */
  dhtClientMode?: boolean

  /**
   * DHT protocol id
   *
   * @default '/ioa/kad/1.0.0', or the key's id in a private network (`/ioa/kad/1.0.0/psk/<16 hex>`)
   */
  dhtProtocol?: string

  /**
   * Make this node a member of a private network (a domain's own network):
   * every connection is protected with the pre-shared key (libp2p pnet), so
   * a peer without the key cannot complete a connection, and the DHT runs
   * under a protocol id derived from the key (spec/interconnect.md, "Private
   * domain networks"). A bad or unreadable key fails with
   * `InvalidDomainKeyError`.
   *
   * @default undefined (a public network: no pre-shared key)
   */
  privateNetwork?: PrivateNetworkInit

  /**
   * Kademlia bucket size (k)
   *
   * @default 20
   */
  dhtKBucketSize?: number

  /**
   * Delay of the DHT's first self-query after start, in ms (0 to 60,000):
   * lookups do not wait for it, and run first, so that a newcomer's first
   * lookup does not compete with the dials of its self-query
   *
   * @default 1_000
   */
  selfQueryDelay?: number

  /**
   * Longest time the first DHT self-query, once due, waits for the lookups
   * and announcements of this node that are running to end, in ms (0 to
   * 60,000; 0: it does not wait). Its dials (about ten new connections)
   * would otherwise take the CPU of a newcomer's first lookup that is still
   * running after `selfQueryDelay`, as on a machine with busy cores.
   *
   * @default 10_000
   */
  selfQueryHold?: number

  /**
   * How long DHT provider records stay valid, in ms. Agents come and go, so
   * records live minutes, not IPFS's days: a node that stores a record drops it
   * after this long, and a providing node re-announces at half of it.
   *
   * @default 600_000
   */
  providerTtl?: number

  /**
   * Multiaddrs (IP prefixes such as `/ip4/127.0.0.1` or
   * `/ip4/10.0.0.0/ipcidr/8`) exempt from connection limits and the inbound
   * rate limit. Connections from these addresses bypass `maxConnections`,
   * libp2p's pending-connection cap and its inbound rate limit (5 per second
   * per host), so list only hosts you control: tests and single-machine
   * demos that start many nodes on loopback pass `['/ip4/127.0.0.1', '/ip6/::1']`.
   *
   * @default [] (every connection counts against the limits, loopback too)
   */
  allow?: string[]

  /**
   * Largest number of open connections
   *
   * @default 300
   */
  maxConnections?: number

  /**
   * Decides which peers and addresses this node may connect to or accept
   * connections from (a domain's inner nodes refuse peers outside the domain)
   *
   * @default libp2p's default gater (allows every peer)
   */
  connectionGater?: ConnectionGater

  /**
   * Run a gossipsub router as the `pubsub` service (signed messages only:
   * every message carries its sender's peer key and signature, and an
   * unsigned one is dropped). The interconnect announces capabilities on it
   * (spec/interconnect.md, section 12). `false` leaves it out.
   *
   * @default true
   */
  pubsub?: boolean | PubsubInit

  /**
   * Options of the messaging service
   *
   * @default {}
   */
  messaging?: MessagingInit

  /**
   * libp2p's metrics component (its `metrics` option), e.g. `@libp2p/prometheus-metrics`:
   * libp2p's connection, stream and DHT metrics and the layers' own (`ioa_*`,
   * registered through `components.metrics`) are recorded there. The
   * transport imports no metrics library itself: without this option
   * nothing is recorded and nothing is loaded.
   *
   * @default undefined (no metrics)
   */
  metrics?: (components: { logger: ComponentLogger }) => Metrics

  /**
   * Start the node before returning it
   *
   * @default true
   */
  start?: boolean
}

/** Options of the `pubsub` service (a subset of gossipsub's) */
export interface PubsubInit {
  /**
   * Largest gossipsub RPC (one length-prefixed frame of messages and
   * control data) read from a peer, in bytes; a longer one closes that
   * peer's stream
   *
   * @default 1_048_576
   */
  maxRpcBytes?: number

  /**
   * Interval of the gossipsub heartbeat (mesh upkeep, gossip), in ms
   *
   * @default 1_000
   */
  heartbeatInterval?: number
}

export type TransportServices = {
  identify: Identify
  ping: Ping
  dht: KadDHT
  messaging: Messaging
  /** Present unless the node was created with `pubsub: false` */
  pubsub?: GossipSub
}

/** A running libp2p node with the agent services */
export type TransportNode = Libp2p<TransportServices>

/**
 * Open the datastore named by the init options: the given instance, a LevelDB
 * directory, or memory. The caller owns closing a store it passed in; stores
 * opened here are closed when the node stops.
 */
export async function openDatastore (init: TransportNodeInit): Promise<{ datastore: Datastore, owned: boolean }> {
  if (init.datastore != null) {
    return { datastore: init.datastore, owned: false }
  }
  if (init.dataDir != null) {
    const store = new (await loadLevelDatastore())(init.dataDir)
    await store.open()
    return { datastore: store, owned: true }
  }
  return { datastore: new MemoryDatastore(), owned: false }
}

/**
 * Put the bootstrap peers' addresses in the peer store before the node
 * starts. The bootstrap module adds them only after start-up; a request to a
 * bootstrap peer by its peer id before then would start a dial without
 * addresses, which asks the DHT for the peer, which waits for a routing table
 * that only that dial could fill (and the bootstrap module's own dial joins
 * the stuck one): the request hung for its whole timeout.
 */
async function seedBootstrapPeers (node: Libp2p, list: string[]): Promise<void> {
  for (const addr of list) {
    try {
      const ma = multiaddr(addr)
      const id = ma.getComponents().findLast(c => c.code === CODE_P2P)?.value
      if (id == null) continue
      await node.peerStore.merge(peerIdFromString(id), { multiaddrs: [ma] })
    } catch (err: any) {
      // the bootstrap module reports a bad entry; this only loses the head start
      log('could not keep the address of bootstrap peer %s: %s', addr, err?.message ?? err)
    }
  }
}

/**
 * Dial the bootstrap peers as soon as the node has started. The bootstrap
 * module dials them from a timer (its `timeout`, 0 here), which fires only
 * once the caller's start-up code yields to the event loop: the layers
 * above are built first (tens of ms of a cold start), and the handshake's
 * round trips then waited for them. The module's own dial joins this one
 * (libp2p dials one peer once).
 */
function dialBootstrapPeers (node: Libp2p, list: string[]): void {
  for (const addr of list) {
    let ma
    try {
      ma = multiaddr(addr)
    } catch (err: any) {
      // the bootstrap module reports the bad entry as well
      log('not dialling bootstrap entry %s early: %s', addr, err?.message ?? err)
      continue
    }
    node.dial(ma).catch((err: any) => {
      // the bootstrap module dials again and logs its own failure
      log('early dial of bootstrap peer %s failed: %s', addr, err?.message ?? err)
    })
  }
}

/** The checked options of the gossipsub service, or undefined when it is off */
function pubsubOptions (init: TransportNodeInit['pubsub']): Required<PubsubInit> | undefined {
  if (init === false) return undefined
  const o = init === true || init == null ? {} : init
  const maxRpcBytes = o.maxRpcBytes ?? 1_048_576
  if (!Number.isInteger(maxRpcBytes) || maxRpcBytes < 1024 || maxRpcBytes > 16_777_216) {
    throw new InvalidArgumentError(`pubsub.maxRpcBytes must be an integer 1024-16777216, got ${maxRpcBytes}`)
  }
  const heartbeatInterval = o.heartbeatInterval ?? 1_000
  if (!Number.isInteger(heartbeatInterval) || heartbeatInterval < 100 || heartbeatInterval > 60_000) {
    throw new InvalidArgumentError(`pubsub.heartbeatInterval must be an integer 100-60000 ms, got ${heartbeatInterval}`)
  }
  return { maxRpcBytes, heartbeatInterval }
}

/**
 * The hosts of `allow` (`/ip4/<addr>` or `/ip6/<addr>` entries; ranges
 * cannot be listed) as gossipsub's IP-colocation whitelist
 */
function colocationWhitelist (allow: string[]): Set<string> {
  const ips = new Set<string>()
  for (const entry of allow) {
    const m = /^\/ip[46]\/([^/]+)$/.exec(entry)
    if (m != null) ips.add(m[1])
  }
  return ips
}

/** The gossipsub service (its module loaded on first use) */
async function pubsubService (o: Required<PubsubInit>, allow: string[]): Promise<ReturnType<Awaited<ReturnType<typeof loadGossipsub>>>> {
  const gossipsub = await loadGossipsub()
  return gossipsub({
    // gossipsub scores down every peer of an IP address shared by more than
    // 10 peers (-5 per surplus peer squared: 14 peers on one address reach the
    // graylist, and a graylisted peer's subscriptions and messages are all
    // ignored). The hosts of `allow` are the operator's own (a test or a demo
    // on loopback, a domain behind one address): they are exempt, as they are
    // from the connection limits.
    scoreParams: { IPColocationFactorWhitelist: colocationWhitelist(allow) },
    // the sender signs every message with its peer key; unsigned ones are dropped
    globalSignaturePolicy: 'StrictSign',
    // gossipsub only: no floodsub fallback protocol
    fallbackToFloodsub: false,
    // a node alone on its topic publishes into the void instead of failing
    allowPublishToZeroTopicPeers: true,
    maxInboundDataLength: o.maxRpcBytes,
    heartbeatInterval: o.heartbeatInterval,
    debugName: 'ioa:transport:pubsub'
  })
}

/**
 * Put the node's own addresses in its peer store as soon as a transport
 * listens. libp2p's address manager writes them 1 s (a debounce) after the
 * first listener: until then the node's own record has no addresses, and
 * kad-dht leaves a provider without addresses out of its GET_PROVIDERS
 * answers, so in that second a node did not name itself as the provider of
 * what it had just announced. A peer that asked it right away (a two-node
 * network, before the fire-and-forget ADD_PROVIDER had been stored) got no
 * provider at all. The address manager's own write follows with the same
 * addresses.
 */
function recordOwnAddresses (node: Libp2p): void {
  const self = node.peerId.toString()
  node.addEventListener('transport:listening', () => {
    const multiaddrs = node.getMultiaddrs().map(ma => ma.getComponents().findLast(c => c.code === CODE_P2P)?.value === self ? ma.decapsulate(`/p2p/${self}`) : ma)
    node.peerStore.patch(node.peerId, { multiaddrs }).catch((err: any) => {
      // the address manager writes them again within a second
      log('could not record the own addresses yet: %s', err?.message ?? err)
    })
  })
}

/**
 * Create a libp2p node for agents: TCP/WebSockets/memory transports, Noise,
 * Yamux, identify, ping, Kademlia DHT on `/ioa/kad/1.0.0`, gossipsub (unless
 * `pubsub: false`) and the messaging service; in a private network, the pre-shared-key connection protector.
 */
export async function createTransportNode (init: TransportNodeInit = {}): Promise<TransportNode> {
  const kinds = init.transports ?? ['tcp', 'websockets']
  for (const k of kinds) {
    if (k !== 'tcp' && k !== 'websockets' && k !== 'memory') {
      throw new InvalidArgumentError(`Unknown transport "${String(k)}"`)
    }
  }

  const providerTtl = init.providerTtl ?? 600_000
  // above 2^31-1 ms Node.js timers fire after 1 ms: the reprovider would spin
  if (!Number.isFinite(providerTtl) || providerTtl < 1000 || providerTtl > 2_147_483_647) {
    throw new InvalidArgumentError(`providerTtl must be 1000 to 2147483647 ms (the longest timer delay), got ${providerTtl}`)
  }
  if (init.selfQueryDelay != null && (!Number.isInteger(init.selfQueryDelay) || init.selfQueryDelay < 0 || init.selfQueryDelay > 60_000)) {
    throw new InvalidArgumentError(`selfQueryDelay must be an integer 0 to 60000 ms, got ${init.selfQueryDelay}`)
  }
  if (init.selfQueryHold != null && (!Number.isInteger(init.selfQueryHold) || init.selfQueryHold < 0 || init.selfQueryHold > 60_000)) {
    throw new InvalidArgumentError(`selfQueryHold must be an integer 0 to 60000 ms, got ${init.selfQueryHold}`)
  }
  const listen = init.listen ?? (kinds.includes('tcp') ? ['/ip4/127.0.0.1/tcp/0'] : [])
  const pubsubOpts = pubsubOptions(init.pubsub)
  const { datastore, owned } = await openDatastore(init)

  try {
    // gossipsub's module, the transports' and the domain key load beside the
    // core modules, not after them: the reads of one overlap the compiling of another
    const [stack, pubsub, loadOrCreateSelfKey, transports, domainKey] = await Promise.all([
      loadStack(),
      pubsubOpts != null ? pubsubService(pubsubOpts, init.allow ?? []) : undefined,
      init.privateKey == null ? loadSelfKeyLoader() : undefined,
      Promise.all(kinds.map(loadTransport)),
      init.privateNetwork != null ? loadDomainKey(init.privateNetwork) : undefined
    ])
    const { createLibp2p, noise, yamux, bootstrap, identify, kadDHT, passthroughMapper, removePrivateAddressesMapper, ping } = stack
    // a node not given its key keeps it in its datastore
    const privateKey = init.privateKey ?? await loadOrCreateSelfKey?.(datastore)

    const peerDiscovery: Array<(components: any) => PeerDiscovery> = []
    if (init.bootstrap != null && init.bootstrap.length > 0) {
      peerDiscovery.push(bootstrap({ list: init.bootstrap, timeout: 0 }))
    }
    if (init.mdns === true) {
      peerDiscovery.push((await loadMdns())())
    }

    const node = await createLibp2p<TransportServices>({
      privateKey,
      datastore,
      start: false,
      addresses: { listen },
      transports,
      connectionEncrypters: [corkEncrypted(noise())],
      streamMuxers: [guardControlFrames(yamux())],
      peerDiscovery,
      ...(init.connectionGater != null ? { connectionGater: init.connectionGater } : {}),
      ...(init.metrics != null ? { metrics: init.metrics } : {}),
      ...(domainKey != null ? { connectionProtector: await domainKeyProtector(domainKey) } : {}),
      // a busy node can miss a heartbeat ping; that alone must not cut the link
      connectionMonitor: { abortConnectionOnPingFailure: false },
      connectionManager: {
        maxConnections: init.maxConnections ?? 300,
        allow: init.allow ?? []
      },
      services: {
        identify: identify(),
        ping: ping({ maxOutboundStreams: 4, maxInboundStreams: 8 }),
        dht: kadDHT({
          protocol: init.dhtProtocol ?? domainKey?.dhtProtocol ?? IOA_DHT_PROTOCOL,
          clientMode: init.dhtClientMode ?? false,
          peerInfoMapper: (init.allowPrivateAddresses ?? true) ? passthroughMapper : removePrivateAddressesMapper,
          kBucketSize: init.dhtKBucketSize,
          // kad-dht holds every query until its first self-query, which it
          // starts 1 s after start-up by default; that hold is lifted
          // (releaseFirstQueries below), so the self-query need not run at
          // once, and it should not: it dials and pings the ~20 peers closest
          // to the node, which on a newcomer competed with the dials of its
          // first lookup (spec/transport.md 1, joining). It runs after
          // `selfQueryDelay` instead, and once the lookups running then
          // have ended (holdFirstSelfQuery below, at most `selfQueryHold`).
          initialQuerySelfInterval: init.selfQueryDelay ?? 1_000,
          // kad-dht expires records it stores for others, and re-announces its
          // own, in the reprovider's periodic pass: `validity` is the record TTL
          reprovide: {
            validity: providerTtl,
            threshold: Math.round(providerTtl / 2),
            interval: Math.max(1000, Math.round(providerTtl / 4))
          }
        }),
        messaging: messaging(init.messaging),
        ...(pubsub != null ? { pubsub } : {})
      }
    })

    if (domainKey != null) {
      const log = node.logger.forComponent('ioa:transport:pnet')
      log('private network: connections need the pre-shared key; DHT %s', init.dhtProtocol ?? domainKey.dhtProtocol)
      if (domainKey.exposed === true) log.error('the pre-shared key file %s can be read by other users: chmod 600 it', init.privateNetwork?.pskFile)
    }

    if (owned) {
      // the store opened here closes when the node stops, and stop() waits
      // for it, so the directory can be reopened at once
      const stop = node.stop.bind(node)
      let closed = false
      node.stop = async () => {
        await stop()
        if (!closed) {
          closed = true
          await (datastore as LevelDatastore).close()
        }
      }
    }

    await seedBootstrapPeers(node, init.bootstrap ?? [])
    recordOwnAddresses(node)
    releaseFirstQueries(node.services.dht)
    holdFirstSelfQuery(node.services.dht, init.selfQueryHold ?? 10_000)

    if (init.start !== false) {
      await node.start()
      dialBootstrapPeers(node, init.bootstrap ?? [])
    }

    return node
  } catch (err) {
    if (owned) {
      // the caller needs the error that stopped the node; a store that also
      // fails to close is only logged
      await (datastore as LevelDatastore).close().catch((closeErr: unknown) => {
        log.error('could not close the datastore after a failed start - %e', closeErr)
      })
    }
    throw err
  }
}
