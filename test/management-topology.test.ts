/**
 * A management agent's topology over TCP (spec/management.md, "Management
 * protocol" 6): it watches the nodes of its domain it is connected to (three
 * nodes, one of them a domain gateway), shows them with their agents,
 * capabilities, the domain, the gateway and its link, as a JSON value and
 * as events; a node that stops disappears.
 */
import { delegate } from '@ioa/collab'
import { createIdentity } from '@ioa/interconnect'
import { createManagement } from '@ioa/management'
import { createIoaNode } from '@ioa/node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Identity } from '@ioa/interconnect'
import type { ManagementLayer, Topology, TopologyEvent, TopologySnapshot } from '@ioa/management'
import type { IoaNode } from '@ioa/node'
import type { PrivateKey } from '@libp2p/interface'

const TCP = { transports: ['tcp' as const], allow: ['/ip4/127.0.0.1'] }
const FAST = { minInterval: 50, pollInterval: 100 }
const HOUR = 3_600_000

let operator: Identity & { privateKey: PrivateKey }
let agent: IoaNode
let topology: Topology
const nodes: Record<'a' | 'b' | 'g', IoaNode> = {} as any
const stopped = new Set<IoaNode>()

async function until (what: string, check: () => boolean, ms = 30_000): Promise<void> {
  const end = Date.now() + ms
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(topology.snapshot().nodes.map(n => n.did))}`)
    await new Promise(resolve => setTimeout(resolve, 50))
  }
}

beforeAll(async () => {
  operator = await createIdentity()
  const agentKey = await createIdentity()
  const grant = await delegate(operator, { audience: agentKey.did, capabilities: [{ skill: 'ioa.manage.*' }], expiresAt: Date.now() + HOUR })
  agent = await createIoaNode({
    domain: 'acme',
    transport: { ...TCP, privateKey: agentKey.privateKey },
    layers: [createManagement({ operator: operator.did, role: 'agent', ...FAST, topology: { proofs: [grant], heartbeat: 300, retryDelay: 200, rescanInterval: 300 } })]
  })
  topology = agent.layer<ManagementLayer>('management')?.topology as Topology
  const join = { domain: 'acme', transport: TCP, bootstrap: [agent.addresses()[0]] }
  nodes.a = await createIoaNode({ ...join, layers: [createManagement({ operator: operator.did, ...FAST })] })
  nodes.b = await createIoaNode({ ...join, layers: [createManagement({ operator: operator.did, ...FAST })] })
  nodes.g = await createIoaNode({ ...join, gateway: { exports: [{ skill: 'shop.*' }] }, layers: [createManagement({ operator: operator.did, ...FAST })] })
  await nodes.a.host({ key: 'maps', name: 'Maps', skills: [{ id: 'travel.route', name: 'Route' }] })
  await nodes.b.host({ key: 'hotel', name: 'Hotel', skills: [{ id: 'travel.hotel', name: 'Hotel' }] })
})

afterAll(async () => {
  for (const n of Object.values(nodes)) if (!stopped.has(n)) await n.stop()
  await agent?.stop()
})

describe('management agent topology', () => {
  it('shows three nodes of the domain with their agents and capabilities, the gateway and its link; a stopped node disappears', async () => {
    expect(topology).toBeDefined()
    const did = (n: IoaNode): string => n.nodeIdentity.did
    await until('the three nodes and their agents', () => {
      const t = topology.snapshot()
      return [nodes.a, nodes.b, nodes.g].every(n => t.nodes.some(x => x.did === did(n))) &&
        t.agents.length >= 2 && t.gateways.length === 1
    })
    const t: TopologySnapshot = JSON.parse(JSON.stringify(topology.snapshot()))
    // the agent itself is a node of the topology, with role agent
    expect(t.nodes.find(n => n.did === did(agent))?.role).toBe('agent')
    const acme = t.domains.find(d => d.name === 'acme')
    expect(acme?.nodes).toEqual(expect.arrayContaining([did(nodes.a), did(nodes.b), did(nodes.g)]))
    expect(acme?.gateways).toEqual([did(nodes.g)])
    const g = t.gateways[0]
    expect(g.node).toBe(did(nodes.g))
    expect(g.inner).toBe(nodes.g.gateway?.inner.peerId.toString())
    const peer = (n: IoaNode): string => n.transport.peerId.toString()
    const link = (x: string, y: string, kind: string): object => x < y ? { a: x, b: y, kind } : { a: y, b: x, kind }
    expect(t.links).toContainEqual(link(peer(nodes.g), g.inner, 'gateway'))
    expect(t.links).toContainEqual(link(peer(agent), peer(nodes.a), 'connection'))
    expect(t.agents.find(a => a.name === 'Maps')).toMatchObject({ node: did(nodes.a), skills: ['travel.route'] })
    expect(t.capabilities.find(c => c.skill === 'travel.hotel')?.agents).toEqual(nodes.b.interconnect.agents().map(a => a.did))

    // a node that stops is gone, with its links
    const controller = new AbortController()
    const events: TopologyEvent[] = []
    const bLink = link(peer(agent), peer(nodes.b), 'connection')
    const reading = (async () => {
      for await (const e of topology.events({ signal: controller.signal })) {
        events.push(e)
        // the link goes when the last node that reports it (the agent itself, A) sees the connection closed
        if (events.some(e => e.type === 'node-gone' && e.did === did(nodes.b)) &&
          events.some(e => e.type === 'link-removed' && JSON.stringify(e.link) === JSON.stringify(bLink))) break
      }
    })()
    stopped.add(nodes.b)
    await nodes.b.stop()
    await reading
    controller.abort()
    expect(events.find(e => e.type === 'node-gone')).toMatchObject({ type: 'node-gone', did: did(nodes.b), peer: peer(nodes.b) })
    expect(events).toContainEqual({ type: 'link-removed', link: bLink })
    const after = topology.snapshot()
    expect(after.nodes.map(n => n.did)).not.toContain(did(nodes.b))
    expect(after.agents.map(a => a.name)).not.toContain('Hotel')
    expect(after.nodes.map(n => n.did)).toContain(did(nodes.a))
  })
})
