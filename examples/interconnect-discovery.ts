/**
 * Discovery and routing of the interconnect layer: a node joins the network,
 * hosts a hotel agent and publishes its capabilities in the DHT; another node
 * finds it by capability and tag, ranks the results and sends the agent a
 * message. Run it with `npm run build && npx tsx examples/interconnect-discovery.ts`.
 */
import { createTransportNode } from '@ioa/transport'
import { createInterconnect } from '@ioa/interconnect'
import { setTimeout as sleep } from 'node:timers/promises'
import { pathToFileURL } from 'node:url'
import type { Did } from '@ioa/interconnect'

export interface DiscoveryResult {
  hotel: Did
  traveller: Did
  /** Ids of the agents `discoverAll` ranked, best first */
  ranked: Did[]
  /** The hotel agent's answer */
  answer: unknown
}

export async function main ({ log = console.log, signal = AbortSignal.timeout(60_000) }: { log?: (...args: unknown[]) => void, signal?: AbortSignal } = {}): Promise<DiscoveryResult> {
  // the node that joins the network bootstraps from this one (elsewhere on the network)
  const first = await createTransportNode()
  const elsewhere = await createInterconnect(first, { domain: 'travel-app.example' })
  const bootstrap = first.getMultiaddrs().map(a => a.toString())
  try {
    const node = await createTransportNode({ bootstrap }) // multiaddrs of peers to join through
    const ic = await createInterconnect(node, { domain: 'hotels.example' })
    try {
      const hotel = await ic.host({
        key: 'hotel-agent',                      // key name in the key store
        name: 'Seaside Hotel',
        skills: [{ id: 'travel.hotel.booking', tags: ['eu'] }],
        inbox: async (msg) => ({ booked: true, for: msg.from })
      })
      await ic.announced()                       // its DHT records are published
      // a node that has just joined may need a moment before its records can be found
      while ((await elsewhere.discoverAll({ capability: 'travel.hotel' }, { cache: false, timeout: 3_000, signal })).length === 0) {
        await sleep(200, undefined, { signal })
      }

      // elsewhere on the network
      const traveller = await elsewhere.host({ key: 'traveller', name: 'Traveller', skills: [{ id: 'assistant.travel' }] })
      for await (const found of elsewhere.discover({ capability: 'travel.hotel', tags: ['eu'] })) {
        log(found.card.name, found.score, found.latency)
      }
      const ranked = await elsewhere.discoverAll({ capability: 'travel.hotel' }, { limit: 5 })
      const answer = await elsewhere.send(ranked[0].card.id, { nights: 1 }, { skill: 'travel.hotel.booking', from: traveller.did })

      return { hotel: hotel.did, traveller: traveller.did, ranked: ranked.map(r => r.card.id), answer }
    } finally {
      await ic.stop()
      await node.stop()
    }
  } finally {
    await elsewhere.stop()
    await first.stop()
  }
}

if (process.argv[1] != null && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().then(result => { console.log(result) }, (err: unknown) => { console.error(err); process.exitCode = 1 })
}
