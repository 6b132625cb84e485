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
import { percentile } from './measure.js'

const sleep = (ms) => new Promise(resolve => setTimeout(resolve, ms))

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
      // let the DHT settle: announcements made while routing tables are still
      // small land on the wrong "closest" peers and are not found later
      progress('waiting for routing tables (>= 30 peers each, at most 120 s)')
      for (let t = 0; t < 600 && nodes.some(n => n.services.dht.routingTable.size < 30); t++) await sleep(200)
      progress(`smallest routing table: ${Math.min(...nodes.map(n => n.services.dht.routingTable.size))} peers`)
      // lookups by capability only: agent-id records are not needed here
      for (const n of nodes) ics.push(await createInterconnect(n, { domain: 'bench.example', announceAgentIds: false, announceConcurrency: 2 }))

      // 1,000 agents, each with one skill out of 100; every skill is held by
      // 10 agents on 2 nodes (each node hosts 5 agents of each of 4 skills)
      progress(`hosting ${size * perNode} agents`)
      const holders = new Map()
      const holderPeers = new Map()
      await mapLimit(nodes.map((_, i) => i), 5, async (i) => {
        for (let a = 0; a < perNode; a++) {
          const n = (i % 25) * 4 + Math.floor(a / 5)
          const skill = `bench.c${n % categories}.s${Math.floor(n / categories) % skillsPerCategory}`
          const agent = await ics[i].host({ key: `agent-${a}`, name: `Agent ${i}/${a}`, skills: [{ id: skill }] })
          if (!holders.has(skill)) holders.set(skill, new Set())
          holders.get(skill).add(agent.did)
          if (!holderPeers.has(skill)) holderPeers.set(skill, new Set())
          holderPeers.get(skill).add(nodes[i].peerId.toString())
        }
      })
      // wait until every capability record is announced (the announcement walks run in the background)
      progress('waiting for announcements')
      const skills = [...holders.keys()]
      const t0 = performance.now()
      await Promise.all(ics.map(ic => ic.announced({ signal: AbortSignal.timeout(600_000) })))
      progress(`announcements done in ${((performance.now() - t0) / 1000).toFixed(1)} s`)

      progress(`running ${lookups} lookups`)
      const ours = []
      const bare = []
      let found = 0
      let expected = 0
      let bareFound = 0
      let bareExpected = 0
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
          const want = holderPeers.get(skill)
          bareExpected += want.size
          bareFound += [...want].filter(p => peers.has(p)).length
        }
        const runOurs = async () => {
          const t = performance.now()
          const results = await ics[asker].discoverAll({ capability: skill }, { cache: false, timeout: 30_000 })
          ours.push(performance.now() - t)
          const want = holders.get(skill)
          expected += want.size
          const got = results.filter(r => want.has(r.card.id)).length
          found += got
          if (got < want.size) progress(`lookup ${l} of ${skill} from node ${asker}: ${got}/${want.size} agents, from peers ${[...new Set(results.map(r => r.peer.slice(-6)))].join(',')} of ${[...holderPeers.get(skill)].map(p => p.slice(-6)).join(',')}`)
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
        row('interconnect.recall', recall, '%', 100, { minValue: 100 }),
        // share of the holder peers the bare DHT lookup returned (the DHT's own recall)
        row('bare.recall', bareExpected === 0 ? 0 : (100 * bareFound) / bareExpected, '%', 100)
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
