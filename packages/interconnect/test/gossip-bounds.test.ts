/**
 * The gossip index's rules and bounds (spec interconnect.md 12) against
 * hand-made snapshots published by separate libp2p nodes over TCP: ttl
 * expiry, stale seq, malformed messages, oversized snapshots, the
 * per-announcer capability cap and the LRU of announcers.
 */
import { createTransportNode } from '@ioa/transport'
import * as dagCbor from '@ipld/dag-cbor'
import { afterEach, describe, expect, it } from 'vitest'
import { LOOPBACK, until } from '../../../test/util.js'
import { createInterconnect, encodeSnapshot, gossipTopic } from '../src/index.js'
import type { GossipInit, Interconnect } from '../src/index.js'
import type { TransportNode } from '@ioa/transport'

const stoppers: Array<{ stop(): void | Promise<void> }> = []

afterEach(async () => {
  for (const x of stoppers.splice(0).reverse()) await Promise.resolve(x.stop()).catch(() => {})
})

const DOMAIN = 'bounds.example'
const TOPIC = gossipTopic(DOMAIN)
const POLL = { timeout: 20_000, interval: 100 }

async function tcpNode (): Promise<TransportNode> {
  const node = await createTransportNode({ transports: ['tcp'], allow: LOOPBACK })
  stoppers.push(node)
  return node
}

/** The node under test, with an interconnect and its gossip options */
async function receiver (gossip: GossipInit = {}): Promise<{ node: TransportNode, ic: Interconnect }> {
  const node = await tcpNode()
  const ic = await createInterconnect(node, { domain: DOMAIN, gossip })
  stoppers.push(ic)
  return { node, ic }
}

/** A bare node on the topic that publishes what a test hands it, linked to `to` */
async function rawPublisher (to: TransportNode): Promise<{ node: TransportNode, id: string, publish(data: Uint8Array): Promise<void> }> {
  const node = await tcpNode()
  const pubsub = node.services.pubsub
  if (pubsub == null) throw new Error('no pubsub service')
  pubsub.subscribe(TOPIC)
  await node.dial(to.getMultiaddrs()[0])
  // each side must know the other subscribed before a publication reaches it
  await until(() => pubsub.getSubscribers(TOPIC).some(p => p.equals(to.peerId)), { ...POLL, what: 'subscription of the receiver' })
  await until(() => to.services.pubsub?.getSubscribers(TOPIC).some(p => p.equals(node.peerId)), { ...POLL, what: 'subscription of the publisher' })
  return {
    node,
    id: node.peerId.toString(),
    publish: async (data) => { await pubsub.publish(TOPIC, data) }
  }
}

const snap = (caps: string[], o: { seq?: number, ttl?: number } = {}): Uint8Array =>
  encodeSnapshot({ v: 1, seq: o.seq ?? Date.now(), ttl: o.ttl ?? 60_000, caps })

