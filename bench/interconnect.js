// Benchmark groups of the interconnect layer (the `discovery` group is in
// bench/discovery.js):
//
// - `hosting`: heap per hosted agent when one node hosts 10,000 agents,
//   against the heap of the same number of bare identities and signed cards
//   made without a node (the baseline).
import { createTransportNode } from '@ioa/transport'
import { createIdentity, createInterconnect, signCard } from '@ioa/interconnect'

const sleep = (ms) => new Promise(resolve => setTimeout(resolve, ms))

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
