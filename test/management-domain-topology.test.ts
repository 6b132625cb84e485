/**
 * A management agent's topology covers its whole domain, not only the
 * nodes it is connected to (spec/management.md, "Management protocol" 6):
 * four nodes over TCP, one of them (C) reachable only through another
 * node's connection to it (A dialled C; C and the agent are DHT clients,
 * so no routing table lists either and no DHT query makes them meet). The agent finds
 * C in A's snapshot, dials it and watches it: C, its agent and its links
 * are in the topology.
 */
import { delegate } from '@ioa/collab'
import { createIdentity } from '@ioa/interconnect'
import { createManagement } from '@ioa/management'
import { createIoaNode } from '@ioa/node'
import { multiaddr } from '@multiformats/multiaddr'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { ManagementLayer, Topology } from '@ioa/management'
import type { IoaNode } from '@ioa/node'

const TCP = { transports: ['tcp' as const], allow: ['/ip4/127.0.0.1'] }
const FAST = { minInterval: 50, pollInterval: 100 }
const HOUR = 3_600_000

let agent: IoaNode
let topology: Topology
const nodes: Record<'a' | 'b' | 'c', IoaNode> = {} as any

async function until (what: string, check: () => boolean, ms = 45_000): Promise<void> {
  const end = Date.now() + ms
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(topology.snapshot().nodes.map(n => n.did))}`)
    await new Promise(resolve => setTimeout(resolve, 50))
  }
}

beforeAll(async () => {
  const operator = await createIdentity()
  const agentKey = await createIdentity()
  const grant = await delegate(operator, { audience: agentKey.did, capabilities: [{ skill: 'ioa.manage.*' }], expiresAt: Date.now() + HOUR })
  const managed = (): ReturnType<typeof createManagement> => createManagement({ operator: operator.did, ...FAST })
  // C first: a DHT client that knows no one, so only A's own dial connects it to the domain
  nodes.c = await createIoaNode({ domain: 'acme', transport: { ...TCP, dhtClientMode: true }, layers: [managed()] })
  await nodes.c.host({ key: 'pay', name: 'Pay', skills: [{ id: 'shop.pay', name: 'Pay' }] })
  agent = await createIoaNode({
    domain: 'acme',
    // a DHT client too: no routing table lists the agent, so C's own DHT queries never dial it
    transport: { ...TCP, privateKey: agentKey.privateKey, dhtClientMode: true },
    layers: [createManagement({ operator: operator.did, role: 'agent', ...FAST, topology: { proofs: [grant], heartbeat: 300, retryDelay: 200, rescanInterval: 300 } })]
  })
  topology = agent.layer<ManagementLayer>('management')?.topology as Topology
  nodes.a = await createIoaNode({ domain: 'acme', transport: TCP, bootstrap: [agent.addresses()[0]], layers: [managed()] })
  nodes.b = await createIoaNode({ domain: 'acme', transport: TCP, bootstrap: [nodes.a.addresses()[0]], layers: [managed()] })
  await nodes.a.host({ key: 'maps', name: 'Maps', skills: [{ id: 'travel.route', name: 'Route' }] })
})

afterAll(async () => {
  for (const n of Object.values(nodes)) await n?.stop()
  await agent?.stop()
})

describe('management agent topology of the whole domain', () => {
  it('watches a node it was not connected to, found through another node\'s snapshot', async () => {
    const did = (n: IoaNode): string => n.nodeIdentity.did
    const peer = (n: IoaNode): string => n.transport.peerId.toString()
    await until('A and B', () => [nodes.a, nodes.b].every(n => topology.snapshot().nodes.some(x => x.did === did(n))))
    // C is connected to nothing yet: the agent cannot know it
    expect(nodes.c.transport.getConnections()).toHaveLength(0)
    expect(topology.snapshot().nodes.map(n => n.did)).not.toContain(did(nodes.c))
    await nodes.a.transport.dial(multiaddr(nodes.c.addresses()[0]))

    await until('C', () => topology.snapshot().nodes.some(x => x.did === did(nodes.c)))
    const t = topology.snapshot()
    expect(t.nodes.map(n => n.did)).toEqual(expect.arrayContaining([did(agent), did(nodes.a), did(nodes.b), did(nodes.c)]))
    expect(t.domains.find(d => d.name === 'acme')?.nodes).toHaveLength(4)
    expect(t.agents.find(a => a.name === 'Pay')).toMatchObject({ node: did(nodes.c), skills: ['shop.pay'] })
    expect(t.capabilities.find(c => c.skill === 'shop.pay')?.agents).toEqual(nodes.c.interconnect.agents().map(a => a.did))
    const link = (x: string, y: string): object => x < y ? { a: x, b: y, kind: 'connection' } : { a: y, b: x, kind: 'connection' }
    expect(t.links).toContainEqual(link(peer(nodes.a), peer(nodes.c)))
    // the agent reached C itself, on a connection of its own
    expect(t.links).toContainEqual(link(peer(agent), peer(nodes.c)))
  })
})
