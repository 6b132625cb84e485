// Benchmark groups of the interconnect layer:
//
// - `discovery`: capability lookups in a 50-node network hosting 1,000 agents
//   (20 per node), through @ioa/interconnect (DHT walk + card fetch + verify +
//   rank), against a bare libp2p `findProviders` of the same CID from the same
//   node in the same run (the baseline). Also recall: the share of the agents
//   that really have the capability that the lookup returned.
// - `hosting`: heap per hosted agent when one node hosts 10,000 agents,
//   against the heap of the same number of bare identities and signed cards
//   made without a node (the baseline).
import { createTransportNode } from '@ioa/transport'
import { capabilityCid, createIdentity, createInterconnect, signCard } from '@ioa/interconnect'

const sleep = (ms) => new Promise(resolve => setTimeout(resolve, ms))

function percentile (sorted, p) {
  if (sorted.length === 0) return NaN
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]
}

async function mapLimit (items, limit, fn) {
  const out = new Array(items.length)
  let next = 0
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const i = next++
      out[i] = await fn(items[i], i)
    }
  }))
  return out
}

function row (name, value, unit, baseline, target) {
  return { name, value, unit, baseline, ratio: baseline != null && baseline !== 0 ? value / baseline : null, ...(target != null ? { target } : {}) }
}

async function gc () {
  if (typeof globalThis.gc === 'function') {
    for (let i = 0; i < 3; i++) {
      globalThis.gc()
      await sleep(50)
    }
  } else {
    await sleep(200)
  }
}

export const discoveryGroup = {
  name: 'discovery',
  title: 'capability lookup, 50 nodes x 20 agents (baseline: bare libp2p findProviders of the same CID)',
  async run ({ quick, progress }) {
    const size = 50
    const perNode = 20
    const categories = 10
    const skillsPerCategory = 10
    const lookups = quick ? 10 : 30
    const nodes = []
    const ics = []
    try {
      progress(`starting ${size} nodes on the memory transport`)
      for (let i = 0; i < size; i++) {
        nodes.push(await createTransportNode({ transports: ['memory'], listen: [`/memory/bench-discovery-${process.pid}-${i}`] }))
      }
      // a ring plus chords: connected, but most pairs are not neighbours
      await mapLimit(nodes.map((_, i) => i), 10, async (i) => {
        for (const j of [(i + 1) % size, (i + 7) % size]) {
          await nodes[i].dial(nodes[j].getMultiaddrs()[0], { signal: AbortSignal.timeout(10_000) }).catch(() => {})
        }
      })
      for (let t = 0; t < 100 && nodes.some(n => n.services.dht.routingTable.size < 3); t++) await sleep(200)
      for (const n of nodes) ics.push(await createInterconnect(n, { domain: 'bench.example' }))

      // 1,000 agents, each with one skill out of 100; every skill is held by 10 agents
      progress(`hosting ${size * perNode} agents`)
      const holders = new Map()
      let k = 0
      await mapLimit(nodes.map((_, i) => i), 5, async (i) => {
        for (let a = 0; a < perNode; a++) {
          const n = k++
          const skill = `bench.c${n % categories}.s${Math.floor(n / categories) % skillsPerCategory}`
          const agent = await ics[i].host({ key: `agent-${a}`, name: `Agent ${i}/${a}`, skills: [{ id: skill }] })
          if (!holders.has(skill)) holders.set(skill, new Set())
          holders.get(skill).add(agent.did)
        }
      })
      // wait until every capability record is announced (the announcement walks run in the background)
      progress('waiting for announcements')
      const skills = [...holders.keys()]
      await mapLimit(nodes.map((_, i) => i), 10, async (i) => {
        const own = new Set(ics[i].agents().flatMap(a => a.card.card.skills.map(s => s.id)))
        for (const s of own) {
          await nodes[i].contentRouting.provide(await capabilityCid(s), { signal: AbortSignal.timeout(60_000) }).catch(() => {})
        }
      })

      progress(`running ${lookups} lookups`)
      const ours = []
      const bare = []
      let found = 0
      let expected = 0
      for (let l = 0; l < lookups; l++) {
        const skill = skills[(l * 37) % skills.length]
        const asker = (l * 13 + 5) % size
        const cid = await capabilityCid(skill)

        // interleave: baseline first on even rounds, ours first on odd rounds
        const runBare = async () => {
          const t = performance.now()
          const peers = new Set()
          for await (const p of nodes[asker].contentRouting.findProviders(cid, { signal: AbortSignal.timeout(30_000) })) peers.add(p.id.toString())
          bare.push(performance.now() - t)
        }
        const runOurs = async () => {
          const t = performance.now()
          const results = await ics[asker].discoverAll({ capability: skill }, { cache: false, timeout: 30_000 })
          ours.push(performance.now() - t)
          const want = holders.get(skill)
          expected += want.size
          found += results.filter(r => want.has(r.card.id)).length
        }
        if (l % 2 === 0) {
          await runBare()
          await runOurs()
        } else {
          await runOurs()
          await runBare()
        }
      }
      ours.sort((a, b) => a - b)
      bare.sort((a, b) => a - b)
      const recall = expected === 0 ? 0 : (100 * found) / expected
      return [
        row('interconnect.lookup.median', percentile(ours, 50), 'ms', percentile(bare, 50)),
        row('interconnect.lookup.p95', percentile(ours, 95), 'ms', percentile(bare, 95), { max: 1.5 }),
        row('bare.lookup.median', percentile(bare, 50), 'ms', percentile(bare, 50)),
        row('bare.lookup.p95', percentile(bare, 95), 'ms', percentile(bare, 95)),
        row('interconnect.recall', recall, '%', 100, { minValue: 100 })
      ]
    } finally {
      await Promise.all(ics.map(ic => ic.stop().catch(() => {})))
      await Promise.all(nodes.map(n => n.stop().catch(() => {})))
    }
  }
}

