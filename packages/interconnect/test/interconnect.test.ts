/**
 * The interconnect layer between separate nodes over TCP on 127.0.0.1:
 * hosting, DHT discovery, routing, forged cards, TTLs, restarts and bad input.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createTransportNode } from '@ioa/transport'
import type { MemoryDatastore } from 'datastore-core'
import { LevelDatastore } from 'datastore-level'
import { afterEach, describe, expect, it } from 'vitest'
import { startNetwork } from '../../../test/harness/index.js'
import { expectErrorName, until } from '../../../test/util.js'
import { capabilityCid, createIdentity, createInterconnect, signCard, CARD_PROTOCOL, ROUTE_PROTOCOL } from '../src/index.js'
import type { Network } from '../../../test/harness/index.js'
import type { Interconnect, SignedCard } from '../src/index.js'
import type { TransportNode } from '@ioa/transport'

let net: Network | undefined
const extra: Array<{ stop(): Promise<void> }> = []

afterEach(async () => {
  for (const x of extra.splice(0).reverse()) await x.stop().catch(() => {})
  await net?.stop()
  net = undefined
})

/** How `until` polls the network in these tests, unless a call says otherwise */
const POLL = { timeout: 20_000, interval: 200 }

async function network (size: number, providerTtl?: number): Promise<{ net: Network, ics: Interconnect[] }> {
  net = await startNetwork({ size, transport: 'tcp', topology: 'ring', nodeInit: () => (providerTtl != null ? { providerTtl } : {}) })
  await net.waitForRoutingTables(2, { timeout: 20_000 })
  const ics = await Promise.all(net.nodes.map(async n => createInterconnect(n, { domain: 'test.example', requestTimeout: 3_000 })))
  for (const ic of ics) extra.push(ic)
  return { net, ics }
}

