// The memory variant of the `discovery` group: 50 nodes on the memory
// transport in this process, 1,000 agents (bench/discovery-common.js), a ring
// plus chords. Before the lookups, a placement summary of the provider
// records (test/harness/placement.ts, loaded through tsx): for a sample of
// capability CIDs, which nodes store a record and how many of them are among
// the 20 peers XOR-closest to the CID, and what a few bare lookups queried
// and why they stopped.
import { createTransportNode } from '@ioa/transport'
import { capabilityCid, createInterconnect } from '@ioa/interconnect'
import { PER_NODE, allSkills, interconnectInit, interleaved, mapLimit, settleTables, skillOf, spread, tally } from './discovery-common.js'

const K = 20

async function loadPlacement () {
  const { tsImport } = await import('tsx/esm/api')
  return tsImport('../test/harness/placement.ts', import.meta.url)
}

/** Print where the records of `sample` skills are and what bare lookups of them did */
async function placementSummary ({ nodes, skills, holderPeers, progress }) {
  const size = nodes.length
  const placement = await loadPlacement()
  const indexOf = new Map(nodes.map((n, i) => [n.peerId.toString(), i]))
  let records = 0
  let among = 0
  let provides = 0
  let missing = 0
  let full = 0
  const holdersPer = []
  for (const skill of skills) {
    const cid = await capabilityCid(skill)
    const p = await placement.recordPlacement(nodes, cid, { k: K })
    for (const peer of holderPeers.get(skill)) {
      provides++
      const v = p.perProvider.get(peer)
      if (v == null) { missing++; continue }
      records += v.holders
      among += v.amongClosest
      holdersPer.push(v.holders)
    }
    const want = [...holderPeers.get(skill)]
    full += p.closest.filter(i => want.every(w => indexOf.get(w) === i || p.holders.some(h => h.index === i && h.providers.includes(w)))).length
  }
  progress(`placement (${skills.length} capabilities, ${provides} provider records): ${records} stored copies, ${among} (${(100 * among / Math.max(1, records)).toFixed(1)} %) on the ${K} XOR-closest peers; ` +
    `copies per provider min / median / max ${spread(holdersPer)}; providers with no copy anywhere: ${missing}; ` +
    `${(100 * full / (skills.length * K)).toFixed(1)} % of the ${K} closest hold every provider of the capability`)
  const stops = {}
  let found = 0
  let expected = 0
  for (const [l, skill] of skills.slice(0, 5).entries()) {
    const cid = await capabilityCid(skill)
    const want = [...holderPeers.get(skill)]
    const asker = [...Array(size).keys()].find(i => i >= (l * 11) % size && !want.includes(nodes[i].peerId.toString())) ?? 0
    const trace = await placement.traceLookup(nodes[asker], cid, nodes, { signal: AbortSignal.timeout(30_000), k: K })
    stops[trace.stopped] = (stops[trace.stopped] ?? 0) + 1
    const got = want.filter(w => trace.providers.includes(w)).length
    found += got
    expected += want.length
    progress(`  bare lookup of ${skill} from node ${asker}: ${trace.queried.length} queries (${trace.queried.filter(q => q.rank >= 0 && q.rank < K).length} to the ${K} closest; ranks ${trace.queried.map(q => q.rank).join(',')}), ` +
      `answered with a provider: ranks ${trace.queried.filter(q => q.providers.length > 0).map(q => q.rank).join(',') || '-'}; errors ${JSON.stringify(trace.errors)}; ` +
      `found ${got}/${want.length}; stopped: ${trace.stopped} after ${trace.ms.toFixed(0)} ms`)
  }
  progress(`  traced lookups: ${found}/${expected} providers; stops ${JSON.stringify(stops)}`)
}

