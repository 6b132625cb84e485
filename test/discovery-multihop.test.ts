/**
 * Capability discovery across a 50-node network where the asking node holds
 * no provider record and has no connection to the provider: the lookup must
 * travel through other peers of the Kademlia DHT.
 */
import { sha256 } from 'multiformats/hashes/sha2'
import { afterEach, describe, expect, it } from 'vitest'
import { capabilityCid, createInterconnect } from '../packages/interconnect/src/index.js'
import { startNetwork } from './harness/index.js'
import type { Interconnect } from '../packages/interconnect/src/index.js'
import type { Network } from './harness/index.js'

let net: Network | undefined
let ics: Interconnect[] = []

afterEach(async () => {
  await Promise.all(ics.map(async ic => ic.stop()))
  ics = []
  await net?.stop()
  net = undefined
})

/** Kademlia distance between two 32-byte keys, as a bigint */
function xor (a: Uint8Array, b: Uint8Array): bigint {
  let out = 0n
  for (let i = 0; i < a.length; i++) out = (out << 8n) | BigInt(a[i] ^ b[i])
  return out
}

async function kadKey (bytes: Uint8Array): Promise<Uint8Array> {
  return (await sha256.digest(bytes)).digest
}

async function multiHop (transport: 'memory' | 'tcp', size: number): Promise<void> {
  net = await startNetwork({ size, transport, topology: 'random', degree: 3 })
  await net.waitForRoutingTables(2, { timeout: 60_000 })
  ics = await Promise.all(net.nodes.map(async n => createInterconnect(n, { domain: 'scale.example' })))

  const providerIndex = 0
  const P = net.nodes[providerIndex]
  const agent = await ics[providerIndex].host({ key: 'hotel', name: 'Far Hotel', skills: [{ id: 'travel.hotel.booking' }], inbox: () => 'booked' })

  // wait until the provider's announcements (each prefix and the agent id) are done
  await ics[providerIndex].announced({ signal: AbortSignal.timeout(60_000) })
  const cids = await Promise.all(['travel', 'travel.hotel', 'travel.hotel.booking'].map(capabilityCid))

  // the k = 20 peers closest to the record's key may hold it: ask from the
  // farthest peer that is not connected to the provider
  const target = await kadKey(cids[2].multihash.bytes)
  const distances = await Promise.all(net.nodes.map(async (n, i) => ({ i, d: xor(await kadKey(n.peerId.toMultihash().bytes), target) })))
  distances.sort((a, b) => (a.d < b.d ? -1 : a.d > b.d ? 1 : 0))
  const holders = new Set(distances.slice(0, 20).map(x => x.i))
  const far = distances.map(x => x.i).reverse().filter(i =>
    i !== providerIndex && !holders.has(i) && net!.hops(i, providerIndex) >= 2)
  expect(far.length, 'nodes outside the record holders').toBeGreaterThanOrEqual(2)
  const [askerIndex, otherIndex] = far
  // background DHT traffic (announcement walks, routing-table refreshes) may
  // have linked a node to the provider: drop such links just before a lookup
  // kad-dht tags each node's closest peers keep-alive and libp2p redials
  // them: drop those tags before hanging up
  const untag = async (a: number, b: number): Promise<void> => {
    const node = net!.nodes[a]
    const peer = net!.nodes[b].peerId
    const tags = (await node.peerStore.get(peer).catch(() => undefined))?.tags
    const drop = [...(tags?.keys() ?? [])].filter(t => t.startsWith('keep-alive'))
    if (drop.length > 0) {
      await node.peerStore.merge(peer, { tags: Object.fromEntries(drop.map(t => [t, undefined])) })
    }
  }
  const isolate = async (i: number): Promise<void> => {
    for (let attempt = 0; attempt < 10; attempt++) {
      await untag(providerIndex, i)
      await untag(i, providerIndex)
      await P.hangUp(net!.nodes[i].peerId)
      await net!.nodes[i].hangUp(P.peerId)
      await new Promise(resolve => setTimeout(resolve, 50))
      if (net!.nodes[i].getConnections(P.peerId).length === 0) return
    }
  }
  /**
   * A lookup from node `i` while it has no connection to the provider. On a
   * loaded machine a DHT walk can time out on slow peers and come back empty,
   * or a dial can time out in its Noise handshake: such a walk is tried again
   * (isolated again first), at most 3 times.
   */
  const lookup = async (i: number, capability: string): Promise<Awaited<ReturnType<Interconnect['discoverAll']>>> => {
    let found: Awaited<ReturnType<Interconnect['discoverAll']>> = []
    for (let attempt = 0; attempt < 3 && found.length === 0; attempt++) {
      await isolate(i)
      expect(net!.nodes[i].getConnections(P.peerId)).toHaveLength(0)
      found = await ics[i].discoverAll({ capability }, { cache: false, timeout: 20_000 }).catch(transient(attempt, []))
    }
    return found
  }
  /** A timeout is tried again, on the last attempt it is the test's failure */
  function transient<T> (attempt: number, fallback: T): (err: any) => T {
    return (err) => {
      if (attempt === 2 || !/TimeoutError|EncryptionFailedError|DialFailedError/.test(`${err?.name} ${err?.code}`)) throw err
      return fallback
    }
  }

  // exact name
  const exact = await lookup(askerIndex, 'travel.hotel.booking')
  expect(exact.map(r => r.card.id)).toEqual([agent.did])
  expect(exact[0].peer).toBe(P.peerId.toString())

  // prefixes, from another far node
  for (const prefix of ['travel.hotel', 'travel']) {
    const found = await lookup(otherIndex, prefix)
    expect(found.map(r => r.card.id)).toEqual([agent.did])
  }

  // and the asker can route to the agent by its id alone (a dial that times
  // out on a loaded machine is tried again, at most 3 times)
  let answer: unknown
  for (let attempt = 0; attempt < 3 && answer === undefined; attempt++) {
    answer = await ics[askerIndex].send(agent.did, { nights: 1 }).catch(transient(attempt, undefined))
  }
  expect(answer).toBe('booked')
}

describe('multi-hop capability discovery', () => {
  it('finds an agent across 50 nodes on the memory transport', async () => {
    await multiHop('memory', 50)
  }, 180_000)

  // 30 TCP nodes: beyond k = 20, so the asker can be outside the record holders
  it('finds an agent across 30 nodes over TCP on 127.0.0.1', async () => {
    await multiHop('tcp', 30)
  }, 180_000)
})