export const hostingGroup = {
  name: 'hosting',
  title: 'heap per hosted agent, one node with 10,000 agents (baseline: bare identities + signed cards)',
  async run ({ quick, progress }) {
    const count = quick ? 2_000 : 10_000
    const skill = (i) => [{ id: `svc.kind${i % 50}.op${i % 7}`, tags: ['bench'], description: 'A benchmark agent skill' }]

    // baseline: the identities and signed cards alone
    await gc()
    let before = process.memoryUsage().heapUsed
    const keep = []
    for (let i = 0; i < count; i++) {
      const id = await createIdentity()
      const now = Date.now()
      keep.push(await signCard({
        v: 1, id: id.did, name: `Agent ${i}`, description: '', domain: 'bench.example', version: '1.0.0', skills: skill(i),
        peer: '12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo', addrs: ['/ip4/127.0.0.1/tcp/4001'], availability: { mode: 'always' }, issuedAt: now, expiresAt: now + 3_600_000
      }, id), id)
    }
    await gc()
    const baseline = (process.memoryUsage().heapUsed - before) / count / 1024
    keep.length = 0

    progress(`hosting ${count} agents on one node`)
    const node = await createTransportNode({ transports: ['memory'], listen: [`/memory/bench-hosting-${process.pid}`] })
    const ic = await createInterconnect(node, { domain: 'bench.example' })
    try {
      await gc()
      before = process.memoryUsage().heapUsed
      for (let i = 0; i < count; i++) {
        await ic.host({ key: `a${i}`, name: `Agent ${i}`, skills: skill(i), inbox: () => null })
      }
      await gc()
      const perAgent = (process.memoryUsage().heapUsed - before) / count / 1024
      return [
        // absolute target: at most 50 KB per hosted agent
        row('hosted.heap-per-agent', perAgent, 'KB', baseline, { maxValue: 50 }),
        row('bare.heap-per-agent', baseline, 'KB', baseline)
      ]
    } finally {
      await ic.stop()
      await node.stop()
    }
  }
}
