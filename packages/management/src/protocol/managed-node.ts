/**
 * The slice of a running node the management plane reads (an `IoaNode` of
 * `@ioa/node` has all of it), and the snapshot content built from it.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { SNAPSHOT_LIMITS, SNAPSHOT_SIG_PREFIX, SNAPSHOT_VERSION } from './snapshot.js'
import type { SnapshotConnection, SnapshotPayload, SnapshotProof } from './snapshot.js'
import type { ExecutorEvent, RevocationStore, Token } from '@ioa/collab'
import type { Did, Gateway, GatewayExportedEvent, Identity, Interconnect } from '@ioa/interconnect'
import type { TransportNode } from '@ioa/transport'
import type { ComponentLogger } from '@libp2p/interface'

/** What the management plane needs of a node */
export interface ManagedNode {
  readonly transport: TransportNode
  readonly interconnect: Pick<Interconnect, 'agents' | 'domain' | 'discoverAll'>
  /** The node key as an identity: signs the node's snapshots, and a management agent's requests */
  readonly nodeIdentity: Identity
  readonly logger: ComponentLogger
  readonly events: {
    onTask(listener: (event: ExecutorEvent) => void): () => void
    onExported(listener: (event: GatewayExportedEvent) => void): () => void
  }
  readonly gateway?: { readonly inner: { readonly peerId: { toString(): string } }, readonly gateway: Pick<Gateway, 'exported' | 'domain'>, addresses(): string[] }
  /** Revocations checked on every management chain */
  readonly revocationStore?: Pick<RevocationStore, 'isRevoked'>
  /**
   * The tokens the node's agents rely on (an IoaNode's: the chains of
   * their accepted submits), listed in the snapshot's `proofs` with the
   * protocol's `heldTokens`; read at each snapshot
   */
  heldTokens?(): readonly Token[]
}

/** Counts of served tasks, kept from the node's task events */
export class TaskCounts {
  active = 0
  completed = 0
  failed = 0
  canceled = 0
  refused = 0

  /** Count one executor event */
  count (e: ExecutorEvent): void {
    if (e.type === 'task-started') this.active++
    else if (e.type === 'task-refused') this.refused++
    else {
      this.active = Math.max(0, this.active - 1)
      if (e.type === 'task-completed') this.completed++
      else if (e.state === 'canceled') this.canceled++
      else this.failed++
    }
  }
}

function cut<T> (list: T[], max: number, truncated: { value: boolean }): T[] {
  if (list.length <= max) return list
  truncated.value = true
  return list.slice(0, max)
}

const clip = (s: string): string => s.slice(0, SNAPSHOT_LIMITS.maxString)

/** Size and non-empty buckets of kad-dht's routing table (on its implementation, not its interface) */
export function routingTableOf (transport: TransportNode): { mode: 'client' | 'server', size: number, buckets: number } {
  const dht = transport.services.dht as unknown as {
    getMode?: () => 'client' | 'server'
    routingTable?: { size?: unknown, kb?: { root?: unknown } }
  }
  const size = typeof dht.routingTable?.size === 'number' ? dht.routingTable.size : 0
  let buckets = 0
  const walk = (b: any, depth: number): void => {
    if (b == null || depth > 256) return
    if (Array.isArray(b.peers)) {
      if (b.peers.length > 0) buckets++
      return
    }
    walk(b.left, depth + 1)
    walk(b.right, depth + 1)
  }
  walk(dht.routingTable?.kb?.root, 0)
  return { mode: dht.getMode?.() === 'client' ? 'client' : 'server', size, buckets }
}

/** The content of the node's snapshot now, without `seq` and `time` (sorted, so that equal states encode equally) */
export function snapshotContent (node: ManagedNode, counts: TaskCounts, role: 'node' | 'agent', proofs: readonly SnapshotProof[] = []): Omit<SnapshotPayload, 'seq' | 'time'> {
  const L = SNAPSHOT_LIMITS
  const truncated = { value: false }
  const byKey = <T>(key: (t: T) => string) => (a: T, b: T): number => key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0
  const agents = node.interconnect.agents()
    .map(a => ({ did: a.did, name: clip(a.card.card.name), skills: cut(a.card.card.skills.map(s => s.id).sort(), L.maxSkills, truncated) }))
    .sort(byKey(a => a.did))
  const connections: SnapshotConnection[] = node.transport.getConnections()
    .filter(c => c.status === 'open')
    .map(c => ({ peer: c.remotePeer.toString(), direction: c.direction === 'inbound' ? 'inbound' as const : 'outbound' as const, addr: clip(c.remoteAddr.toString()) }))
    .sort(byKey(c => `${c.peer} ${c.addr} ${c.direction}`))
  const addresses = [...new Set(node.transport.getMultiaddrs().map(a => clip(a.toString())))].sort()
  const content: Omit<SnapshotPayload, 'seq' | 'time'> = {
    v: SNAPSHOT_VERSION,
    node: node.nodeIdentity.did,
    peer: node.transport.peerId.toString(),
    domain: clip(node.interconnect.domain),
    role,
    addresses: cut(addresses, L.maxAddresses, truncated),
    agents: cut(agents, L.maxAgents, truncated),
    connections: cut(connections, L.maxConnections, truncated),
    load: { activeTasks: counts.active },
    tasks: { completed: counts.completed, failed: counts.failed, canceled: counts.canceled, refused: counts.refused },
    dht: routingTableOf(node.transport)
  }
  const g = node.gateway
  if (g != null) {
    const exports: Did[] = [...new Set(g.gateway.exported().map(c => c.card.id))].sort()
    content.gateway = {
      domain: clip(g.gateway.domain),
      inner: g.inner.peerId.toString(),
      innerAddresses: cut([...new Set(g.addresses().map(clip))].sort(), L.maxAddresses, truncated),
      exports: cut(exports, L.maxExports, truncated)
    }
  }
  if (proofs.length > 0) {
    content.proofs = cut([...proofs].sort(byKey(p => `${String(p.expiresAt).padStart(16, '0')} ${p.cid}`)), L.maxProofs, truncated)
  }
  if (truncated.value) content.truncated = true
  return fit(content)
}

/** Room for `seq`, `time` (9 bytes each with their keys) and the prefix */
const HEADROOM = 64 + SNAPSHOT_SIG_PREFIX.length

/** Cut the longest list (connections, then agents) by half until the encoded snapshot fits `maxBytes` */
function fit (content: Omit<SnapshotPayload, 'seq' | 'time'>): Omit<SnapshotPayload, 'seq' | 'time'> {
  const max = SNAPSHOT_LIMITS.maxBytes - HEADROOM
  while (dagCbor.encode(content).byteLength > max && (content.connections.length > 0 || content.agents.length > 0)) {
    if (content.connections.length >= content.agents.length) content.connections = content.connections.slice(0, Math.floor(content.connections.length / 2))
    else content.agents = content.agents.slice(0, Math.floor(content.agents.length / 2))
    content.truncated = true
  }
  return content
}
