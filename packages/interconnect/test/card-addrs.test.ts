/**
 * What a card's `addrs` and the DHT's provider answers carry
 * (spec/interconnect.md 2.1 and 3.3), between two nodes over TCP on
 * 127.0.0.1: the host lists its addresses as libp2p reports them, each ending
 * in `/p2p/<card.peer>`, and a requester finds the host through the DHT
 * with the host's loopback address (the reference node keeps private and
 * loopback addresses in its answers).
 */
import { createTransportNode } from '@ioa/transport'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { until } from '../../../test/util.js'
import { agentCid, createInterconnect } from '../src/index.js'
import type { HostedAgent, Interconnect } from '../src/index.js'
import type { TransportNode } from '@ioa/transport'

const closers: Array<() => Promise<unknown>> = []
let host: TransportNode
let requester: TransportNode
let agent: HostedAgent

beforeAll(async () => {
  host = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'] })
  requester = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'] })
  closers.push(async () => host.stop(), async () => requester.stop())
  await requester.dial(host.getMultiaddrs())
  const icH: Interconnect = await createInterconnect(host, { requestTimeout: 3_000 })
  const icR: Interconnect = await createInterconnect(requester, { requestTimeout: 3_000 })
  closers.push(async () => icH.stop(), async () => icR.stop())
  agent = await icH.host({ key: 'hotel', name: 'Hotel', skills: [{ id: 'travel.hotel.book' }] })
  await icH.announced()
}, 60_000)

afterAll(async () => {
  for (const close of closers.reverse()) await close()
})

describe('card addrs and provider addresses (TCP)', () => {
  it('card addrs are the host\'s multiaddrs, each ending in /p2p/<card.peer>', () => {
    const card = agent.card.card
    expect(card.peer).toBe(host.peerId.toString())
    expect(card.addrs.length).toBeGreaterThan(0)
    for (const a of card.addrs) expect(a.endsWith(`/p2p/${card.peer}`), a).toBe(true)
  })

  it('a provider answer of the DHT carries the host\'s loopback address', async () => {
    const cid = await agentCid(agent.did)
    const provider = await until(async () => {
      for await (const p of requester.contentRouting.findProviders(cid, { signal: AbortSignal.timeout(5_000) })) {
        if (p.id.equals(host.peerId)) return p
      }
      return undefined
    }, { timeout: 30_000, interval: 200, what: 'the host as a provider of the agent CID' })
    expect(provider.multiaddrs.map(String).some(a => a.startsWith('/ip4/127.0.0.1/tcp/'))).toBe(true)
  }, 60_000)
})
