/**
 * Test fixture: three TCP nodes in a line, A - B - C (A and C refuse each
 * other, so whatever passes between them goes through B), each with a
 * revocation store and service.
 */
import { createTransportNode } from '@ioa/transport'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { MemoryDatastore } from 'datastore-core'
import { RevocationStore, createRevocationService } from '../src/auth/revocation.js'
import { until } from '../../../test/util.js'
import type { RevocationService, RevocationServiceInit, RevocationStoreInit } from '../src/auth/revocation.js'
import type { TransportNode } from '@ioa/transport'
import type { ConnectionGater, PeerId } from '@libp2p/interface'

/** Refuses the given peers in both directions */
function refuse (peers: PeerId[]): ConnectionGater {
  const denied = (peer: PeerId): boolean => peers.some(p => p.equals(peer))
  return { denyDialPeer: denied, denyInboundEncryptedConnection: denied, denyOutboundEncryptedConnection: denied }
}

export interface RevocationLine {
  nodes: TransportNode[]
  stores: RevocationStore[]
  services: RevocationService[]
  stop(): Promise<void>
}

/** Start A - B - C; `init[i]` configures the store and service of node i */
export async function startRevocationLine (init: Array<{ store?: RevocationStoreInit, service?: RevocationServiceInit }> = []): Promise<RevocationLine> {
  const keys = await Promise.all([generateKeyPair('Ed25519'), generateKeyPair('Ed25519'), generateKeyPair('Ed25519')])
  const ids = keys.map(k => peerIdFromPrivateKey(k))
  const gaters = [refuse([ids[2]]), undefined, refuse([ids[0]])]
  const line: RevocationLine = {
    nodes: [],
    stores: [],
    services: [],
    async stop () {
      for (const s of line.services) await s.stop().catch(() => {})
      for (const n of line.nodes) await Promise.resolve(n.stop()).catch(() => {})
    }
  }
  for (let i = 0; i < 3; i++) {
    const node = await createTransportNode({ transports: ['tcp'], privateKey: keys[i], ...(gaters[i] != null ? { connectionGater: gaters[i] } : {}) })
    line.nodes.push(node)
    const store = await RevocationStore.open(new MemoryDatastore(), init[i]?.store)
    line.stores.push(store)
    line.services.push(await createRevocationService(node, store, init[i]?.service))
  }
  const [A, B, C] = line.nodes
  await A.dial(B.getMultiaddrs())
  await C.dial(B.getMultiaddrs())
  await until(() => B.getPeers().length === 2, { timeout: 10_000, what: 'B connected to A and C' })
  return line
}
