/**
 * The libp2p modules a transport node is built from, loaded on first use
 * rather than when `@ioa/transport` is imported: together they are most of
 * the import time of every package above (libp2p itself, Noise, Yamux,
 * kad-dht, the transports), and a program that imports the stack to check a
 * config, sign a delegation or print help never starts a node. Optional
 * pieces (WebSockets, the in-memory transport, gossipsub, mDNS, LevelDB) load only when
 * a node uses them. Each module is imported once per process.
 *
 * The root package.json's `overrides` keep one copy of uint8arraylist,
 * uint8arrays and protons-runtime in the tree: Noise asks for older majors
 * (the same JavaScript, older TypeScript types), and with its own copies it
 * loaded about 50 more modules (multiformats 13 among them) when a node started.
 */
import type { TransportKind } from './node.js'

/** The modules every node needs */
async function core () {
  const [libp2p, noise, yamux, bootstrap, identify, kad, ping] = await Promise.all([
    import('libp2p'),
    import('@chainsafe/libp2p-noise'),
    import('@chainsafe/libp2p-yamux'),
    import('@libp2p/bootstrap'),
    import('@libp2p/identify'),
    import('@libp2p/kad-dht'),
    import('@libp2p/ping')
  ])
  return {
    createLibp2p: libp2p.createLibp2p,
    noise: noise.noise,
    yamux: yamux.yamux,
    bootstrap: bootstrap.bootstrap,
    identify: identify.identify,
    kadDHT: kad.kadDHT,
    passthroughMapper: kad.passthroughMapper,
    removePrivateAddressesMapper: kad.removePrivateAddressesMapper,
    ping: ping.ping
  }
}

let loading: ReturnType<typeof core> | undefined

/** The core modules (imported on the first call) */
export async function loadStack (): ReturnType<typeof core> {
  loading ??= core()
  return loading
}

/** The transport of one kind */
export async function loadTransport (kind: TransportKind) {
  if (kind === 'tcp') return (await import('@libp2p/tcp')).tcp()
  if (kind === 'websockets') return (await import('@libp2p/websockets')).webSockets()
  return (await import('@libp2p/memory')).memory()
}

/**
 * The loader of a node's own key from its datastore (`@libp2p/config`, with
 * the keychain it brings: a third of the stack's load time), only for a
 * node that is not given its key
 */
export async function loadSelfKeyLoader () {
  return (await import('@libp2p/config')).loadOrCreateSelfKey
}

/** The gossipsub router (the `pubsub` service) */
export async function loadGossipsub () {
  return (await import('@libp2p/gossipsub')).gossipsub
}

/** Multicast DNS peer discovery */
export async function loadMdns () {
  return (await import('@libp2p/mdns')).mdns
}

/** The LevelDB datastore class */
export async function loadLevelDatastore () {
  return (await import('datastore-level')).LevelDatastore
}
