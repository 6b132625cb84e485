/**
 * The cold path of a newcomer over TCP on 127.0.0.1: what one discovery
 * teaches the node is not looked up again (issue 11 item 15).
 */
import { afterEach, describe, expect, it } from 'vitest'
import { startNetwork } from '../../../test/harness/index.js'
import { until } from '../../../test/util.js'
import { agentCid, createInterconnect } from '../src/index.js'
import type { Network } from '../../../test/harness/index.js'
import type { Interconnect } from '../src/index.js'
import type { TransportNode } from '@ioa/transport'

let net: Network | undefined
const extra: Array<{ stop(): Promise<void> }> = []

afterEach(async () => {
  for (const x of extra.splice(0).reverse()) await x.stop().catch(() => {})
  await net?.stop()
  net = undefined
})

/** Count the DHT provider walks a node starts, by key */
function countWalks (node: TransportNode): Map<string, number> {
  const walks = new Map<string, number>()
  const find = node.contentRouting.findProviders.bind(node.contentRouting)
  node.contentRouting.findProviders = (cid, options) => {
    walks.set(cid.toString(), (walks.get(cid.toString()) ?? 0) + 1)
    return find(cid, options)
  }
  return walks
}

describe('cold path over TCP', () => {
  it('fills the route cache from a discovery: resolving and messaging a discovered agent walk the DHT no more', async () => {
    net = await startNetwork({ size: 4, transport: 'tcp', topology: 'ring' })
    await net.waitForRoutingTables(2, { timeout: 20_000 })
    const ics: Interconnect[] = await Promise.all(net.nodes.map(async n => createInterconnect(n, { requestTimeout: 5_000 })))
    for (const ic of ics) extra.push(ic)
    const hotel = await ics[2].host({ key: 'hotel', name: 'Hotel', skills: [{ id: 'travel.hotel.booking' }], inbox: (m) => ({ got: m.body }) })
    await ics[2].announced({ signal: AbortSignal.timeout(20_000) })

    const walks = countWalks(net.nodes[0])
    const found = await until(async () => {
      const r = await ics[0].discoverAll({ capability: 'travel.hotel' }, { cache: false, timeout: 5_000 })
      return r.length === 1 ? r : undefined
    }, { timeout: 20_000, interval: 200, what: 'discovery of the hotel' })
    expect(found[0].card.id).toBe(hotel.did)
    const afterDiscovery = [...walks.values()].reduce((a, b) => a + b, 0)
    expect(afterDiscovery).toBeGreaterThan(0)

    const route = await ics[0].resolve(hotel.did)
    expect(route.peers).toEqual([net.nodes[2].peerId.toString()])
    expect(route.signed.card.id).toBe(hotel.did)
    expect(await ics[0].send(hotel.did, 'hello')).toEqual({ got: 'hello' })

    // neither the resolve nor the message walked the agent's record
    expect(walks.get((await agentCid(hotel.did)).toString())).toBeUndefined()
    expect([...walks.values()].reduce((a, b) => a + b, 0)).toBe(afterDiscovery)
  })
})
