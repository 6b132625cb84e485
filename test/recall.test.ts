/**
 * Discovery finds every provider (issue 14), over TCP on 127.0.0.1 between
 * 30 separate libp2p nodes, through the public API (`createInterconnect`,
 * `host`, `announced`, `discoverAll`):
 *
 * 1. each of 10 capabilities is held by 2 agents on each of 3 nodes, every
 *    node announcing at once (as nodes that start together do); every node
 *    looks up 2 capabilities it does not hold (each capability from 6
 *    nodes, 60 lookups, 6 at a time) and finds every holder;
 * 2. a node that joins after the announcements finds them;
 * 3. a provider that leaves (its node stops) is in no lookup started after
 *    it stopped that is not answered from the cache, and in no lookup at all
 *    once the asker's `cacheTtl` has passed since it stopped.
 *
 * Nothing here waits a fixed time for the network: the set-up waits for the
 * routing tables and for every node's `announced()`; lookups have generous
 * timeouts, and nothing asserts how fast they are. A lookup that comes back
 * short says where the missed providers' records are (a bare DHT walk from
 * the same node), for the issue's findings.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { capabilityCid, createInterconnect } from '../packages/interconnect/src/index.js'
import { createTransportNode } from '@ioa/transport'
import { startNetwork } from './harness/index.js'
import { LOOPBACK, until } from './util.js'
import type { DiscoverOptions, Interconnect } from '../packages/interconnect/src/index.js'
import type { Network } from './harness/index.js'
import type { TransportNode } from '@ioa/transport'

const SIZE = 30
const CAPABILITIES = 10
const AGENTS_PER_NODE = 2
/** Node i looks up capabilities (i + k) % CAPABILITIES for each k here */
const LOOKED_UP = [1, 5]
/** Lookups in flight at once across the network */
const LOOKUPS_AT_ONCE = 6
/** The asker's cache of lookup results in the leaving-provider test, ms */
const CACHE_TTL = 3_000
const LOOKUP = { cache: false, timeout: 20_000 }
const DOMAIN = 'recall.example'

