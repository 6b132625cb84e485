/**
 * A management agent finds a node of its domain through its peer routing
 * (the DHT) when no watched node can give it an address
 * (spec/management.md, "Management protocol" 6): three nodes over TCP.
 * C dialled A, so A's snapshot lists C as an inbound connection, whose
 * `addr` is C's ephemeral port, not a listen address; the finder then dials
 * C by peer id alone, libp2p's dialer finds no address of C in the peer
 * store and asks its peer routing, and kad-dht's FIND_NODE to A (a DHT
 * server with C, a DHT server, in its routing table) answers C's listen
 * addresses.
 *
 * No other path may connect the agent to C first, or the test would pass
 * without the DHT lookup: the agent is a DHT client (no routing table lists
 * it, so no query of A or C ever dials it) whose self-query, the one DHT
 * query it would run of its own (it hosts no agent to announce; kad-dht
 * 16.4.5 never starts its routing table refresh, which has no `start`), is
 * pushed past the test (`selfQueryDelay`). The test records what the
 * agent's peer routing is asked and answers, and that the agent was not
 * connected to C and knew no address of it when asked.
 */
import { delegate } from '@ioa/collab'
import { createIdentity } from '@ioa/interconnect'
import { createManagement } from '@ioa/management'
import { createIoaNode } from '@ioa/node'
import { CODE_P2P, multiaddr } from '@multiformats/multiaddr'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { LOOPBACK, until } from './util.js'
import type { ManagementLayer, Topology } from '@ioa/management'
import type { IoaNode } from '@ioa/node'
import type { PeerId, PeerInfo } from '@libp2p/interface'

const TCP = { transports: ['tcp' as const], allow: LOOPBACK }
const FAST = { minInterval: 50, pollInterval: 100 }
const HOUR = 3_600_000

/** One call of the agent's peer routing `findPeer` */
interface FindPeerCall {
  peer: string
  /** Whether the agent was connected to that peer when it was asked */
  connected: boolean
  /** The addresses of that peer in the agent's peer store when it was asked */
  known: string[]
  /** The addresses found, once answered */
  found?: string[]
  /** The error's name, when it failed */
  error?: string
}

let agent: IoaNode
let topology: Topology
let a: IoaNode
let c: IoaNode
const calls: FindPeerCall[] = []

/** A multiaddr without its `/p2p/<peer id>` */
const bare = (m: { toString: () => string }): string => multiaddr(m.toString()).decapsulateCode(CODE_P2P).toString()

async function addressesOf (node: IoaNode, peer: PeerId): Promise<string[]> {
  try {
    return (await node.transport.peerStore.get(peer)).addresses.map(x => x.multiaddr.toString())
  } catch (err: any) {
    if (err?.name === 'NotFoundError') return []
    throw err
  }
}

beforeAll(async () => {
  const operator = await createIdentity()
  const agentKey = await createIdentity()
  const grant = await delegate(operator, { audience: agentKey.did, capabilities: [{ skill: 'ioa.manage.*' }], expiresAt: Date.now() + HOUR })
  const managed = (): ReturnType<typeof createManagement> => createManagement({ operator: operator.did, ...FAST })
  // C first, knowing no one: its DHT queries wait for a first peer, and then only reach A
  c = await createIoaNode({ domain: 'acme', transport: TCP, layers: [managed()] })
  await c.host({ key: 'pay', name: 'Pay', skills: [{ id: 'shop.pay', name: 'Pay' }] })
  agent = await createIoaNode({
    domain: 'acme',
    // a DHT client (in no routing table) whose self-query would not run before the test ends
    transport: { ...TCP, privateKey: agentKey.privateKey, dhtClientMode: true, selfQueryDelay: 60_000 },
    layers: [createManagement({ operator: operator.did, role: 'agent', ...FAST, topology: { proofs: [grant], heartbeat: 300, retryDelay: 200, rescanInterval: 300 } })]
  })
  topology = agent.layer<ManagementLayer>('management')?.topology as Topology
  // libp2p's dialer asks `components.peerRouting.findPeer` at dial time, and
  // that component is the node's `peerRouting`: record what it is asked
  const routing = agent.transport.peerRouting
  const findPeer = routing.findPeer.bind(routing)
  routing.findPeer = async (peer, options): Promise<PeerInfo> => {
    const call: FindPeerCall = { peer: peer.toString(), connected: agent.transport.getConnections(peer).length > 0, known: await addressesOf(agent, peer) }
    calls.push(call)
    try {
      const info = await findPeer(peer, options)
      call.found = info.multiaddrs.map(m => m.toString())
      return info
    } catch (err: any) {
      call.error = err?.name ?? String(err)
      throw err
    }
  }
  a = await createIoaNode({ domain: 'acme', transport: TCP, bootstrap: [agent.addresses()[0]], layers: [managed()] })
  await a.host({ key: 'maps', name: 'Maps', skills: [{ id: 'travel.route', name: 'Route' }] })
})

