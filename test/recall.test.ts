/**
 * Discovery finds every provider (issue 14), over TCP on 127.0.0.1: on a
 * 30-node network where each of 10 capabilities is held by 6 agents on 3
 * nodes, and every node announces at once (as nodes that start together
 * do), a lookup from every node finds every holder, for many capabilities;
 * a node that joins after the announcements finds them too.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { capabilityCid, createInterconnect } from '../packages/interconnect/src/index.js'
import { createTransportNode } from '@ioa/transport'
import { startNetwork } from './harness/index.js'
import { recordPlacement, traceLookup } from './harness/placement.js'
import { LOOPBACK } from './util.js'
import type { Interconnect } from '../packages/interconnect/src/index.js'
import type { Network } from './harness/index.js'
import type { TransportNode } from '@ioa/transport'

const SIZE = 30
const CAPABILITIES = 10
const AGENTS_PER_NODE = 2
const LOOKUPS_AT_ONCE = 4

const capability = (c: number): string => `recall.c${c}.op`

/** Run `fn` over `items`, `limit` at a time */
async function eachLimit<T> (items: T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  const queue = [...items]
  await Promise.all(Array.from({ length: limit }, async () => {
    for (let item = queue.shift(); item !== undefined; item = queue.shift()) await fn(item)
  }))
}

describe('discovery recall over TCP (30 nodes)', () => {
  let net: Network
  let ics: Interconnect[] = []
  let late: TransportNode | undefined
  let lateIc: Interconnect | undefined
  /** capability -> DIDs of the agents that hold it */
  const holders = new Map<string, Set<string>>()

  beforeAll(async () => {
    net = await startNetwork({ size: SIZE, transport: 'tcp', topology: 'random', degree: 3 })
    await net.waitForRoutingTables(2, { timeout: 60_000 })
    ics = await Promise.all(net.nodes.map(async n => createInterconnect(n, { domain: 'recall.example', announceAgentIds: false, announceConcurrency: 2 })))
    // node i holds capability i % 10: each capability is on 3 nodes, 2 agents each
    await Promise.all(ics.map(async (ic, i) => {
      for (let a = 0; a < AGENTS_PER_NODE; a++) {
        const cap = capability(i % CAPABILITIES)
        const agent = await ic.host({ key: `agent-${a}`, name: `Agent ${i}/${a}`, skills: [{ id: cap }] })
        if (!holders.has(cap)) holders.set(cap, new Set())
        holders.get(cap)?.add(agent.did)
      }
    }))
    await Promise.all(ics.map(async ic => ic.announced({ signal: AbortSignal.timeout(120_000) })))
  }, 180_000)

  afterAll(async () => {
    await Promise.all([...ics, ...(lateIc != null ? [lateIc] : [])].map(async ic => ic.stop().catch(() => {})))
    await late?.stop()
    await net?.stop()
  })

  it('finds every holder of a capability from every node, for many capabilities', async () => {
    const misses: string[] = []
    let found = 0
    let expected = 0
    const lookups = net.nodes.flatMap((_, i) => [i, i + SIZE])
    await eachLimit(lookups, LOOKUPS_AT_ONCE, async (l) => {
      const asker = l % SIZE
      const cap = capability((l * 7 + 3 + Math.floor(l / SIZE)) % CAPABILITIES)
      const want = holders.get(cap) ?? new Set()
      const results = await ics[asker].discoverAll({ capability: cap }, { cache: false, timeout: 20_000 })
      const got = results.filter(r => want.has(r.card.id)).length
      found += got
      expected += want.size
      if (got < want.size) {
        // where the records of the missed providers are, and what a bare walk from the asker does now
        const cid = await capabilityCid(cap)
        const missed = [...new Set(net.nodes.map((n, i) => ({ n, i })).filter(({ i }) => i % CAPABILITIES === (l * 7 + 3 + Math.floor(l / SIZE)) % CAPABILITIES).filter(({ n }) => !results.some(r => r.peer === n.peerId.toString())).map(({ n }) => n.peerId.toString()))]
        const placement = await recordPlacement(net.nodes, cid)
        const trace = await traceLookup(net.nodes[asker], cid, net.nodes)
        misses.push(`node ${asker}, ${cap}: ${got}/${want.size} (missed providers' records on ${missed.map(m => `${placement.perProvider.get(m)?.holders ?? 0} peers, ${placement.perProvider.get(m)?.amongClosest ?? 0} of the 20 closest`).join(' / ')}; ` +
          `a bare walk now finds ${missed.filter(m => trace.providers.includes(m)).length}/${missed.length}, errors ${JSON.stringify(trace.errors)})`)
      }
    })
    console.log(`[recall] ${lookups.length} lookups from ${SIZE} nodes: ${found}/${expected} agents found (${(100 * found / expected).toFixed(1)} %)${misses.length > 0 ? `; short: ${misses.join('; ')}` : ''}`)
    expect(misses).toEqual([])
  }, 120_000)

  it('a node that joins after the announcements finds them', async () => {
    late = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'], allow: LOOPBACK })
    await late.dial(net.nodes[0].getMultiaddrs())
    lateIc = await createInterconnect(late, { domain: 'recall.example', announceAgentIds: false })
    const short: string[] = []
    for (let c = 0; c < CAPABILITIES; c++) {
      const want = holders.get(capability(c)) ?? new Set()
      const results = await lateIc.discoverAll({ capability: capability(c) }, { cache: false, timeout: 20_000 })
      const got = results.filter(r => want.has(r.card.id)).length
      if (got < want.size) short.push(`${capability(c)}: ${got}/${want.size}`)
    }
    expect(short).toEqual([])
  }, 120_000)
})