describe('interconnect over TCP', () => {
  it('discovers agents by exact capability and by prefix, filters and ranks them, and routes to them', async () => {
    const { net, ics } = await network(6)
    const hotelA = await ics[2].host({
      key: 'hotel-a',
      name: 'Hotel A',
      domain: 'hotels-a.example',
      skills: [{ id: 'travel.hotel.booking', tags: ['eu', 'instant'], inputSchema: { type: 'object', required: ['city'], properties: { city: { type: 'string' } } } }],
      inbox: (m) => ({ hotel: 'A', got: m.body, from: m.from, skill: m.skill })
    })
    const hotelB = await ics[4].host({
      key: 'hotel-b',
      name: 'Hotel B',
      domain: 'hotels-b.example',
      skills: [{ id: 'travel.hotel.search', tags: ['eu'] }],
      inbox: () => ({ hotel: 'B' })
    })
    await ics[3].host({ key: 'map', name: 'Map', skills: [{ id: 'geo.route' }] })
    const car = await ics[5].host({ key: 'car', name: 'Car', skills: [{ id: 'vehicle.car.assistant' }] })

    const asker = ics[0]
    const exact = await until(async () => {
      const r = await asker.discoverAll({ capability: 'travel.hotel.booking' }, { cache: false, timeout: 5_000 })
      return r.length === 1 ? r : undefined
    }, { ...POLL, what: 'exact lookup' })
    expect(exact[0].card.id).toBe(hotelA.did)
    expect(exact[0].peer).toBe(net.nodes[2].peerId.toString())
    // an asker whose gossip index is still empty asks its neighbours' indexes
    // (spec 12.6) beside the DHT walk: either channel may name the host first
    expect(['dht', 'gossip']).toContain(exact[0].source)
    expect(exact[0].latency).toBeGreaterThan(0)

    const prefix = await until(async () => {
      const r = await asker.discoverAll({ capability: 'travel.hotel' }, { cache: false, timeout: 5_000 })
      return r.length === 2 ? r : undefined
    }, { ...POLL, what: 'prefix lookup' })
    expect(prefix.map(r => r.card.id).sort()).toEqual([hotelA.did, hotelB.did].sort())
    expect(prefix[0].score).toBeGreaterThanOrEqual(prefix[1].score)

    // top-level prefix finds both too; unrelated capability finds neither
    expect((await asker.discoverAll({ capability: 'travel' }, { cache: false })).length).toBe(2)
    expect(await asker.discoverAll({ capability: 'finance' }, { cache: false, timeout: 3_000 })).toEqual([])

    // filters
    expect((await asker.discoverAll({ capability: 'travel', tags: ['instant'] })).map(r => r.card.id)).toEqual([hotelA.did])
    expect((await asker.discoverAll({ capability: 'travel', domain: 'hotels-b.example' })).map(r => r.card.id)).toEqual([hotelB.did])
    expect((await asker.discoverAll({ capability: 'travel.hotel.booking', input: { type: 'object', properties: { city: { type: 'string' } } } })).length).toBe(1)
    expect((await asker.discoverAll({ capability: 'travel.hotel.booking', input: { type: 'object', properties: { zip: { type: 'string' } } } })).length).toBe(0)

    // the second lookup is served from the cache
    const cached = await asker.discoverAll({ capability: 'travel.hotel' })
    expect(cached.every(r => r.source === 'cache')).toBe(true)

    // results stream and the caller can stop early
    let n = 0
    for await (const _ of asker.discover({ capability: 'travel' }, { cache: false })) {
      n++
      break
    }
    expect(n).toBe(1)

    // routing to an agent id, with the sender's signed card
    const answer = await ics[5].send<{ hotel: string, got: unknown, from: string, skill: string }>(hotelA.did, { nights: 1 }, { from: car.did, skill: 'travel.hotel.booking' })
    expect(answer).toEqual({ hotel: 'A', got: { nights: 1 }, from: car.did, skill: 'travel.hotel.booking' })
    expect(await ics[0].send(hotelB.did, null)).toEqual({ hotel: 'B' })

    // an agent that does not exist anywhere
    const ghost = await createIdentity()
    await expectErrorName(ics[0].send(ghost.did, 1), 'UnknownAgentError')
  }, 90_000)

  it('never returns a forged, tampered or mis-bound card', async () => {
    const { net, ics } = await network(5)
    const honest = await ics[1].host({ key: 'honest', name: 'Honest Hotel', skills: [{ id: 'travel.hotel.booking' }] })
    const forger = ics[3]
    const forgerPeer = net.nodes[3].peerId.toString()

    const copied = honest.card
    const tampered: SignedCard = { card: { ...honest.card.card, name: 'Evil Hotel' }, sig: honest.card.sig }
    const impostor = await createIdentity()
    // the forger signs a card with its own key but claims the honest agent's id
    const wrongKey: SignedCard = { card: { ...honest.card.card, peer: forgerPeer }, sig: (await signCard({ ...honest.card.card, id: impostor.did, peer: forgerPeer }, impostor)).sig }
    forger.addCardSource(() => [copied, tampered, wrongKey])
    await forger.announce('travel.hotel.booking')

    // straight from the forger: every card is dropped
    expect(await ics[0].fetchCards(net.nodes[3].peerId, {})).toEqual([])

    const results = await until(async () => {
      const r = await ics[0].discoverAll({ capability: 'travel.hotel' }, { cache: false, timeout: 5_000 })
      return r.length > 0 ? r : undefined
    }, POLL)
    for (const r of results) {
      expect(r.peer).not.toBe(forgerPeer)
      expect(r.card.name).toBe('Honest Hotel')
    }
    expect(results.map(r => r.card.id)).toEqual([honest.did])
  }, 60_000)

  it('stops returning an agent that left, and its DHT record expires after the TTL', async () => {
    const { net, ics } = await network(5, 3_000)
    const agent = await ics[2].host({ key: 'brief', name: 'Brief', skills: [{ id: 'demo.short-lived' }] })
    await until(async () => (await ics[0].discoverAll({ capability: 'demo.short-lived' }, { cache: false, timeout: 3_000 })).length === 1 || undefined, POLL)

    await ics[2].unhost(agent.did)
    // the card is gone at once: the peer no longer serves it
    expect(await ics[0].discoverAll({ capability: 'demo.short-lived' }, { cache: false, timeout: 3_000 })).toEqual([])

    // and the provider record itself disappears from the DHT after its TTL
    const cid = await capabilityCid('demo.short-lived')
    const holder = net.nodes[2].peerId.toString()
    await until(async () => {
      const found: string[] = []
      for await (const p of net.nodes[0].contentRouting.findProviders(cid, { signal: AbortSignal.timeout(3_000) })) {
        found.push(p.id.toString())
      }
      return found.includes(holder) ? undefined : true
    }, { ...POLL, what: 'provider record expiry' })

    // stopping a node: its agents are not returned
    const other = await ics[4].host({ key: 'other', name: 'Other', skills: [{ id: 'demo.other' }] })
    await until(async () => (await ics[0].discoverAll({ capability: 'demo.other' }, { cache: false, timeout: 3_000 })).length === 1 || undefined, POLL)
    await ics[4].stop()
    await net.nodes[4].stop()
    expect(await ics[0].discoverAll({ capability: 'demo.other' }, { cache: false, timeout: 3_000 })).toEqual([])
    await expectErrorName(ics[0].send(other.did, 1, { timeout: 2_000 }), 'UnknownAgentError')
  }, 90_000)

  it('answers malformed card and route requests with typed errors and keeps serving', async () => {
    const { net, ics } = await network(3)
    const agent = await ics[1].host({ key: 'target', name: 'Target', skills: [{ id: 'test.target' }], inbox: () => 'ok' })
    const m = net.nodes[0].services.messaging
    const target = net.nodes[1].peerId
    const bad = async (proto: string, method: string, payload: unknown): Promise<{ name: string, code: string }> =>
      m.request(target, proto, method, payload).then(() => ({ name: 'none', code: 'none' }), (e: any) => ({ name: e.name, code: e.code }))

    expect(await bad(CARD_PROTOCOL, 'list', { prefix: 'NOT VALID' })).toEqual({ name: 'RemoteError', code: 'BAD_REQUEST' })
    expect(await bad(CARD_PROTOCOL, 'list', { prefix: 'test', extra: 1 })).toEqual({ name: 'RemoteError', code: 'BAD_REQUEST' })
    expect(await bad(CARD_PROTOCOL, 'list', { limit: -3 })).toEqual({ name: 'RemoteError', code: 'BAD_REQUEST' })
    expect(await bad(CARD_PROTOCOL, 'list', 'garbage')).toEqual({ name: 'RemoteError', code: 'BAD_REQUEST' })
    expect(await bad(CARD_PROTOCOL, 'list', { agents: Array(1000).fill('x') })).toEqual({ name: 'RemoteError', code: 'BAD_REQUEST' })
    expect(await bad(CARD_PROTOCOL, 'export', { agent: agent.did, skills: ['test.target'], gateways: [] })).toEqual({ name: 'RemoteError', code: 'FORBIDDEN' })
    expect(await bad(ROUTE_PROTOCOL, 'deliver', { to: 'did:key:nope', body: 1 })).toEqual({ name: 'RemoteError', code: 'BAD_REQUEST' })
    expect(await bad(ROUTE_PROTOCOL, 'deliver', [1, 2, 3])).toEqual({ name: 'RemoteError', code: 'BAD_REQUEST' })
    const stranger = await createIdentity()
    expect(await bad(ROUTE_PROTOCOL, 'deliver', { to: stranger.did, body: 1 })).toEqual({ name: 'RemoteError', code: 'AGENT_NOT_HERE' })
    // a sender card that belongs to another peer is a binding failure
    expect(await bad(ROUTE_PROTOCOL, 'deliver', { to: agent.did, from: agent.did, card: agent.card, body: 1 })).toEqual({ name: 'RemoteError', code: 'CARD_BINDING' })

    // still serving
    expect((await ics[0].fetchCards(target, { prefix: 'test' })).map(c => c.card.id)).toEqual([agent.did])
    expect(await ics[0].send(agent.did, 'hi')).toBe('ok')
  }, 60_000)

  it('measures presence with ping and reports unreachable peers', async () => {
    const { net, ics } = await network(3)
    const rtt = await ics[0].ping(net.nodes[1].peerId)
    expect(rtt).toBeGreaterThanOrEqual(0)
    await net.nodes[2].stop()
    await expectErrorName(ics[0].ping(net.nodes[2].peerId, { signal: AbortSignal.timeout(2_000) }), 'PeerUnreachableError')
  }, 60_000)
})

