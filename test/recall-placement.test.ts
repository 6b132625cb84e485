/**
 * Where provider records land and what lookups do (issue 14, "find out where
 * records are lost"), on a 40-node network over the memory transport wired
 * like the discovery benchmark (a ring plus chords). Twenty CIDs are
 * provided by two nodes each, once the routing tables have filled; then the
 * placement of every record is measured against the 20 peers XOR-closest to
 * the CID, and bare kad-dht lookups are traced. The findings are printed
 * (set IOA_RECALL_QUIET=1 to silence them).
 */
import { CID } from 'multiformats/cid'
import { sha256 } from 'multiformats/hashes/sha2'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { dhtRoutingTableSize, startNetwork } from './harness/index.js'
import { recordPlacement, traceLookup, traceProvide } from './harness/placement.js'
import type { Network } from './harness/index.js'
import type { LookupTrace, Placement, ProvideTrace } from './harness/placement.js'

const SIZE = 40
const CIDS = 20
const K = 20

const print = (...args: unknown[]): void => {
  if (process.env.IOA_RECALL_QUIET == null) console.log('[recall]', ...args)
}

async function cidOf (label: string): Promise<CID> {
  return CID.createV1(0x55, await sha256.digest(new TextEncoder().encode(label)))
}

describe('provider record placement and lookup traces (40 nodes, memory)', () => {
  let net: Network
  const cids: CID[] = []
  const providersOf = new Map<string, number[]>()

  beforeAll(async () => {
    net = await startNetwork({ size: SIZE, transport: 'memory', topology: 'random', degree: 3, seed: 14 })
    await net.waitForRoutingTables(3, { timeout: 60_000 })
    print('routing tables before provides:', Math.min(...net.nodes.map(dhtRoutingTableSize)), '-', Math.max(...net.nodes.map(dhtRoutingTableSize)))
    const label = `recall ${Date.now()} ${Math.random()}`
    for (let c = 0; c < CIDS; c++) {
      const cid = await cidOf(`${label} ${c}`)
      cids.push(cid)
      providersOf.set(cid.toString(), [(c * 3) % SIZE, (c * 3 + 17) % SIZE])
    }
    const walks: ProvideTrace[] = []
    // PROVIDES_AT_ONCE walks run at the same time (the benchmark runs 100: 2 per node)
    const jobs = cids.flatMap(cid => (providersOf.get(cid.toString()) ?? []).map(i => ({ cid, i })))
    const atOnce = Number(process.env.IOA_RECALL_PROVIDES_AT_ONCE ?? jobs.length)
    await Promise.all(Array.from({ length: atOnce }, async () => {
      for (let job = jobs.shift(); job != null; job = jobs.shift()) {
        walks.push(await traceProvide(net.nodes[job.i], job.cid, net.nodes, { signal: AbortSignal.timeout(30_000) }))
      }
    }))
    const ms = walks.map(w => w.ms).sort((a, b) => a - b)
    const errors = walks.reduce<Record<string, number>>((a, w) => { for (const [n, c] of Object.entries(w.errors)) a[n] = (a[n] ?? 0) + c; return a }, {})
    print(`provide walks: ${walks.length}, failed ${walks.filter(w => w.error != null).length}, ms median ${ms[ms.length >> 1].toFixed(0)} max ${ms[ms.length - 1].toFixed(0)}; ` +
      `FIND_NODE queries per walk ${walks.map(w => w.queried.length).join(',')}; query errors ${JSON.stringify(errors)}; ` +
      `final peers per walk ${walks.map(w => w.finalPeers.length).join(',')}; accepted per walk ${walks.map(w => w.accepted.length).join(',')}; ` +
      `accepted among the ${K} closest: ${walks.reduce((a, w) => a + w.accepted.filter(r => r >= 0 && r < K).length, 0)} of ${walks.reduce((a, w) => a + w.accepted.length, 0)}`)
    const w0 = walks[0]
    print(`  first walk: ${w0.queried.map(q => `${q.rank}${q.outcome === 'response' ? '' : q.outcome === 'error' ? `!(${q.error?.slice(0, 60) ?? ''})` : '?'}@${q.sentAt.toFixed(0)}`).join(' ')}`)
  }, 120_000)

  afterAll(async () => {
    await net?.stop()
  })

  it('measures where the records are and what lookups do', async () => {
    const placements: Placement[] = []
    for (const cid of cids) placements.push(await recordPlacement(net.nodes, cid, { k: K }))

    let holders = 0
    let amongClosest = 0
    let closestHolding = 0
    let lost = 0
    for (const p of placements) {
      const providers = providersOf.get(p.cid) ?? []
      // (with many walks at once, a walk whose queries all time out stores its record nowhere: counted, not asserted)
      lost += providers.filter(i => (p.perProvider.get(net.nodes[i].peerId.toString())?.holders ?? 0) === 0).length
      for (const [, v] of p.perProvider) {
        holders += v.holders
        amongClosest += v.amongClosest
      }
      // how many of the k closest hold the record of every provider
      closestHolding += p.closest.filter(i => providers.every(pi => p.holders.some(h => h.index === i && h.providers.includes(net.nodes[pi].peerId.toString())))).length
    }
    print(`placement: ${holders} stored records for ${CIDS * 2} provides; ${amongClosest} (${(100 * amongClosest / holders).toFixed(1)} %) on the ${K} closest; ` +
      `${(100 * closestHolding / (CIDS * K)).toFixed(1)} % of the ${K} closest hold both providers; ${lost} provides stored on no peer`)
    expect(placements.some(p => p.holders.length > 0), 'some record is stored somewhere').toBe(true)

    const traces: Array<{ trace: LookupTrace, want: string[], asker: number }> = []
    for (let l = 0; l < CIDS; l++) {
      const cid = cids[l]
      const providers = providersOf.get(cid.toString()) ?? []
      const asker = [...Array(SIZE).keys()].find(i => !providers.includes(i) && !placements[l].holders.some(h => h.index === i) && i >= (l * 7) % SIZE) ??
        [...Array(SIZE).keys()].find(i => !providers.includes(i)) ?? 0
      const trace = await traceLookup(net.nodes[asker], cid, net.nodes, { signal: AbortSignal.timeout(30_000), k: K })
      traces.push({ trace, want: providers.map(i => net.nodes[i].peerId.toString()), asker })
    }

    let found = 0
    let expected = 0
    let missedWithHolderUnasked = 0
    let timeouts = 0
    const stops: Record<string, number> = {}
    for (const { trace, want } of traces) {
      expected += want.length
      const got = want.filter(p => trace.providers.includes(p)).length
      found += got
      stops[trace.stopped] = (stops[trace.stopped] ?? 0) + 1
      timeouts += Object.entries(trace.errors).filter(([name]) => /timeout|abort/i.test(name)).reduce((a, [, n]) => a + n, 0)
      if (got < want.length) {
        const asked = new Set(trace.queried.filter(q => q.outcome === 'response').map(q => q.peer))
        const p = placements[traces.findIndex(t => t.trace === trace)]
        const missing = want.filter(w => !trace.providers.includes(w))
        const holderAsked = missing.every(m => p.holders.some(h => h.providers.includes(m) && asked.has(h.peer)))
        if (!holderAsked) missedWithHolderUnasked++
      }
      expect(trace.queried.length, 'the lookup queried peers').toBeGreaterThan(0)
    }
    const queries = traces.map(t => t.trace.queried.length).sort((a, b) => a - b)
    print(`lookups: ${found}/${expected} providers found (${(100 * found / expected).toFixed(1)} %); stops ${JSON.stringify(stops)}; ` +
      `queries per lookup median ${queries[queries.length >> 1]}, max ${queries[queries.length - 1]}; query errors by name ${JSON.stringify(traces.reduce<Record<string, number>>((a, t) => { for (const [n, c] of Object.entries(t.trace.errors)) a[n] = (a[n] ?? 0) + c; return a }, {}))}; ` +
      `incomplete lookups that never asked a holder of the missing record: ${missedWithHolderUnasked}; timeouts ${timeouts}`)
    for (const { trace, want, asker } of traces.slice(0, 3)) {
      print(`  trace from node ${asker}: ${trace.queried.length} queries (${trace.queried.filter(q => q.rank >= 0 && q.rank < K).length} of them to the ${K} closest), ` +
        `ranks in order ${trace.queried.map(q => q.rank).join(',')}; answered with a provider: ${trace.queried.filter(q => q.providers.length > 0).map(q => q.rank).join(',')}; ` +
        `found ${want.filter(p => trace.providers.includes(p)).length}/${want.length}; stopped: ${trace.stopped} after ${trace.ms.toFixed(0)} ms`)
    }
  }, 120_000)
})
