/**
 * Cards and discovery under attack, over TCP on 127.0.0.1 between separate
 * libp2p nodes: a rogue's fresher card for the same skill, cards issued in
 * the future, peers that answer with more cards than asked for, and floods
 * of the lookup and route caches (issue 9, items 6 and 7).
 */
import { describe, expect, it } from 'vitest'
import { startNetwork } from '../../../test/harness/index.js'
import { hostAt } from '../../../test/signed-at.js'
import { stopAfterEach } from '../../../test/stop-after-each.js'
import { until } from '../../../test/util.js'
import { capabilityCid, createGateway, createIdentity, createInterconnect, signCard, CARD_PROTOCOL } from '../src/index.js'
import type { Network } from '../../../test/harness/index.js'
import type { HostedAgent, Interconnect, InterconnectInit, SignedCard } from '../src/index.js'

const extra = stopAfterEach()

const POLL = { timeout: 30_000, interval: 200 }
const MINUTE = 60_000

async function network (size: number, init: (i: number) => InterconnectInit = () => ({})): Promise<{ net: Network, ics: Interconnect[] }> {
  const net = await startNetwork({ size, transport: 'tcp', topology: 'full' })
  extra.push(net)
  await net.waitForRoutingTables(1, { timeout: 20_000 })
  const ics = await Promise.all(net.nodes.map(async (n, i) => createInterconnect(n, { domain: 'test.example', requestTimeout: 5_000, ...init(i) })))
  for (const ic of ics) extra.push(ic)
  return { net, ics }
}

