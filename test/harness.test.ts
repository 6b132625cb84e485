import { describe, expect, it } from 'vitest'
import { dhtRoutingTableSize, startNetwork, topologyEdges } from './harness/index.js'

describe('topologyEdges', () => {
  it('builds a ring, a star and a full mesh', () => {
    expect(topologyEdges(5, 'ring')).toEqual([[0, 1], [1, 2], [2, 3], [3, 4], [4, 0]])
    expect(topologyEdges(4, 'star')).toEqual([[1, 0], [2, 0], [3, 0]])
    expect(topologyEdges(4, 'full')).toHaveLength(6)
    expect(topologyEdges(1, 'ring')).toEqual([])
  })

  it('builds a connected random graph with the requested average degree, reproducibly', () => {
    const edges = topologyEdges(50, 'random', 3, 42)
    expect(edges).toHaveLength(75)
    expect(topologyEdges(50, 'random', 3, 42)).toEqual(edges)
    // connected: a BFS from node 0 reaches everyone
    const seen = new Set([0])
    const queue = [0]
    while (queue.length > 0) {
      const cur = queue.shift() as number
      for (const [a, b] of edges) {
        const other = a === cur ? b : b === cur ? a : -1
        if (other >= 0 && !seen.has(other)) {
          seen.add(other)
          queue.push(other)
        }
      }
    }
    expect(seen.size).toBe(50)
  })
})

describe('startNetwork', () => {
  it('starts 5 TCP nodes in a ring, fills their routing tables and stops them all', async () => {
    const net = await startNetwork({ size: 5, transport: 'tcp', topology: 'ring' })
    try {
      expect(net.nodes).toHaveLength(5)
      expect(net.nodes.every(n => n.status === 'started')).toBe(true)
      expect(new Set(net.nodes.map(n => n.peerId.toString())).size).toBe(5)
      for (const n of net.nodes) {
        expect(n.getMultiaddrs().some(ma => ma.toString().startsWith('/ip4/127.0.0.1/tcp/'))).toBe(true)
      }
      expect(net.isConnected(0, 1)).toBe(true)
      expect(net.isConnected(4, 0)).toBe(true)
      expect(net.hops(0, 2)).toBe(2)

      await net.waitForRoutingTables(1, { timeout: 20_000 })
      for (let i = 0; i < net.nodes.length; i++) {
        expect(net.dhtPeers(i)).toBeGreaterThanOrEqual(1)
        expect(net.selfQueryDone(i)).toBe(true)
      }
    } finally {
      await net.stop()
    }
    expect(net.nodes.every(n => n.status === 'stopped')).toBe(true)
    expect(net.nodes.map(dhtRoutingTableSize).every(s => s === 0)).toBe(true)
    // idempotent
    await net.stop()
    await net[Symbol.asyncDispose]()
  }, 30_000)

  it('connects memory nodes on demand and disposes of them', async () => {
    const net = await startNetwork({ size: 3, transport: 'memory', topology: 'star' })
    try {
      expect(net.nodes[0].getMultiaddrs()[0].toString()).toMatch(/^\/memory\/ioa-harness-/)
      expect(net.isConnected(1, 2)).toBe(false)
      await net.connect(1, 2)
      expect(net.isConnected(1, 2)).toBe(true)
      expect(net.hops(1, 2)).toBe(1)
      await net.waitForRoutingTables(2, { timeout: 10_000 })
    } finally {
      await net[Symbol.asyncDispose]()
    }
    expect(net.nodes.every(n => n.status === 'stopped')).toBe(true)
  }, 30_000)

  it('reports a routing-table timeout with the nodes that are behind', async () => {
    const net = await startNetwork({ size: 2, transport: 'memory', topology: 'ring' })
    try {
      await expect(net.waitForRoutingTables(5, { timeout: 300 })).rejects.toThrow(/did not reach 5 peers/)
    } finally {
      await net.stop()
    }
  }, 30_000)

  it('rejects with the abort reason when start-up is aborted (and stops what it started)', async () => {
    const controller = new AbortController()
    const net = startNetwork({
      size: 4,
      transport: 'memory',
      concurrency: 1,
      nodeInit: (i) => {
        if (i === 1) controller.abort(new Error('enough'))
        return {}
      },
      signal: controller.signal
    })
    await expect(net).rejects.toThrow('enough')
  }, 30_000)
})
