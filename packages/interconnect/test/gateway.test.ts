/**
 * The agent gateway over TCP on 127.0.0.1, between separate nodes: a domain
 * (`hotels.example`) of two inner nodes on their own DHT behind a connection
 * gater, two gateways (each an inner and an outer node), and a public network
 * of four nodes. Outside peers find and reach exported skills only, through
 * either gateway, under the export policy and rate limit, and never reach an
 * inner node directly.
 */
import { membersOnlyGater } from '@ioa/transport'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startNetwork } from '../../../test/harness/index.js'
import { rejectionOf, until } from '../../../test/util.js'
import { CARD_PROTOCOL, createGateway, createInterconnect } from '../src/index.js'
import type { Network } from '../../../test/harness/index.js'
import type { Gateway, HostedAgent, InboundMessage, Interconnect } from '../src/index.js'
import type { PrivateKey } from '@libp2p/interface'

const DOMAIN = 'hotels.example'
const INNER_DHT = '/ioa/kad-domain/1.0.0'

/** How `until` polls the networks in these tests, unless a call says otherwise */
const POLL = { timeout: 20_000, interval: 200 }

/** Refuses every peer that is not a member of the domain, in both directions */
describe('agent gateway (TCP)', () => {
  // inner: 0, 1 host agents; 2, 3 are the gateways' inner nodes
  let inner: Network
  // outer: 0-3 are outside peers; 4, 5 are the gateways' outer nodes
  let outer: Network
  const ics: Interconnect[] = []
  const gateways: Gateway[] = []
  let innerIcs: Interconnect[]
  let outerIcs: Interconnect[]
  let hotel: HostedAgent
  let hr: HostedAgent
  let partner: HostedAgent
  let traveller: HostedAgent
  let otherCaller: HostedAgent
  let partnerCaller: HostedAgent
  const hotelInbox: InboundMessage[] = []
  const gatewayOuterIds: string[] = []
  const gatewayInnerIds: string[] = []

  beforeAll(async () => {
    // the domain's peer ids are known in advance: the gater allows only them
    const keys: PrivateKey[] = await Promise.all([0, 1, 2, 3].map(async () => generateKeyPair('Ed25519')))
    const members = new Set(keys.map(k => peerIdFromPrivateKey(k).toString()))
    inner = await startNetwork({
      size: 4,
      topology: 'full',
      nodeInit: i => ({ privateKey: keys[i], dhtProtocol: INNER_DHT, connectionGater: membersOnlyGater(members) })
    })
    outer = await startNetwork({ size: 6, topology: 'full' })
    await Promise.all([
      inner.waitForRoutingTables(3, { timeout: 20_000 }),
      outer.waitForRoutingTables(5, { timeout: 20_000 })
    ])
    gatewayInnerIds.push(inner.nodes[2].peerId.toString(), inner.nodes[3].peerId.toString())
    gatewayOuterIds.push(outer.nodes[4].peerId.toString(), outer.nodes[5].peerId.toString())

    innerIcs = await Promise.all(inner.nodes.map(async (n, i) => createInterconnect(n, i < 2
      ? { domain: DOMAIN, gateways: gatewayOuterIds, private: true, trustedGateways: gatewayInnerIds }
      : { domain: DOMAIN })))
    outerIcs = await Promise.all(outer.nodes.map(async (n, i) => createInterconnect(n, { domain: i < 4 ? 'travel-app.example' : DOMAIN })))
    ics.push(...innerIcs, ...outerIcs)

    hotel = await innerIcs[0].host({
      key: 'hotel',
      name: 'Hotel desk',
      skills: [{ id: 'travel.hotel.booking' }, { id: 'travel.hotel.internal-pricing' }],
      inbox: (m) => {
        hotelInbox.push(m)
        return { booked: true, skill: m.skill, request: m.body }
      }
    })
    hr = await innerIcs[1].host({ key: 'hr', name: 'Payroll', skills: [{ id: 'hr.payroll' }], inbox: () => ({ salary: 1 }) })
    partner = await innerIcs[1].host({ key: 'partner', name: 'Partner rates', skills: [{ id: 'travel.partner.rates' }], inbox: () => ({ rate: 42 }) })

    traveller = await outerIcs[0].host({ key: 'traveller', name: 'Traveller', skills: [{ id: 'assistant.travel' }] })
    otherCaller = await outerIcs[3].host({ key: 'other', name: 'Other', domain: 'other.example', skills: [{ id: 'assistant.other' }] })
    partnerCaller = await outerIcs[3].host({ key: 'partner-caller', name: 'Partner', domain: 'partner.example', skills: [{ id: 'assistant.partner' }] })

    // the inner hosts' announcements reach the domain DHT in the background
    await until(async () => (await innerIcs[2].discoverAll({ capability: 'travel' }, { cache: false, timeout: 3_000 })).length === 2 || undefined, { ...POLL, what: 'inner agents announced' })

    for (const i of [0, 1]) {
      gateways.push(await createGateway({
        inner: innerIcs[2 + i],
        outer: outerIcs[4 + i],
        domain: DOMAIN,
        exports: [
          { skill: 'travel.hotel.booking' },
          { skill: 'travel.partner', domains: ['partner.example'] }
        ],
        rateLimit: { requests: 3, per: 60_000 },
        innerLookupTimeout: 3_000
      }))
    }
    for (const g of gateways) {
      await until(async () => {
        if (g.exported().length < 2) await g.refresh()
        return g.exported().length === 2 || undefined
      }, { ...POLL, what: 'gateway exports' })
    }
  })

  afterAll(async () => {
    for (const g of gateways) await g.stop().catch(() => {})
    for (const ic of ics) await ic.stop().catch(() => {})
    await Promise.allSettled([inner?.stop(), outer?.stop()])
  })

  it('validates its options', async () => {
    await expect(createGateway({ inner: innerIcs[2], outer: innerIcs[2], domain: DOMAIN, exports: [] })).rejects.toMatchObject({ code: 'BAD_REQUEST' })
    await expect(createGateway({ inner: innerIcs[2], outer: outerIcs[4], domain: 'Not A Domain', exports: [] })).rejects.toMatchObject({ code: 'BAD_REQUEST' })
    await expect(createGateway({ inner: innerIcs[2], outer: outerIcs[4], domain: DOMAIN, exports: [{ skill: 'Bad..Skill' }] })).rejects.toMatchObject({ code: 'BAD_REQUEST' })
    await expect(createGateway({ inner: innerIcs[2], outer: outerIcs[4], domain: DOMAIN, exports: [], rateLimit: { requests: 0, per: 1000 } })).rejects.toMatchObject({ code: 'BAD_REQUEST' })
  })

  it('exports cards that list only the exported skills, the gateways and no addresses', () => {
    for (const g of gateways) {
      const cards = g.exported()
      expect(cards.map(c => c.card.id).sort()).toEqual([hotel.did, partner.did].sort())
      const h = cards.find(c => c.card.id === hotel.did)
      expect(h?.card.skills.map(s => s.id)).toEqual(['travel.hotel.booking'])
      expect(h?.card.addrs).toEqual([])
      expect(h?.card.gateways).toEqual(gatewayOuterIds)
      expect(h?.card.peer).toBe(inner.nodes[0].peerId.toString())
      expect(cards.some(c => c.card.id === hr.did)).toBe(false)
    }
  })

  it('(1) an outside node discovers the hotel agent through a gateway, with only the exported skill', async () => {
    const results = await until(async () => {
      const r = await outerIcs[1].discoverAll({ capability: 'travel.hotel' }, { cache: false, timeout: 3_000 })
      return r.length > 0 ? r : undefined
    }, { ...POLL, what: 'outside discovery of travel.hotel' })
    expect(results).toHaveLength(1)
    const [found] = results
    expect(found.card.id).toBe(hotel.did)
    expect(gatewayOuterIds).toContain(found.peer)
    expect(found.card.skills.map(s => s.id)).toEqual(['travel.hotel.booking'])
    expect(found.card.addrs).toEqual([])
    expect(found.source).toBe('dht')
  })

  it('(2) an outside agent sends to the inner agent through a gateway and gets its answer', async () => {
    const before = hotelInbox.length
    const answer = await outerIcs[0].send(hotel.did, { nights: 1 }, { skill: 'travel.hotel.booking', from: traveller.did })
    expect(answer).toEqual({ booked: true, skill: 'travel.hotel.booking', request: { nights: 1 } })
    expect(hotelInbox).toHaveLength(before + 1)
    const m = hotelInbox[hotelInbox.length - 1]
    expect(m.skill).toBe('travel.hotel.booking')
    // the inner agent is reached from a gateway's inner node
    expect(gatewayInnerIds).toContain(m.peer)
    expect(gateways.reduce((n, g) => n + g.stats().forwarded, 0)).toBeGreaterThanOrEqual(1)
  })

  it('(3) skills that are not exported are invisible outside', async () => {
    expect(await outerIcs[1].discoverAll({ capability: 'hr' }, { cache: false, timeout: 3_000 })).toEqual([])
    expect(await outerIcs[1].discoverAll({ capability: 'travel.hotel.internal-pricing' }, { cache: false, timeout: 3_000 })).toEqual([])
    const all = await outerIcs[1].discoverAll({ capability: 'travel' }, { cache: false, timeout: 3_000 })
    for (const r of all) {
      expect(r.card.skills.map(s => s.id).filter(id => id.startsWith('hr') || id.endsWith('internal-pricing'))).toEqual([])
    }
    expect(all.some(r => r.card.id === hr.did)).toBe(false)
    // a gateway asked directly serves nothing more
    for (const peer of gatewayOuterIds) {
      const cards = await outerIcs[1].fetchCards(peer, {})
      expect(cards.flatMap(c => c.card.skills.map(s => s.id)).sort()).toEqual(['travel.hotel.booking', 'travel.partner.rates'])
      expect(await outerIcs[1].fetchCards(peer, { agents: [hr.did] })).toEqual([])
    }
  })

  it('(4) a skill that is not exported, or no skill, is refused with NotExportedError', async () => {
    const before = hotelInbox.length
    const err = await rejectionOf(outerIcs[1].send(hotel.did, { q: 1 }, { skill: 'travel.hotel.internal-pricing' }))
    expect(err.name).toBe('NotExportedError')
    expect(err.code).toBe('NOT_EXPORTED')
    const noSkill = await rejectionOf(outerIcs[1].send(hotel.did, { q: 1 }))
    expect(noSkill.name).toBe('NotExportedError')
    // an agent the gateways do not export at all is not there
    const hidden = await rejectionOf(outerIcs[1].send(hr.did, {}, { skill: 'hr.payroll', timeout: 2_000 }))
    expect(['UnknownAgentError', 'AgentNotHereError']).toContain(hidden.name)
    expect(hotelInbox).toHaveLength(before)
  })

  it('(5) an outside node cannot reach an inner node directly', async () => {
    const stranger = outer.nodes[2]
    const target = inner.nodes[0]
    // the inner node's gater refuses the stranger once Noise has authenticated
    // it. The dialer finishes its side of the handshake first (and yamux is
    // selected optimistically), so its dial may resolve for a moment with a
    // connection that is closed as soon as the refusal arrives.
    const dialed = await stranger.dial(target.getMultiaddrs()).catch((err: Error) => err)
    if (!(dialed instanceof Error)) {
      await until(() => dialed.status !== 'open' || undefined, { ...POLL, timeout: 5_000, what: 'refused connection closed' })
    }
    await expect(stranger.services.ping.ping(target.getMultiaddrs(), { signal: AbortSignal.timeout(3_000) })).rejects.toThrow()
    await expect(stranger.services.messaging.request(target.getMultiaddrs(), CARD_PROTOCOL, 'list', {}, { timeout: 3_000 })).rejects.toThrow()
    expect(stranger.getConnections(target.peerId).filter(c => c.status === 'open')).toHaveLength(0)
    expect(target.getConnections(stranger.peerId)).toHaveLength(0)
    // and inner nodes do not dial out of the domain either
    await expect(target.dial(stranger.getMultiaddrs())).rejects.toMatchObject({ name: 'DialDeniedError' })
  })

  it('(6) a caller over its rate is refused with RateLimitedError', async () => {
    // outer node 2 has sent nothing yet; the limit is 3 per minute per caller
    const caller = outerIcs[2]
    for (let i = 0; i < 3; i++) {
      await expect(caller.send(hotel.did, { n: i }, { skill: 'travel.hotel.booking' })).resolves.toMatchObject({ booked: true })
    }
    const err = await rejectionOf(caller.send(hotel.did, { n: 4 }, { skill: 'travel.hotel.booking' }))
    expect(err.name).toBe('RateLimitedError')
    expect(err.code).toBe('RATE_LIMITED')
    expect(gateways.reduce((n, g) => n + g.stats().rateLimited, 0)).toBe(1)
  })

  it('(8) an export rule restricted to some domains refuses callers of other domains', async () => {
    const refused = await rejectionOf(outerIcs[3].send(partner.did, {}, { skill: 'travel.partner.rates', from: otherCaller.did }))
    expect(refused.name).toBe('NotExportedError')
    // a caller without a card has no domain
    expect((await rejectionOf(outerIcs[3].send(partner.did, {}, { skill: 'travel.partner.rates' }))).name).toBe('NotExportedError')
    await expect(outerIcs[3].send(partner.did, {}, { skill: 'travel.partner.rates', from: partnerCaller.did })).resolves.toEqual({ rate: 42 })
  })

  it('withdraws an agent that leaves the domain', async () => {
    await innerIcs[1].unhost(partner.did)
    for (const g of gateways) {
      await g.refresh()
      expect(g.exported().map(c => c.card.id)).toEqual([hotel.did])
    }
    for (const peer of gatewayOuterIds) {
      expect(await outerIcs[3].fetchCards(peer, { agents: [partner.did] })).toEqual([])
    }
  })

  it('(7) when one gateway stops, outside sends go through the other', async () => {
    const caller = outerIcs[1]
    // wait until the caller's route to the agent holds both gateways
    const route = await until(async () => {
      const r = await caller.resolve(hotel.did, { cache: false, timeout: 5_000 })
      return r.peers.length === 2 ? r : undefined
    }, { ...POLL, what: 'both gateways in the route' })
    expect([...route.peers].sort()).toEqual([...gatewayOuterIds].sort())
    // stop the gateway the caller would use first, with its nodes (as if its process died)
    const first = gatewayOuterIds.indexOf(route.peers[0])
    const second = 1 - first
    await gateways[first].stop()
    await Promise.all([inner.nodes[2 + first].stop(), outer.nodes[4 + first].stop()])
    const forwardedBefore = gateways[second].stats().forwarded

    const answer = await caller.send(hotel.did, { nights: 2 }, { skill: 'travel.hotel.booking' })
    expect(answer).toMatchObject({ booked: true, request: { nights: 2 } })
    expect(gateways[second].stats().forwarded).toBe(forwardedBefore + 1)
    expect(hotelInbox[hotelInbox.length - 1].peer).toBe(gatewayInnerIds[second])
  })
})
