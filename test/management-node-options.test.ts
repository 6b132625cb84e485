/**
 * A node configured with `management.operator` (no layer given in code)
 * serves the management protocol to its operator over TCP, and one with
 * `management.role: 'agent'` runs a topology; a node without either serves
 * no management protocol.
 */
import { createIdentity } from '@ioa/interconnect'
import { ManagementCredentials, requestSnapshot, MANAGEMENT_PROTOCOL } from '@ioa/management'
import { createIoaNode } from '@ioa/node'
import { createTransportNode } from '@ioa/transport'
import { multiaddr } from '@multiformats/multiaddr'
import { afterEach, describe, expect, it } from 'vitest'
import type { IoaNode } from '@ioa/node'
import type { TransportNode } from '@ioa/transport'

const running: Array<IoaNode | TransportNode> = []
afterEach(async () => { for (const n of running.splice(0)) await n.stop() })

describe('management from the node options', () => {
  it('management.operator serves /ioa/manage/1.0.0 to the operator; role agent adds a topology', async () => {
    const operator = await createIdentity()
    const node = await createIoaNode({ transport: { transports: ['tcp'] }, management: { operator: operator.did, role: 'agent' } })
    running.push(node)
    expect(node.transport.getProtocols()).toContain(MANAGEMENT_PROTOCOL)
    expect(node.management?.plane?.topology).toBeDefined()
    const caller = await createTransportNode({ transports: ['tcp'], privateKey: operator.privateKey })
    running.push(caller)
    const got = await requestSnapshot(caller.services.messaging, multiaddr(node.addresses()[0]), node.nodeIdentity.did, new ManagementCredentials({ identity: operator }))
    expect(got.snapshot.payload.node).toBe(node.nodeIdentity.did)
  })

  it('a management section with only metrics serves no management protocol', async () => {
    const node = await createIoaNode({ transport: { transports: ['tcp'] }, management: {} })
    running.push(node)
    expect(node.transport.getProtocols()).not.toContain(MANAGEMENT_PROTOCOL)
    expect(node.management?.plane).toBeUndefined()
  })
})
