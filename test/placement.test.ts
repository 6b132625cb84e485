/**
 * The placement helper (test/harness/placement.ts) itself, on a small TCP
 * network where the answer is known: 6 nodes, each connected to every other,
 * so one provide walk reaches every peer and the k closest are exactly the
 * k closest by XOR distance computed here with BigInt arithmetic.
 */
import { CID } from 'multiformats/cid'
import { sha256 } from 'multiformats/hashes/sha2'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startNetwork } from './harness/index.js'
import { delay } from './util.js'
import { byDistance, compareDistance, kadId, recordPlacement, traceLookup, traceProvide } from './harness/placement.js'
import type { Network } from './harness/index.js'

const SIZE = 6
const K = 3

const big = (bytes: Uint8Array): bigint => BigInt(`0x${Buffer.from(bytes).toString('hex')}`)

async function cidOf (label: string): Promise<CID> {
  return CID.createV1(0x55, await sha256.digest(new TextEncoder().encode(label)))
}

describe('placement helper (6 TCP nodes, full mesh)', () => {
  let net: Network

  beforeAll(async () => {
    net = await startNetwork({ size: SIZE, transport: 'tcp', topology: 'full' })
    await net.waitForRoutingTables(SIZE - 1, { timeout: 60_000 })
  }, 90_000)

  afterAll(async () => {
    await net?.stop()
  })

  it('orders by XOR distance', async () => {
    const target = new Uint8Array([0b1010_0000, 0])
    expect(compareDistance(new Uint8Array([0b1010_0001, 0]), new Uint8Array([0b1000_0000, 0]), target)).toBeLessThan(0)
    expect(compareDistance(new Uint8Array([0b0010_0000, 0]), new Uint8Array([0b1010_0000, 1]), target)).toBeGreaterThan(0)
    expect(compareDistance(target, target, target)).toBe(0)

    const cid = await cidOf(`placement order ${Math.random()}`)
    const t = big(await kadId(cid.multihash.bytes))
    const ids = await Promise.all(net.nodes.map(async n => big(await kadId(n.peerId.toMultihash().bytes))))
    const want = ids.map((_, i) => i).sort((a, b) => ((ids[a] ^ t) < (ids[b] ^ t) ? -1 : 1))
    expect(await byDistance(net.nodes, cid)).toEqual(want)
  })

  it('finds where a provide put its records, which of them are among the k closest, and traces a lookup', async () => {
    const cid = await cidOf(`placement record ${Math.random()}`)
    const provider = net.nodes[0].peerId.toString()
    const walk = await traceProvide(net.nodes[0], cid, net.nodes, { signal: AbortSignal.timeout(30_000) })
    expect(walk.error).toBeUndefined()
    expect(walk.accepted.length).toBe(SIZE - 1)
    expect(walk.accepted.every(r => r >= 0 && r < SIZE)).toBe(true)

    const order = await byDistance(net.nodes, cid)
    // ADD_PROVIDER is one-way: the last receivers may still be storing it
    let p = await recordPlacement(net.nodes, cid, { k: K })
    for (let t = 0; p.holders.length < SIZE - 1 && t < 100; t++) {
      await delay(100)
      p = await recordPlacement(net.nodes, cid, { k: K })
    }
    expect(p.closest).toEqual(order.slice(0, K))
    // every other node stores the record (the provider's own entry is not a placement)
    expect(p.holders.map(h => h.index).sort()).toEqual([1, 2, 3, 4, 5])
    expect(p.holders.every(h => h.providers.length === 1 && h.providers[0] === provider)).toBe(true)
    expect(p.holders.map(h => h.rank)).toEqual([...p.holders.map(h => h.rank)].sort((a, b) => a - b))
    const closestOthers = order.slice(0, K).filter(i => i !== 0).length
    expect(p.holdersAmongClosest).toBe(closestOthers)
    expect(p.perProvider.get(provider)).toEqual({ holders: SIZE - 1, amongClosest: closestOthers })

    // a CID nobody provided has no holders
    const none = await recordPlacement(net.nodes, await cidOf(`placement none ${Math.random()}`), { k: K })
    expect(none.holders).toEqual([])
    expect(none.perProvider.size).toBe(0)

    const trace = await traceLookup(net.nodes[SIZE - 1], cid, net.nodes, { signal: AbortSignal.timeout(30_000), k: K })
    expect(trace.error).toBeUndefined()
    expect(trace.providers).toContain(provider)
    expect(trace.queried.length).toBeGreaterThan(0)
    expect(trace.queried.every(q => q.rank >= 0 && q.rank < SIZE && q.sentAt >= 0)).toBe(true)
    // the asker stores a copy itself, and every peer it asked answered with the provider
    expect(trace.queried.filter(q => q.outcome === 'response').every(q => q.providers.includes(provider))).toBe(true)
    expect(['paths-ended', 'enough-providers']).toContain(trace.stopped)
  }, 90_000)
})