afterAll(async () => {
  await c?.stop()
  await a?.stop()
  await agent?.stop()
})

describe('management agent finding a node through the DHT', () => {
  it('dials a peer reported without an address by asking its peer routing, and watches it', async () => {
    const did = (n: IoaNode): string => n.nodeIdentity.did
    const cPeer = c.transport.peerId
    const nodeDids = (): string[] => topology.snapshot().nodes.map(n => n.did)
    await until(() => nodeDids().includes(did(a)), { timeout: 30_000, what: 'A in the topology' })
    expect(c.transport.getConnections()).toHaveLength(0)
    expect(await addressesOf(agent, cPeer)).toEqual([])
    expect(nodeDids()).not.toContain(did(c))

    // C dials A: A reports C as inbound, from an address C does not listen on
    await c.transport.dial(multiaddr(a.addresses()[0]))
    await until(async () => {
      const s = await a.layer<ManagementLayer>('management')?.protocol?.snapshot()
      return s?.payload.connections.some(x => x.peer === cPeer.toString() && x.direction === 'inbound')
    }, { timeout: 10_000, what: 'C as an inbound connection in A\'s snapshot' })

    await until(() => nodeDids().includes(did(c)), { timeout: 45_000, what: `C in the topology (findPeer calls: ${JSON.stringify(calls)})` })

    // the finder's dial went through the peer routing: asked for C while
    // the agent neither was connected to C nor knew an address of it, and
    // answered C's listen addresses (learned from A: the agent has no other source)
    const forC = calls.filter(x => x.peer === cPeer.toString())
    expect(forC.length).toBeGreaterThan(0)
    expect(forC[0]).toMatchObject({ connected: false, known: [] })
    const listening = c.transport.getMultiaddrs().map(bare)
    expect(listening.length).toBeGreaterThan(0)
    expect(forC.find(x => x.found != null)?.found?.map(bare)).toEqual(expect.arrayContaining(listening))

    // C, its agent and its skill are in the topology, on a connection of the agent's own
    const t = topology.snapshot()
    expect(t.nodes.map(n => n.did)).toEqual(expect.arrayContaining([did(agent), did(a), did(c)]))
    expect(t.agents.find(x => x.name === 'Pay')).toMatchObject({ node: did(c), skills: ['shop.pay'] })
    expect(t.capabilities.find(x => x.skill === 'shop.pay')?.agents).toEqual(c.interconnect.agents().map(x => x.did))
    // outbound, to a listen address of C: the agent's dial (C never dials the agent)
    const outbound = agent.transport.getConnections(cPeer).filter(x => x.direction === 'outbound')
    expect(outbound.length).toBeGreaterThan(0)
    expect(listening).toContain(bare(outbound[0].remoteAddr.toString()))
    const link = (x: string, y: string): object => x < y ? { a: x, b: y, kind: 'connection' } : { a: y, b: x, kind: 'connection' }
    expect(t.links).toContainEqual(link(agent.transport.peerId.toString(), cPeer.toString()))
  })
})
