/**
 * A domain gateway between two networks over TCP on 127.0.0.1. The domain
 * `hotels.example` runs its own private network (a pre-shared key that every
 * connection needs, and a DHT of its own derived from the key: a peer without
 * the key cannot connect) of a node hosting a hotel agent and the gateway's
 * inner node. The gateway's outer node is on the public network, with a
 * traveller's node. From outside, the hotel agent is found and reached
 * through the gateway, with its exported skill only, and its node cannot be
 * reached directly. Run it with `npm run build && npx tsx examples/gateway.ts`.
 */
import { anySignal } from 'any-signal'
import { createGateway, createInterconnect } from '@ioa/interconnect'
import { createTransportNode, generateDomainKey } from '@ioa/transport'
import { setTimeout as sleep } from 'node:timers/promises'
import { pathToFileURL } from 'node:url'
import type { DiscoveredAgent, Interconnect } from '@ioa/interconnect'
import type { TransportNode } from '@ioa/transport'

export interface GatewayResult {
  /** The hotel agent as found from outside */
  found: DiscoveredAgent
  /** The peer id of the gateway's outer node */
  gatewayPeer: string
  /** The hotel agent's answer, through the gateway */
  answer: unknown
  /** The code of the error a call of a skill that is not exported gets */
  refused: string
  /** The name of the error a direct ping of the hotel's node from outside gets */
  direct: string
}

/** Poll `fn` until it returns something other than undefined */
async function poll<T> (fn: () => Promise<T | undefined>, signal: AbortSignal): Promise<T> {
  while (true) {
    const value = await fn()
    if (value !== undefined) return value
    await sleep(200, undefined, { signal }) // the DHTs need a moment after a node joins
  }
}

/** A node of the domain's own network: only holders of the domain's key can connect to it */
async function domainNode (psk: string, bootstrap: string[] = []): Promise<TransportNode> {
  return createTransportNode({
    bootstrap,
    privateNetwork: { psk }  // also gives the domain a DHT of its own: /ioa/kad/1.0.0/psk/<from the key>
  })
}

const addresses = (node: TransportNode): string[] => node.getMultiaddrs().map(a => a.toString())

export async function main ({ signal = AbortSignal.timeout(60_000) } = {}): Promise<GatewayResult> {
  const nodes: TransportNode[] = []
  const ics: Interconnect[] = []
  try {
    // the domain network: the gateway's inner node and the hotel's node, with
    // the domain's pre-shared key (made here; `ioa key new --domain-psk` writes one to a file)
    const psk = generateDomainKey()
    const innerNode = await domainNode(psk)
    nodes.push(innerNode)
    const hotelNode = await domainNode(psk, addresses(innerNode))
    nodes.push(hotelNode)
    // the public network: the gateway's outer node and a traveller's node
    const outerNode = await createTransportNode()
    nodes.push(outerNode)
    const travellerNode = await createTransportNode({ bootstrap: addresses(outerNode) })
    nodes.push(travellerNode)

    const innerIc = await createInterconnect(innerNode, { domain: 'hotels.example' })
    ics.push(innerIc)
    const outerIc = await createInterconnect(outerNode, { domain: 'hotels.example' })
    ics.push(outerIc)
    const travellerIc = await createInterconnect(travellerNode, { domain: 'travel-app.example' })
    ics.push(travellerIc)
    const hotelIc = await createInterconnect(hotelNode, {
      domain: 'hotels.example',
      private: true,                                  // cards carry no addresses
      gateways: [outerNode.peerId.toString()],        // the gateways' outer peers, named in cards
      trustedGateways: [innerNode.peerId.toString()]  // inner peers allowed to ask for export cards
    })
    ics.push(hotelIc)
    const hotel = await hotelIc.host({
      key: 'hotel',
      name: 'Seaside Hotel',
      skills: [{ id: 'travel.hotel.booking' }, { id: 'travel.hotel.pricing' }],
      inbox: (m) => ({ booked: true, skill: m.skill, request: m.body })
    }, { signal })
    await hotelIc.announced({ signal })
    await poll(async () => {
      const found = await innerIc.discoverAll({ capability: 'travel.hotel' }, { cache: false, timeout: 3_000, signal })
      return found.length > 0 ? found : undefined
    }, signal)

    // #region gateway
    const gw = await createGateway({
      inner: innerIc,                 // interconnect on the domain's private network
      outer: outerIc,                 // interconnect on the public network
      domain: 'hotels.example',
      exports: [
        { skill: 'travel.hotel.booking' },                            // anyone
        { skill: 'travel.partner', domains: ['partner.example'] }    // one partner domain
      ],
      rateLimit: { requests: 50, per: 1_000 }
    })
    // #endregion
    try {
      await poll(async () => {
        if (gw.exported().length === 0) await gw.refresh()
        return gw.exported().length > 0 ? true : undefined
      }, signal)

      // outside: the agent is found through the gateway, with its exported skill only
      const found = await poll(async () => {
        const [best] = await travellerIc.discoverAll({ capability: 'travel.hotel' }, { cache: false, timeout: 3_000, signal })
        return best
      }, signal)
      const answer = await travellerIc.send(hotel.did, { nights: 1 }, { skill: 'travel.hotel.booking', signal })
      const refused = await travellerIc.send(hotel.did, {}, { skill: 'travel.hotel.pricing', signal })
        .then(() => 'answered', (err: { code?: string }) => err.code ?? 'no code')
      const direct = await travellerNode.services.ping.ping(hotelNode.getMultiaddrs(), { signal: anySignal([signal, AbortSignal.timeout(3_000)]) })
        .then(() => 'reached', (err: Error) => err.name)
      return { found, gatewayPeer: outerNode.peerId.toString(), answer, refused, direct }
    } finally {
      await gw.stop()
    }
  } finally {
    for (const ic of ics.reverse()) await ic.stop().catch(() => {})
    for (const node of nodes.reverse()) await Promise.resolve(node.stop()).catch(() => {})
  }
}

if (process.argv[1] != null && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().then(result => { console.log(result) }, (err: unknown) => { console.error(err); process.exitCode = 1 })
}