describe('gossip index over TCP', () => {
  it('drops a snapshot after its ttl, and clamps a ttl above maxTtl', async () => {
    const { node, ic } = await receiver({ maxTtl: 4_000 })
    const a = await rawPublisher(node)
    const b = await rawPublisher(node)
    await a.publish(snap(['weather.forecast'], { ttl: 1_500 }))
    // asks for an hour; the receiver keeps it at most maxTtl (4 s)
    await b.publish(snap(['weather.radar'], { ttl: 3_600_000 }))
    await until(() => ic.gossip?.announcers('weather').length === 2, { ...POLL, what: 'both snapshots' })
    const seen = Date.now()
    await until(() => !ic.gossip?.announcers('weather').includes(a.id), { ...POLL, what: 'expiry of the 1.5 s snapshot' })
    expect(ic.gossip?.announcers('weather.radar')).toEqual([b.id])
    await until(() => ic.gossip?.announcers('weather').length === 0, { ...POLL, what: 'expiry of the clamped snapshot' })
    expect(Date.now() - seen).toBeLessThan(30_000)
  })

  it('ignores a snapshot whose seq is not newer than the one held (replace semantics)', async () => {
    const { node, ic } = await receiver()
    const p = await rawPublisher(node)
    const seq = Date.now()
    await p.publish(snap(['food.pizza'], { seq: seq + 10 }))
    await until(() => ic.gossip?.announcers('food.pizza').includes(p.id), { ...POLL, what: 'first snapshot' })
    await p.publish(snap(['food.sushi'], { seq }))
    await until(() => (ic.gossip?.stats().ignored ?? 0) >= 1, { ...POLL, what: 'stale snapshot ignored' })
    expect(ic.gossip?.announcers('food.sushi')).toEqual([])
    expect(ic.gossip?.announcers('food.pizza')).toEqual([p.id])
    // a newer one replaces the whole set
    await p.publish(snap(['food.sushi'], { seq: seq + 20 }))
    await until(() => ic.gossip?.announcers('food.sushi').includes(p.id), { ...POLL, what: 'newer snapshot' })
    expect(ic.gossip?.announcers('food.pizza')).toEqual([])
    // a replay of a snapshot long expired is ignored, even with nothing held
    await p.publish(snap(['food.tacos'], { seq: seq - 3_600_000, ttl: 60_000 }))
    await until(() => (ic.gossip?.stats().ignored ?? 0) >= 2, { ...POLL, what: 'replay ignored' })
    expect(ic.gossip?.announcers('food.tacos')).toEqual([])
  })

  it('rejects malformed messages with a typed reason and keeps working', async () => {
    const { node, ic } = await receiver()
    const p = await rawPublisher(node)
    await p.publish(new Uint8Array([0xff, 0x00, 0x13]))
    await p.publish(dagCbor.encode({ v: 1, seq: Date.now(), ttl: 1000, caps: ['Not A Name'] }))
    await p.publish(dagCbor.encode({ v: 2, seq: Date.now(), ttl: 1000, caps: [] }))
    await p.publish(dagCbor.encode(['v', 1]))
    await p.publish(dagCbor.encode({ v: 1, seq: Date.now(), ttl: 1000, caps: ['a.b', 'a.b'] }))
    await until(() => ic.gossip?.stats().rejected.INVALID_SNAPSHOT === 5, { ...POLL, what: 'five rejections' })
    expect(ic.gossip?.stats().announcers).toBe(0)
    // the node still takes good snapshots and still answers lookups
    await p.publish(snap(['office.printer']))
    await until(() => ic.gossip?.announcers('office').includes(p.id), { ...POLL, what: 'a good snapshot after the bad ones' })
    expect(await ic.discoverAll({ capability: 'nothing.here' }, { dht: false })).toEqual([])
  })

  it('rejects a snapshot above maxCapabilities or maxMessageBytes', async () => {
    const { node, ic } = await receiver({ maxCapabilities: 4, maxMessageBytes: 256 })
    const p = await rawPublisher(node)
    await p.publish(snap(['a.a', 'a.b', 'a.c', 'a.d', 'a.e']))
    await until(() => ic.gossip?.stats().rejected.SNAPSHOT_TOO_LARGE === 1, { ...POLL, what: 'too many capabilities rejected' })
    expect(ic.gossip?.announcers('a')).toEqual([])
    await p.publish(snap(['a.a', 'a.b', 'a.c', 'a.d'], { seq: Date.now() + 1_000 }))
    await until(() => ic.gossip?.announcers('a').length === 1, { ...POLL, what: 'four capabilities accepted' })
    const big = snap(Array.from({ length: 4 }, (_, i) => `big${i}.${'q'.repeat(32)}.${'r'.repeat(32)}`), { seq: Date.now() + 2_000 })
    expect(big.byteLength).toBeGreaterThan(256)
    await p.publish(big)
    await until(() => ic.gossip?.stats().rejected.SNAPSHOT_TOO_LARGE === 2, { ...POLL, what: 'oversized snapshot rejected' })
    expect(ic.gossip?.announcers('a').length).toBe(1)
  })

  it('takes at most maxSnapshotsPerMinute snapshots from one announcer', async () => {
    const { node, ic } = await receiver({ maxSnapshotsPerMinute: 3 })
    const p = await rawPublisher(node)
    const seq = Date.now()
    for (let i = 0; i < 5; i++) await p.publish(snap([`rate.r${i}`], { seq: seq + i }))
    await until(() => (ic.gossip?.stats().limited ?? 0) === 2, { ...POLL, what: 'two snapshots over the budget' })
    expect(ic.gossip?.stats().accepted).toBe(3)
    expect(ic.gossip?.announcers('rate.r2')).toEqual([p.id])
    expect(ic.gossip?.announcers('rate.r4')).toEqual([])
  })

  it('holds at most maxAnnouncers announcers, dropping the least recently updated', async () => {
    const { node, ic } = await receiver({ maxAnnouncers: 2 })
    const ps = [await rawPublisher(node), await rawPublisher(node), await rawPublisher(node)]
    for (const [i, p] of ps.entries()) {
      await p.publish(snap([`shop.s${i}`]))
      await until(() => ic.gossip?.announcers(`shop.s${i}`).includes(p.id), { ...POLL, what: `announcer ${i}` })
    }
    expect(ic.gossip?.announcers('shop').sort()).toEqual([ps[1].id, ps[2].id].sort())
    expect(ic.gossip?.stats()).toMatchObject({ announcers: 2, evicted: 1 })
  })
})
