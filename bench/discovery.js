// The `discovery` benchmark group: capability lookups in a 50-node network
// hosting 1,000 agents (20 per node; every capability held by 10 agents on 2
// nodes), through @ioa/interconnect (`discoverAll`: DHT walk + card fetch +
// verify + rank) against a bare libp2p `findProviders` of the same CID from
// the same node in the same run (the baseline), with the recall of both.
// Variants (row suffixes), see bench/README.md:
//
//   memory  50 nodes on the memory transport in this process, with a
//           placement summary of the provider records (bench/discovery-memory.js)
//   tcp     the same over TCP on 127.0.0.1, the nodes in 4 worker processes
//   load    the tcp network beside a CPU load of one core
//   churn   the tcp network while 10 nodes leave and 10 join (bench/discovery-tcp.js)
//
// `--quick` runs every variant on 16 nodes (320 agents, 32 capabilities, each
// still on 10 agents of 2 nodes; a smoke run: fewer nodes than k = 20) with
// 6 lookups each; `--load` runs the whole
// group beside the one-core load (every variant then measures a loaded
// machine). IOA_BENCH_DISCOVERY=memory,tcp,load,churn picks variants;
// IOA_BENCH_DISCOVERY_NODES=<even n> sets the network size.
import os from 'node:os'
import { memoryVariant } from './discovery-memory.js'
import { WORKERS, startLoad, tcpVariants } from './discovery-tcp.js'

const VARIANTS = ['memory', 'tcp', 'load', 'churn']

export const discoveryGroup = {
  name: 'discovery',
  title: `capability lookup, 50 nodes x 20 agents (--quick: 16): memory; TCP in ${WORKERS} processes; beside a one-core load; 20 % churn (baseline: bare libp2p findProviders of the same CID)`,
  async run ({ quick, progress, load: loadAll }) {
    const variants = (process.env.IOA_BENCH_DISCOVERY ?? VARIANTS.join(',')).split(',').map(v => v.trim()).filter(v => v !== '')
    for (const v of variants) if (!VARIANTS.includes(v)) throw new Error(`IOA_BENCH_DISCOVERY: unknown variant "${v}" (variants: ${VARIANTS.join(', ')})`)
    if (process.env.IOA_BENCH_GOSSIP === '0') progress('IOA_BENCH_GOSSIP=0: ours on the DHT alone (the gossip channel off)')
    progress(`load average before: ${os.loadavg().map(l => l.toFixed(2)).join(' ')}`)
    const size = Number(process.env.IOA_BENCH_DISCOVERY_NODES ?? (quick ? 16 : 50))
    if (!Number.isInteger(size) || size < 8 || size % 2 !== 0) throw new Error(`IOA_BENCH_DISCOVERY_NODES: an even number >= 8, got ${process.env.IOA_BENCH_DISCOVERY_NODES}`)
    progress(`${size} nodes, ${size * 20} agents, ${size * 2} capabilities`)
    const load = loadAll === true ? startLoad() : undefined
    if (load != null) progress('--load: a one-core CPU load runs beside the whole group')
    const rows = []
    try {
      if (variants.includes('memory')) rows.push(...await memoryVariant({ size, quick, progress }))
      const phases = variants.filter(v => v !== 'memory')
      if (phases.length > 0) rows.push(...await tcpVariants({ size, quick, progress, phases }))
    } finally {
      await load?.stop()
    }
    progress(`load average after: ${os.loadavg().map(l => l.toFixed(2)).join(' ')}`)
    return rows
  }
}