export async function memoryVariant ({ size, quick, progress }) {
  const lookups = quick ? 6 : 30
  const nodes = []
  const ics = []
  try {
    progress(`memory: starting ${size} nodes on the memory transport`)
    const selfQueried = new Set()
    for (let i = 0; i < size; i++) {
      const node = await createTransportNode({ transports: ['memory'], listen: [`/memory/bench-discovery-${process.pid}-${i}`], start: false })
      // kad-dht's first self-query starts once the routing table has a peer
      node.addEventListener('kad-dht:query:self', () => { selfQueried.add(i) }, { once: true })
      await node.start()
      nodes.push(node)
    }
    // a ring plus chords: connected, but most pairs are not neighbours
    await mapLimit(nodes.map((_, i) => i), 10, async (i) => {
      for (const j of [(i + 1) % size, (i + 7) % size]) {
        await nodes[i].dial(nodes[j].getMultiaddrs()[0], { signal: AbortSignal.timeout(10_000) }).catch((err) => { progress(`node ${i} could not dial ${j}: ${err.message}`) })
      }
    })
    // let the DHT settle before announcing (records announced while routing
    // tables are still small land on the wrong "closest" peers): every node's
    // first self-query has ended, its table holds at least its connected
    // peers (identify done), and no table has changed for 3 s. The tables
    // do not reach k (20) everywhere: a node's table holds the peers its
    // walks met (print the smallest).
    const settled = await settleTables(() => ({
      sizes: Object.fromEntries(nodes.map((n, i) => [i, n.services.dht.routingTable.size])),
      self: Object.fromEntries(nodes.map((_, i) => [i, selfQueried.has(i)])),
      peers: Object.fromEntries(nodes.map((n, i) => [i, n.getPeers().length]))
    }))
    progress(`memory: routing tables ${settled.stable ? 'stable' : `not settled (${settled.pending} nodes with their self-query pending or fewer table entries than connected peers)`} after ${(settled.ms / 1000).toFixed(1)} s: ` +
      `smallest / median / largest ${spread(settled.sizes)} peers`)
    for (const n of nodes) ics.push(await createInterconnect(n, interconnectInit()))

    progress(`memory: hosting ${size * PER_NODE} agents`)
    const holders = new Map()
    const holderPeers = new Map()
    await mapLimit(nodes.map((_, i) => i), 5, async (i) => {
      for (let a = 0; a < PER_NODE; a++) {
        const skill = skillOf(i, a, size)
        const agent = await ics[i].host({ key: `agent-${a}`, name: `Agent ${i}/${a}`, skills: [{ id: skill }] })
        if (!holders.has(skill)) holders.set(skill, new Set())
        holders.get(skill).add(agent.did)
        if (!holderPeers.has(skill)) holderPeers.set(skill, new Set())
        holderPeers.get(skill).add(nodes[i].peerId.toString())
      }
    })
    // wait until every capability record is announced (the announcement walks run in the background)
    progress('memory: waiting for announcements')
    const skills = allSkills(size)
    const t1 = performance.now()
    const late = (await Promise.allSettled(ics.map(ic => ic.announced({ signal: AbortSignal.timeout(600_000) })))).filter(r => r.status === 'rejected').length
    progress(`memory: announcements done in ${((performance.now() - t1) / 1000).toFixed(1)} s${late > 0 ? ` (${late} nodes still announcing after 600 s: measured as they are)` : ''}`)

    await placementSummary({ nodes, skills: skills.filter((_, k) => k % 5 === 0), holderPeers, progress })

    progress(`memory: ${lookups} lookups`)
    const t = tally()
    for (let l = 0; l < lookups; l++) {
      const skill = skills[(l * 37) % skills.length]
      const asker = (l * 13 + 5) % size
      const cid = await capabilityCid(skill)
      // interleave: baseline first on even rounds, ours first on odd rounds
      const runBare = async () => {
        const peers = new Set()
        const t0 = performance.now()
        for await (const p of nodes[asker].contentRouting.findProviders(cid, { signal: AbortSignal.timeout(30_000) })) peers.add(p.id.toString())
        t.bare(performance.now() - t0, peers, holderPeers.get(skill))
      }
      const runOurs = async () => {
        const t0 = performance.now()
        const results = await ics[asker].discoverAll({ capability: skill }, { cache: false, timeout: 30_000 })
        const want = holders.get(skill)
        const got = t.ours(performance.now() - t0, new Set(results.map(r => r.card.id)), want)
        if (got < want.size) progress(`memory: lookup ${l} of ${skill} from node ${asker}: ${got}/${want.size} agents, from peers ${[...new Set(results.map(r => r.peer.slice(-6)))].join(',')} of ${[...holderPeers.get(skill)].map(p => p.slice(-6)).join(',')}`)
      }
      await interleaved(l, runBare, runOurs)
    }
    progress(`memory: ${t.summary()}`)
    return t.rows('memory')
  } finally {
    await Promise.all(ics.map(ic => ic.stop().catch(() => {})))
    await Promise.all(nodes.map(n => n.stop().catch(() => {})))
  }
}
