/**
 * The management plane as a layer of a node (an `IoaLayer` of `@ioa/node`):
 * it serves `/ioa/manage/1.0.0` and, with `role: 'agent'`, runs the
 * topology of the nodes it watches.
 */
import { ManagementProtocol } from './protocol/service.js'
import { createTopology } from './topology/topology.js'
import type { ManagedNode } from './protocol/managed-node.js'
import type { ManagementProtocolInit } from './protocol/service.js'
import type { Topology, TopologyInit } from './topology/topology.js'

export interface ManagementLayerInit extends ManagementProtocolInit {
  /**
   * The name of the layer on its node
   *
   * @default 'management'
   */
  name?: string
  /**
   * With `role: 'agent'`: the topology's options (the operator's grant to
   * this node, heartbeat, domains, limits)
   *
   * @default {}
   */
  topology?: TopologyInit
}

/** The management plane of one node */
export interface ManagementLayer {
  readonly name: string
  /** The protocol served, once started */
  readonly protocol?: ManagementProtocol
  /** With `role: 'agent'`, once started: the topology of the nodes it watches */
  readonly topology?: Topology
  start(node: ManagedNode): Promise<void>
  stop(): Promise<void>
}

class DefaultManagementLayer implements ManagementLayer {
  readonly name: string
  protocol?: ManagementProtocol
  topology?: Topology

  constructor (private readonly init: ManagementLayerInit) {
    this.name = init.name ?? 'management'
  }

  async start (node: ManagedNode): Promise<void> {
    const { name: _, topology, ...init } = this.init
    // the agent's grant is a token the node holds: its expiry goes into the snapshot
    const grant = topology?.proofs ?? []
    const held = init.heldTokens
    const protocol = new ManagementProtocol(node, {
      ...init,
      ...(grant.length > 0 || held != null ? { heldTokens: () => [...grant, ...(held?.() ?? [])] } : {})
    })
    await protocol.start()
    this.protocol = protocol
    if (init.role === 'agent') {
      this.topology = createTopology(node, topology, async () => protocol.snapshot())
      await this.topology.start()
    }
  }

  async stop (): Promise<void> {
    await this.topology?.stop()
    await this.protocol?.stop()
  }
}

/** The management plane as a node layer: `createIoaNode({ layers: [createManagement({ operator })] })` */
export function createManagement (init: ManagementLayerInit = {}): ManagementLayer {
  return new DefaultManagementLayer(init)
}