describe('cards under attack over TCP', () => {
  it('a rogue with a fresher card for the same skill does not outrank the agent this node has worked with', async () => {
    // 0: the asker; 1: the real hotel agent; 2: the rogue
    const { net, ics } = await network(3, i => (i === 0 ? {} : { publish: false }))
    const [asker, host, rogue] = ics
    const skills = [{ id: 'travel.hotel.booking', tags: ['hotel'] }]

    // the real agent's card was re-signed 9 minutes ago (cards are re-signed every half TTL: 30 min by default)
    const real = await hostAt(host, -9 * MINUTE, { key: 'hotel', name: 'Hotel Booker', skills, inbox: (m) => ({ booked: m.body }) })
    expect(Date.now() - real.card.card.issuedAt).toBeGreaterThanOrEqual(9 * MINUTE)
    await host.announced()

    // the asker works with it: three answered deliveries
    for (let i = 0; i < 3; i++) {
      expect(await until(async () => asker.send(real.did, `room ${i}`, { skill: 'travel.hotel.booking' }).catch(() => undefined), POLL)).toEqual({ booked: `room ${i}` })
    }
    expect(asker.historyOf(real.did)?.successes).toBe(3)

    // the rogue: its own valid card, same name and skill, issued 50 s in the future (within the 60 s skew)
    const fake = await hostAt(rogue, 50_000, { key: 'hotel', name: 'Hotel Booker', skills, inbox: () => ({ booked: 'nothing' }) })
    expect(fake.card.card.issuedAt).toBeGreaterThan(Date.now() + 40_000)
    // and one issued 2 minutes in the future, beyond the skew
    const future = await hostAt(rogue, 2 * MINUTE, { key: 'hotel-2', name: 'Hotel Booker', skills, inbox: () => ({ booked: 'nothing' }) })
    await rogue.announced()

    const found = await until(async () => {
      const r = await asker.discoverAll({ capability: 'travel.hotel.booking' }, { cache: false, timeout: 10_000 })
      return r.length >= 2 ? r : undefined
    }, { ...POLL, what: 'both hotel agents' })
    // the rogue's node re-signs its cards at its real time when its addresses
    // change (identify can report one late on a loaded machine): then the card
    // from the future became an ordinary one, and only the skew rule is checked
    const stillFuture = future.card.card.issuedAt > Date.now() + 60_000
    // the real agent ranks first; no card issued beyond the skew is returned
    // (when the rogue's node re-signed both of its cards at its real time,
    // they tie and either may rank second)
    expect(found[0].card.id).toBe(real.did)
    expect(found.slice(1).map(r => r.card.id).sort()).toEqual((stillFuture ? [fake.did] : [fake.did, future.did]).sort())
    for (const r of found) expect(r.card.issuedAt).toBeLessThanOrEqual(Date.now() + 60_000)
    expect(found.map(r => r.card.id)).toHaveLength(stillFuture ? 2 : 3)
    expect(found[0].history?.successes).toBe(3)
    expect(found[1].history).toBeUndefined()
    expect(found[0].score).toBeGreaterThan(found[1].score)

    // straight from the rogue's peer: only the card within the skew verifies
    const served = await asker.fetchCards(net.nodes[2].peerId, { prefix: 'travel.hotel' })
    expect(served.map(s => s.card.id).sort()).toEqual((stillFuture ? [fake.did] : [fake.did, future.did]).sort())
    if (!stillFuture) return

    // presented on delivery, the card from the future is refused with a typed error
    const err = await rogue.send(real.did, 'hi', { from: future.did, skill: 'travel.hotel.booking' }).then(() => undefined, (e: any) => e)
    expect(err?.name).toBe('ExpiredCardError')
    expect(err?.code).toBe('CARD_EXPIRED')
    expect(err?.message).toMatch(/issued in the future/)
  }, 120_000)

  it('takes at most maxCardsPerProvider cards from one peer, whatever the peer sends', async () => {
    const { net, ics } = await network(2, i => (i === 0 ? { maxCardsPerProvider: 3 } : {}))
    const asker = ics[0]
    // node 1 plays a peer that ignores the requested limit and answers with 200 valid cards
    const floodPeer = net.nodes[1]
    await ics[1].stop()
    const cards: SignedCard[] = []
    const now = Date.now()
    for (let i = 0; i < 200; i++) {
      const id = await createIdentity()
      cards.push(await signCard({ v: 1, id: id.did, name: `spam ${i}`, domain: 'spam.example', skills: [{ id: 'travel.hotel.booking' }], peer: floodPeer.peerId.toString(), issuedAt: now, expiresAt: now + 3_600_000 }, id))
    }
    let asked: unknown
    await floodPeer.services.messaging.handle(CARD_PROTOCOL, 'list', async (payload) => {
      asked = payload
      return { cards }
    })
    await floodPeer.contentRouting.provide(await capabilityCid('travel.hotel.booking'))

    expect(await asker.fetchCards(floodPeer.peerId, { limit: 5 })).toHaveLength(5)
    const found = await until(async () => {
      const r = await asker.discoverAll({ capability: 'travel.hotel.booking' }, { cache: false, timeout: 10_000 })
      return r.length > 0 ? r : undefined
    }, { ...POLL, what: 'the flooding peer' })
    expect(found).toHaveLength(3)
    expect(asked).toMatchObject({ prefix: 'travel.hotel.booking', limit: 3 })
    // the cache holds what the lookup kept, not what the peer sent
    expect(asker.cacheStats().lookups).toBe(1)
    expect((await asker.discoverAll({ capability: 'travel.hotel.booking' })).length).toBe(3)
  }, 120_000)

  it('keeps the lookup and route caches at their bounds under a flood of distinct lookups', async () => {
    const BOUND = 4
    const { ics } = await network(2, i => (i === 0 ? { maxCachedLookups: BOUND, maxCachedRoutes: BOUND } : {}))
    const [asker, host] = ics
    const agents: HostedAgent[] = []
    for (let i = 0; i < 12; i++) {
      agents.push(await host.host({ key: `a${i}`, name: `Agent ${i}`, skills: [{ id: `flood.cap${i}` }], inbox: () => 'ok' }))
    }
    await host.announced()

    let maxLookups = 0
    let maxRoutes = 0
    for (let i = 0; i < agents.length; i++) {
      await until(async () => (await asker.discoverAll({ capability: `flood.cap${i}` }, { timeout: 10_000 })).length === 1, { ...POLL, what: `lookup ${i}` })
      expect(await until(async () => asker.send(agents[i].did, 'x').catch(() => undefined), { ...POLL, what: `route ${i}` })).toBe('ok')
      const s = asker.cacheStats()
      maxLookups = Math.max(maxLookups, s.lookups)
      maxRoutes = Math.max(maxRoutes, s.routes)
    }
    const stats = asker.cacheStats()
    expect(maxLookups).toBe(BOUND)
    expect(maxRoutes).toBe(BOUND)
    expect(stats.lookups).toBe(BOUND)
    expect(stats.routes).toBe(BOUND)
    expect(stats.evictions).toBeGreaterThanOrEqual(2 * (agents.length - BOUND))
    expect(stats.history).toBe(agents.length)
    // the most recent lookups are the ones kept: a cached lookup answers from the cache
    const last = await asker.discoverAll({ capability: `flood.cap${agents.length - 1}` })
    expect(last.map(r => r.source)).toEqual(['cache'])
  }, 180_000)

  it('keeps the lookup cache within maxCacheBytes', async () => {
    const { ics } = await network(2, i => (i === 0 ? { maxCacheBytes: 4_096 } : {}))
    const [asker, host] = ics
    const big = 'x'.repeat(1_500)
    for (let i = 0; i < 6; i++) {
      await host.host({ key: `b${i}`, name: `Big ${i}`, description: big, skills: [{ id: `bytes.cap${i}` }] })
    }
    await host.announced()
    for (let i = 0; i < 6; i++) {
      await until(async () => (await asker.discoverAll({ capability: `bytes.cap${i}` }, { timeout: 10_000 })).length === 1, { ...POLL, what: `lookup ${i}` })
      const s = asker.cacheStats()
      expect(s.lookupBytes).toBeLessThanOrEqual(4_096)
      expect(s.lookups).toBeGreaterThan(0)
    }
    // about 1.8 kB a card: two fit
    expect(asker.cacheStats().lookups).toBe(2)
  }, 180_000)

  it('a gateway exports at most maxExportedAgents agents', async () => {
    // inner: 0 hosts the agents, 1 is the gateway's inner node; outer: the gateway's outer node
    const innerNet = await startNetwork({ size: 2, transport: 'tcp', topology: 'full' })
    extra.push(innerNet)
    const outerNet = await startNetwork({ size: 1, transport: 'tcp', topology: 'full' })
    extra.push(outerNet)
    await innerNet.waitForRoutingTables(1, { timeout: 20_000 })
    const outerId = outerNet.nodes[0].peerId.toString()
    const host = await createInterconnect(innerNet.nodes[0], { domain: 'hotels.example', gateways: [outerId], private: true, trustedGateways: [innerNet.nodes[1].peerId.toString()] })
    const innerIc = await createInterconnect(innerNet.nodes[1], { domain: 'hotels.example' })
    const outerIc = await createInterconnect(outerNet.nodes[0], { domain: 'hotels.example' })
    extra.push(host, innerIc, outerIc)
    for (let i = 0; i < 5; i++) {
      await host.host({ key: `h${i}`, name: `Hotel ${i}`, skills: [{ id: 'travel.hotel.booking' }], inbox: () => 'ok' })
    }
    await host.announced()
    await until(async () => (await innerIc.discoverAll({ capability: 'travel.hotel.booking' }, { cache: false, timeout: 5_000 })).length === 5, { ...POLL, what: 'the five inner agents' })
    const gateway = await createGateway({ inner: innerIc, outer: outerIc, domain: 'hotels.example', exports: [{ skill: 'travel.hotel' }], maxExportedAgents: 2, refreshInterval: 60_000 })
    extra.push(gateway)
    expect(gateway.exported()).toHaveLength(2)
    await gateway.refresh()
    expect(gateway.exported()).toHaveLength(2)
    expect(gateway.stats().exportedAgents).toBe(2)
  }, 120_000)
})
