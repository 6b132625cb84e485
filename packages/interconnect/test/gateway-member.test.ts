/**
 * A gateway exports a domain member's agents as soon as the member connects
 * and announces them, not at the next periodic refresh; it emits `exported`;
 * its export rules take the token syntax (`shop.*`) and name the rule in
 * errors (issue 11 item 12). TCP on 127.0.0.1, separate nodes.
 */
import { createTransportNode } from '@ioa/transport'
import { afterEach, describe, expect, it } from 'vitest'
import { until } from '../../../test/util.js'
import { createGateway, createInterconnect } from '../src/index.js'
import type { GatewayExportedEvent, Interconnect } from '../src/index.js'
import type { TransportNode } from '@ioa/transport'

const DOMAIN = 'shop.example'
const INNER_DHT = '/ioa/kad-shop/1.0.0'
const TCP = { transports: ['tcp' as const], allow: ['/ip4/127.0.0.1'] }

const running: Array<{ stop(): unknown }> = []
afterEach(async () => {
  for (const x of running.splice(0).reverse()) await Promise.resolve(x.stop()).catch(() => {})
})

async function node (init: Parameters<typeof createTransportNode>[0] = {}): Promise<TransportNode> {
  const n = await createTransportNode({ ...TCP, ...init })
  running.push(n)
  return n
}

async function ic (n: TransportNode, init: Parameters<typeof createInterconnect>[1] = {}): Promise<Interconnect> {
  const i = await createInterconnect(n, { requestTimeout: 5_000, ...init })
  running.push(i)
  return i
}

describe('gateway members (TCP)', () => {
  it('exports the agents a member hosts right after it connects, long before the periodic refresh, and says so with an exported event', async () => {
    const innerGw = await node({ dhtProtocol: INNER_DHT })
    const outerGw = await node()
    const outside = await node({ bootstrap: [outerGw.getMultiaddrs()[0].toString()] })
    const [innerIc, outerIc, outsideIc] = [await ic(innerGw, { domain: DOMAIN }), await ic(outerGw, { domain: DOMAIN }), await ic(outside)]

    const events: GatewayExportedEvent[] = []
    const gateway = await createGateway({
      inner: innerIc,
      outer: outerIc,
      domain: DOMAIN,
      // the token syntax; the periodic refresh is far beyond this test
      exports: [{ skill: 'shop.*' }],
      refreshInterval: 600_000,
      innerLookupTimeout: 3_000
    })
    running.push(gateway)
    gateway.onExported(e => { events.push(e) })
    expect(gateway.exported()).toEqual([])

    const member = await node({ dhtProtocol: INNER_DHT, bootstrap: [innerGw.getMultiaddrs()[0].toString()] })
    const memberIc = await ic(member, { domain: DOMAIN, gateways: [outerGw.peerId.toString()], private: true, trustedGateways: [innerGw.peerId.toString()] })
    await until(() => member.getConnections(innerGw.peerId).length > 0, { timeout: 20_000, what: 'member connected' })
    // hosted (and announced) after the member connected
    const shop = await memberIc.host({ key: 'shop', name: 'Shop', skills: [{ id: 'shop.order' }, { id: 'hr.payroll' }], inbox: (m) => ({ ordered: m.body }) })

    const event = await until(() => events.find(e => e.added.includes(shop.did)), { timeout: 30_000, interval: 100, what: 'exported event' })
    expect(event.type).toBe('exported')
    expect(event.agents).toContain(shop.did)
    expect(gateway.exported().map(c => c.card.id)).toEqual([shop.did])
    expect(gateway.exported()[0].card.skills.map(s => s.id)).toEqual(['shop.order'])

    // and the outside finds and reaches it through the gateway
    const found = await until(async () => {
      const r = await outsideIc.discoverAll({ capability: 'shop.order' }, { cache: false, timeout: 5_000 })
      return r.length === 1 ? r : undefined
    }, { timeout: 30_000, interval: 250, what: 'outside discovery' })
    expect(found[0].card.id).toBe(shop.did)
    expect(await outsideIc.send(shop.did, 'socks', { skill: 'shop.order' })).toEqual({ ordered: 'socks' })
  })

  it('takes both rule syntaxes alike and names the rule of a bad one', async () => {
    const innerIc = await ic(await node({ dhtProtocol: INNER_DHT }), { domain: DOMAIN })
    const outerIc = await ic(await node(), { domain: DOMAIN })
    const bad = createGateway({ inner: innerIc, outer: outerIc, domain: DOMAIN, exports: [{ skill: 'shop' }, { skill: 'shop.**' }] })
    await expect(bad).rejects.toMatchObject({ name: 'BadRequestError', code: 'BAD_REQUEST', message: expect.stringContaining('exports[1].skill') })
    const named = createGateway({ inner: innerIc, outer: outerIc, domain: DOMAIN, field: 'gateway.exports', exports: [{ skill: 'Shop.*' }] })
    await expect(named).rejects.toMatchObject({ code: 'BAD_REQUEST', message: expect.stringContaining('gateway.exports[0].skill') })
    const domains = createGateway({ inner: innerIc, outer: outerIc, domain: DOMAIN, exports: [{ skill: 'shop.*', domains: ['Not A Domain'] }] })
    await expect(domains).rejects.toMatchObject({ code: 'BAD_REQUEST', message: expect.stringContaining('exports[0].domains') })
  })
})
