/**
 * The gossip channel of discovery (spec interconnect.md 12) over TCP on
 * 127.0.0.1 between separate nodes: capability snapshots on the domain
 * topic found without the DHT, withdrawal on unhost and on stop, and a
 * joiner that learns the index through `hello`.
 */
import { createTransportNode } from '@ioa/transport'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { startNetwork } from '../../../test/harness/index.js'
import { LOOPBACK, until } from '../../../test/util.js'
import { createInterconnect } from '../src/index.js'
import type { Network } from '../../../test/harness/index.js'
import type { GossipInit, Interconnect } from '../src/index.js'

let net: Network | undefined
const extra: Array<{ stop(): void | Promise<void> }> = []

afterEach(async () => {
  // the spy on a node's peer routing goes with the node
  vi.restoreAllMocks()
  for (const x of extra.splice(0).reverse()) await Promise.resolve(x.stop()).catch(() => {})
  await net?.stop()
  net = undefined
})

const DOMAIN = 'gossip.example'
const POLL = { timeout: 30_000, interval: 200 }

async function network (size: number, gossip: GossipInit = {}): Promise<{ net: Network, ics: Interconnect[] }> {
  net = await startNetwork({ size, transport: 'tcp', topology: 'random', degree: 3 })
  await net.waitForRoutingTables(2, { timeout: 30_000 })
  const ics = await Promise.all(net.nodes.map(async n => createInterconnect(n, { domain: DOMAIN, requestTimeout: 5_000, gossip })))
  for (const ic of ics) extra.push(ic)
  return { net, ics }
}

const peerOf = (ic: Interconnect): string => ic.peerId.toString()

describe('gossip discovery over TCP', () => {
  it('finds a capability held on 3 of 10 nodes in full from every node with the DHT walk off', async () => {
    const { ics } = await network(10)
    const holders = [2, 5, 8]
    const dids = []
    for (const i of holders) {
      dids.push((await ics[i].host({ key: `hotel-${i}`, name: `Hotel ${i}`, skills: [{ id: 'travel.hotel.booking' }] })).did)
    }
    // every node's index learns the three announcers
    for (const ic of ics) {
      await until(() => ic.gossip?.announcers('travel.hotel').length === holders.filter(h => ics[h] !== ic).length, { ...POLL, what: `index of ${peerOf(ic)}` })
    }
    for (const [i, ic] of ics.entries()) {
      const found = await until(async () => {
        const r = await ic.discoverAll({ capability: 'travel.hotel' }, { dht: false, cache: false, timeout: 15_000 })
        return r.length === 3 ? r : undefined
      }, { ...POLL, what: `lookup from node ${i}` })
      expect(found.map(r => r.card.id).sort()).toEqual([...dids].sort())
      for (const r of found) expect(r.source).toBe(holders.includes(i) && r.local ? 'local' : 'gossip')
    }
    // with both channels (the default) each agent is reported once
    const merged = await ics[0].discoverAll({ capability: 'travel.hotel' }, { cache: false, timeout: 15_000 })
    expect(merged.map(r => r.card.id).sort()).toEqual([...dids].sort())
    const stats = ics[0].gossip?.stats()
    expect(stats?.topic).toBe(`/ioa/caps/1/${DOMAIN}`)
    expect(stats?.rejected).toEqual({})
  })

  it('a snapshot carries its announcer\'s addresses: a lookup dials an announcer it has never met without asking the DHT for it', async () => {
    // 1 and 2 meet only through 0
    net = await startNetwork({ size: 3, transport: 'tcp', topology: 'star' })
    await net.waitForRoutingTables(1, { timeout: 30_000 })
    const ics = await Promise.all(net.nodes.map(async n => createInterconnect(n, { domain: DOMAIN, requestTimeout: 5_000 })))
    for (const ic of ics) extra.push(ic)
    const [, asker, holder] = net.nodes
    const agent = await ics[2].host({ key: 'far', name: 'Far', skills: [{ id: 'sea.ferry' }] })
    await until(() => ics[1].gossip?.announcers('sea').includes(peerOf(ics[2])), { ...POLL, what: 'announcer in the index' })
    const listed = ics[1].gossip?.addresses(peerOf(ics[2])) ?? []
    expect(listed.length).toBeGreaterThan(0)
    expect(listed.sort()).toEqual(holder.getMultiaddrs().map(a => a.toString()).sort())
    // forget what the DHT's own traffic taught the asker about the holder (its
    // self-query may have dialled it)
    await asker.hangUp(holder.peerId)
    await asker.peerStore.delete(holder.peerId)
    const findPeer = vi.spyOn(asker.peerRouting, 'findPeer')
    const found = await ics[1].discoverAll({ capability: 'sea.ferry' }, { dht: false, cache: false, timeout: 15_000 })
    expect(found.map(r => r.card.id)).toEqual([agent.did])
    expect(findPeer).not.toHaveBeenCalled()
  })

  it('withdraws a peer from every index on unhost and on stop', async () => {
    const { ics } = await network(4)
    const agent = await ics[1].host({ key: 'a', name: 'A', skills: [{ id: 'geo.route' }] })
    const holder = peerOf(ics[1])
    for (const i of [0, 2, 3]) {
      await until(() => ics[i].gossip?.announcers('geo').includes(holder), { ...POLL, what: `announce seen by ${i}` })
    }
    await ics[1].unhost(agent.did)
    for (const i of [0, 2, 3]) {
      // far sooner than the 180 s ttl: the empty snapshot withdrew it
      await until(() => ics[i].gossip?.announcers('geo').length === 0, { timeout: 10_000, interval: 100, what: `unhost seen by ${i}` })
    }

    await ics[3].host({ key: 'b', name: 'B', skills: [{ id: 'geo.route' }] })
    const second = peerOf(ics[3])
    await until(() => ics[0].gossip?.announcers('geo.route').includes(second), { ...POLL, what: 'second announce' })
    await ics[3].stop()
    for (const i of [0, 1, 2]) {
      await until(() => ics[i].gossip?.announcers('geo.route').length === 0, { timeout: 10_000, interval: 100, what: `stop seen by ${i}` })
    }
  })

  it('a node that joins after the announcements learns the index through hello within seconds', async () => {
    // the nodes answered each other's hellos at start: an answer to the joiner
    // waits until helloMinInterval (2 s here) has passed since then
    const { net, ics } = await network(4, { helloMinInterval: 2_000 })
    for (const i of [1, 2, 3]) await ics[i].host({ key: `m${i}`, name: `M${i}`, skills: [{ id: 'maps.tiles' }] })
    await until(() => ics[0].gossip?.announcers('maps').length === 3, { ...POLL, what: 'index of node 0' })

    // the periodic republication is 60 s away: only the answers to the joiner's hello can fill its index
    const node = await createTransportNode({ transports: ['tcp'], allow: LOOPBACK })
    extra.push(node)
    const joiner = await createInterconnect(node, { domain: DOMAIN })
    extra.push(joiner)
    const started = Date.now()
    await node.dial(net.nodes[0].getMultiaddrs()[0])
    await until(() => joiner.gossip?.announcers('maps').length === 3, { timeout: 15_000, interval: 100, what: 'index of the joiner' })
    const learnedIn = Date.now() - started
    expect(learnedIn).toBeLessThan(15_000)
    const found = await joiner.discoverAll({ capability: 'maps.tiles' }, { dht: false, cache: false, timeout: 15_000 })
    expect(found.map(r => r.source)).toEqual(['gossip', 'gossip', 'gossip'])
  })
})
