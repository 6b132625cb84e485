/**
 * The DHT's first second (spec/transport.md 1, joining): walks wait for the
 * routing table's first peer, bounded; the first self-lookup fills the table
 * as soon as there is a peer to ask.
 */
import { describe, expect, it } from 'vitest'
import { untilRoutingPeers } from '../src/internal.js'
import { createTransportNode } from '../src/index.js'
import { until } from '../../../test/util.js'

describe('untilRoutingPeers', () => {
  it('resolves true once the table holds a peer', async () => {
    const table = { size: 0 }
    setTimeout(() => { table.size = 1 }, 40)
    const start = Date.now()
    expect(await untilRoutingPeers(table, { timeout: 5_000 })).toBe(true)
    expect(Date.now() - start).toBeLessThan(4_000)
  })

  it('gives up after its timeout with false, and at once when the signal aborts', async () => {
    const start = Date.now()
    expect(await untilRoutingPeers({ size: 0 }, { timeout: 60 })).toBe(false)
    expect(Date.now() - start).toBeGreaterThanOrEqual(50)
    const controller = new AbortController()
    setTimeout(() => { controller.abort() }, 20)
    expect(await untilRoutingPeers({ size: 0 }, { timeout: 60_000, signal: controller.signal })).toBe(false)
  })

  it('does not wait when there is no table or it is not empty', async () => {
    expect(await untilRoutingPeers(undefined)).toBe(true)
    expect(await untilRoutingPeers({ size: 3 }, { timeout: 1 })).toBe(true)
  })
})

describe('the first self-lookup over TCP', () => {
  it('a node that knows one peer of a network learns the others without a query of its own', async () => {
    const tcp = { transports: ['tcp' as const], listen: ['/ip4/127.0.0.1/tcp/0'] }
    const first = await createTransportNode(tcp)
    const nodes = [first]
    try {
      const addr = first.getMultiaddrs()[0].toString()
      for (let i = 0; i < 4; i++) nodes.push(await createTransportNode({ ...tcp, bootstrap: [addr] }))
      // the others know each other through the first
      await until(() => nodes.slice(1).every(n => n.services.dht.routingTable.size >= 2), { timeout: 20_000 })
      const newcomer = await createTransportNode({ ...tcp, bootstrap: [addr] })
      nodes.push(newcomer)
      await until(() => newcomer.services.dht.routingTable.size >= 4, { timeout: 20_000 })
      expect(newcomer.services.dht.routingTable.size).toBeGreaterThanOrEqual(4)
    } finally {
      for (const n of nodes.reverse()) await n.stop()
    }
  })
})