const capability = (c: number): string => `recall.c${c}.op`
/** Node i holds capability i % CAPABILITIES: each capability is on 3 nodes */
const holderNodes = (c: number): number[] => Array.from({ length: SIZE }, (_, i) => i).filter(i => i % CAPABILITIES === c)

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
  /** capability -> node index -> DIDs of the agents the node hosts for it */
  const holders = new Map<string, Map<number, string[]>>()
  const want = (cap: string, without: number[] = []): string[] =>
    [...(holders.get(cap) ?? new Map<number, string[]>()).entries()].filter(([i]) => !without.includes(i)).flatMap(([, dids]) => dids).sort()

  /** Why a lookup of `cap` from `node` missed agents of `missed` nodes: what a bare walk from it finds now */
  async function explain (node: TransportNode, cap: string, missed: number[]): Promise<string> {
    const cid = await capabilityCid(cap)
    const providers = new Set<string>()
    try {
      for await (const p of node.contentRouting.findProviders(cid, { signal: AbortSignal.timeout(20_000) })) providers.add(p.id.toString())
    } catch (err: any) {
      return `a bare walk failed: ${err?.message ?? err}`
    }
    const connected = missed.filter(i => node.getConnections(net.nodes[i].peerId).length > 0).length
    const ic = node === late ? lateIc : ics[net.nodes.indexOf(node)]
    const indexed = ic?.gossip?.announcers(cap) ?? []
    return `a bare walk now finds ${missed.filter(i => providers.has(net.nodes[i].peerId.toString())).length} of the ${missed.length} missed provider nodes, ${connected} connected to the asker, ${missed.filter(i => indexed.includes(net.nodes[i].peerId.toString())).length} in its gossip index`
  }

  /** One lookup from `asker`: the agents it misses, explained, or undefined */
  async function shortOf (asker: { ic: Interconnect, node: TransportNode, name: string }, cap: string, without: number[] = [], lookup: DiscoverOptions = LOOKUP): Promise<string | undefined> {
    const expected = want(cap, without)
    const got = new Set((await asker.ic.discoverAll({ capability: cap }, lookup)).map(r => r.card.id))
    const missedDids = expected.filter(d => !got.has(d))
    if (missedDids.length === 0) return undefined
    const missed = [...(holders.get(cap) ?? new Map<number, string[]>()).entries()].filter(([i, dids]) => !without.includes(i) && dids.some(d => !got.has(d))).map(([i]) => i)
    return `${asker.name}, ${cap}: ${expected.length - missedDids.length}/${expected.length} (missed nodes ${missed.map(i => `${i} (${net.nodes[i].peerId.toString()})`).join(', ')} from ${asker.node.peerId.toString()}; ${await explain(asker.node, cap, missed)})`
  }

  beforeAll(async () => {
    net = await startNetwork({ size: SIZE, transport: 'tcp', topology: 'random', degree: 3 })
    await net.waitForRoutingTables(2, { timeout: 90_000 })
    ics = await Promise.all(net.nodes.map(async n => createInterconnect(n, { domain: DOMAIN, announceAgentIds: false, announceConcurrency: 2, cacheTtl: CACHE_TTL })))
    await Promise.all(ics.map(async (ic, i) => {
      const cap = capability(i % CAPABILITIES)
      const dids: string[] = []
      for (let a = 0; a < AGENTS_PER_NODE; a++) {
        dids.push((await ic.host({ key: `agent-${a}`, name: `Agent ${i}/${a}`, skills: [{ id: cap }] })).did)
      }
      if (!holders.has(cap)) holders.set(cap, new Map())
      holders.get(cap)?.set(i, dids)
    }))
    await Promise.all(ics.map(async ic => ic.announced({ signal: AbortSignal.timeout(180_000) })))
    // the gossip channel settles too: every node's index holds the 3 holder
    // nodes of every capability it does not hold (a bounded wait, like the
    // DHT's announced() above; what is not there after it is a miss below)
    await until(() => ics.every((ic, i) => Array.from({ length: CAPABILITIES }, (_, c) => c).every(c => c === i % CAPABILITIES || ic.gossip?.announcers(capability(c)).length === holderNodes(c).length)), { timeout: 60_000, interval: 250, what: 'complete gossip indexes' })
      .catch((err: Error) => { console.log(`[recall] ${err.message}: lookups go on with what the indexes hold`) })
  }, 300_000)

  afterAll(async () => {
    await Promise.all([...ics, ...(lateIc != null ? [lateIc] : [])].map(async ic => ic.stop().catch(() => {})))
    await late?.stop()
    await net?.stop()
  }, 60_000)

  it('finds every holder of a capability from every node, for every capability', async () => {
    const misses: string[] = []
    // node i looks up 2 capabilities it does not hold: every capability is looked up from 6 nodes
    const lookups = net.nodes.flatMap((_, i) => LOOKED_UP.map(k => ({ i, c: (i + k) % CAPABILITIES })))
    const started = Date.now()
    await eachLimit(lookups, LOOKUPS_AT_ONCE, async ({ i, c }) => {
      const short = await shortOf({ ic: ics[i], node: net.nodes[i], name: `node ${i}` }, capability(c))
      if (short != null) misses.push(short)
    })
    console.log(`[recall] ${lookups.length} lookups (${SIZE} nodes x ${LOOKED_UP.length} of ${CAPABILITIES} capabilities, ${want(capability(0)).length} agents each) in ${Date.now() - started} ms: ${lookups.length - misses.length} complete${misses.length > 0 ? `; short: ${misses.join('; ')}` : ''}`)
    expect(misses).toEqual([])
  }, 300_000)

  it('a node that joins after the announcements finds them', async () => {
    late = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'], allow: LOOPBACK })
    await late.dial(net.nodes[0].getMultiaddrs())
    lateIc = await createInterconnect(late, { domain: DOMAIN })
    const joined = { ic: lateIc, node: late, name: 'the late node' }
    const short: string[] = []
    for (let c = 0; c < CAPABILITIES; c++) {
      // a newcomer is still dialling the peers it meets (a handshake can miss
      // its timeout under the suite's load): it may look again until it has
      // every agent, within 40 s; single-lookup recall is the test above
      const s = await shortOf(joined, capability(c), [], { ...LOOKUP, wait: { atLeast: want(capability(c)).length, timeout: 40_000 } })
      if (s != null) short.push(s)
    }
    expect(short).toEqual([])
  }, 300_000)

  it('a provider that leaves is gone from fresh lookups at once, and from cached ones within cacheTtl', async () => {
    const cap = capability(3)
    const [leaving] = holderNodes(3)
    const left = want(cap).filter(d => !want(cap, [leaving]).includes(d))
    // the asker has the provider's agents in its cache (a lookup with the cache allowed)
    const asker = ics[holderNodes(4)[0]]
    expect((await asker.discoverAll({ capability: cap }, { timeout: 20_000 })).map(r => r.card.id)).toEqual(expect.arrayContaining(left))

    await ics[leaving].stop()
    await net.nodes[leaving].stop()
    const stoppedAt = Date.now()
    // its DHT record outlives it, but the card fetch to a stopped node fails: a fresh lookup does not return it
    const others = holderNodes(5).map(i => ({ ic: ics[i], node: net.nodes[i], name: `node ${i}` }))
    for (const other of others) expect(await shortOf(other, cap, [leaving])).toBeUndefined()
    for (const other of others) {
      const ids = (await other.ic.discoverAll({ capability: cap }, LOOKUP)).map(r => r.card.id)
      expect(ids.filter(d => left.includes(d))).toEqual([])
    }
    // the asker's cache may still answer with it until cacheTtl has passed since it stopped; then no lookup does
    await until(() => Date.now() - stoppedAt > CACHE_TTL, { timeout: CACHE_TTL + 10_000, interval: 100, what: 'cacheTtl passed' })
    const after = (await asker.discoverAll({ capability: cap }, { timeout: 20_000 })).map(r => r.card.id)
    expect(after.filter(d => left.includes(d))).toEqual([])
    expect(after.sort()).toEqual(want(cap, [leaving]))
  }, 300_000)
})
