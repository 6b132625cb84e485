/**
 * The interconnect layer on two transport nodes: host an agent, find it by
 * capability from the other node and send it a message. Run it with
 * `npm run build && npx tsx examples/interconnect.ts`.
 */
import { createInterconnect } from '@ioa/interconnect'
import { createTransportNode } from '@ioa/transport'
import { pathToFileURL } from 'node:url'

export async function main (): Promise<unknown> {
  const node = await createTransportNode()
  const other = await createTransportNode({ bootstrap: node.getMultiaddrs().map(a => a.toString()) })
  const otherIc = await createInterconnect(other, { domain: 'cars.example' })
  try {
    // #region find-and-call
    const ic = await createInterconnect(node, { domain: 'hotels.example' })
    await ic.host({ key: 'hotel', name: 'Seaside Hotel', skills: [{ id: 'travel.hotel.booking' }], inbox: (m) => ({ ok: true, got: m.body }) })
    await ic.announced() // the card's DHT records are published

    // on any other node of the network
    const [best] = await otherIc.discoverAll({ capability: 'travel.hotel' })
    const answer = await otherIc.send(best.card.id, { nights: 1 }, { skill: 'travel.hotel.booking' })
    // #endregion
    await ic.stop()
    return answer
  } finally {
    await otherIc.stop()
    await other.stop()
    await node.stop()
  }
}

if (process.argv[1] != null && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().then(answer => { console.log(answer) }, (err: unknown) => { console.error(err); process.exitCode = 1 })
}
