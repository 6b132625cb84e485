/**
 * The topology a management agent builds from the snapshots it watches
 * (`spec/management.md`, "Management protocol" 6): nodes, agents,
 * capabilities, domains, gateways and links, as plain JSON values (the
 * dashboard draws them), and the events of its change stream.
 */
import type { SnapshotAgent, SnapshotPayload } from '../protocol/snapshot.js'
import type { Did } from '@ioa/interconnect'

/** A node of the topology: the content of its last verified snapshot, and when it came */
export interface TopologyNode {
  did: Did
  peer: string
  domain: string
  role: 'node' | 'agent'
  addresses: string[]
  agents: SnapshotAgent[]
  load: SnapshotPayload['load']
  tasks: SnapshotPayload['tasks']
  dht: SnapshotPayload['dht']
  /** The gateway the node runs, if any */
  gateway?: SnapshotPayload['gateway']
  /** `seq` and `time` of its last snapshot */
  seq: number
  time: number
  /** Local time the last item (snapshot or heartbeat) came, ms since the epoch */
  lastSeen: number
  /** Local time minus the node's clock at its last item, ms (positive: the node's clock is behind) */
  clockOffset: number
}

/** A link between two peers: a connection one of them reports, or a gateway and its node in the domain network */
export interface TopologyLink {
  /** Peer ids, in sorted order */
  a: string
  b: string
  kind: 'connection' | 'gateway'
}

export interface TopologyCapability {
  skill: string
  /** Agents that offer it */
  agents: Did[]
}

export interface TopologyDomain {
  name: string
  /** Nodes in the domain (their dids) */
  nodes: Did[]
  /** Of those, the nodes running a gateway of the domain */
  gateways: Did[]
}

/** The whole topology at one time: JSON-serialisable */
export interface TopologySnapshot {
  /** When it was made, ms since the epoch */
  at: number
  nodes: TopologyNode[]
  /** Every hosted agent, with the node that hosts it */
  agents: Array<SnapshotAgent & { node: Did }>
  capabilities: TopologyCapability[]
  domains: TopologyDomain[]
  gateways: Array<NonNullable<SnapshotPayload['gateway']> & { node: Did }>
  links: TopologyLink[]
}

/** A change of the topology */
export type TopologyEvent =
  | { type: 'node-added', node: TopologyNode }
  | { type: 'node-changed', node: TopologyNode }
  | { type: 'node-gone', did: Did, peer: string, reason: string }
  | { type: 'link-added', link: TopologyLink }
  | { type: 'link-removed', link: TopologyLink }

/** The node entry of a verified snapshot */
export function nodeOf (p: SnapshotPayload, now: number, lastSeen: number): TopologyNode {
  const n: TopologyNode = {
    did: p.node,
    peer: p.peer,
    domain: p.domain,
    role: p.role,
    addresses: p.addresses,
    agents: p.agents,
    load: p.load,
    tasks: p.tasks,
    dht: p.dht,
    seq: p.seq,
    time: p.time,
    lastSeen,
    clockOffset: lastSeen - now
  }
  if (p.gateway != null) n.gateway = p.gateway
  return n
}

export const linkKey = (l: TopologyLink): string => `${l.kind} ${l.a} ${l.b}`

function link (x: string, y: string, kind: TopologyLink['kind']): TopologyLink {
  return x < y ? { a: x, b: y, kind } : { a: y, b: x, kind }
}

/** The links one node's snapshot reports */
export function linksOf (p: SnapshotPayload): TopologyLink[] {
  const out = p.connections.filter(c => c.peer !== p.peer).map(c => link(p.peer, c.peer, 'connection'))
  if (p.gateway != null) out.push(link(p.peer, p.gateway.inner, 'gateway'))
  return out
}

const byString = (a: string, b: string): number => a < b ? -1 : a > b ? 1 : 0

/** Agents, capabilities, domains, gateways and links of a set of nodes */
export function assemble (nodes: TopologyNode[], links: Iterable<TopologyLink>, at: number): TopologySnapshot {
  const sorted = [...nodes].sort((x, y) => byString(x.did, y.did))
  const agents = sorted.flatMap(n => n.agents.map(a => ({ ...a, node: n.did })))
  const caps = new Map<string, Set<Did>>()
  for (const a of agents) for (const s of a.skills) caps.set(s, (caps.get(s) ?? new Set()).add(a.did))
  const domains = new Map<string, TopologyDomain>()
  for (const n of sorted) {
    const d = domains.get(n.domain) ?? { name: n.domain, nodes: [], gateways: [] }
    d.nodes.push(n.did)
    domains.set(n.domain, d)
    if (n.gateway != null) {
      const g = domains.get(n.gateway.domain) ?? { name: n.gateway.domain, nodes: [], gateways: [] }
      g.gateways.push(n.did)
      domains.set(n.gateway.domain, g)
    }
  }
  return {
    at,
    nodes: sorted,
    agents,
    capabilities: [...caps].map(([skill, set]) => ({ skill, agents: [...set].sort(byString) })).sort((x, y) => byString(x.skill, y.skill)),
    domains: [...domains.values()].sort((x, y) => byString(x.name, y.name)),
    gateways: sorted.flatMap(n => n.gateway != null ? [{ ...n.gateway, node: n.did }] : []),
    links: [...links].sort((x, y) => byString(linkKey(x), linkKey(y)))
  }
}