describe('agent identities across restarts', () => {
  async function startPair (datastore: MemoryDatastore | LevelDatastore): Promise<{ node: TransportNode, ic: Interconnect }> {
    const node = await createTransportNode({ transports: ['tcp'], datastore })
    const ic = await createInterconnect(node, { datastore })
    return { node, ic }
  }

  it('keeps peer and agent ids in a LevelDB datastore', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ioa-ic-'))
    try {
      let store = new LevelDatastore(dir)
      await store.open()
      let { node, ic } = await startPair(store)
      const first = await ic.host({ key: 'robot', name: 'Robot', skills: [{ id: 'security.patrol' }] })
      const peer = node.peerId.toString()
      await ic.stop()
      await node.stop()
      await store.close()

      store = new LevelDatastore(dir)
      await store.open()
      ;({ node, ic } = await startPair(store))
      const again = await ic.host({ key: 'robot', name: 'Robot', skills: [{ id: 'security.patrol' }] })
      const other = await ic.host({ key: 'drone', name: 'Drone', skills: [{ id: 'security.drone' }] })
      expect(node.peerId.toString()).toBe(peer)
      expect(again.did).toBe(first.did)
      expect(other.did).not.toBe(first.did)
      await expectErrorName(ic.host({ key: 'robot', name: 'Robot', skills: [{ id: 'security.patrol' }] }), 'DuplicateAgentError')
      await ic.stop()
      await node.stop()
      await store.close()
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })
})
