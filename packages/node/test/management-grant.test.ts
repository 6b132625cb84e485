/**
 * A management agent configured from a config file's `management` section
 * (spec/management.md 1.7): its grant (`management.proofs`, the operator's
 * token to the node's key) reaches its topology, which then watches a node
 * of the operator over TCP; a grant addressed to another key fails the
 * node's start with `InvalidGrantError`.
 */
import { delegate } from '@ioa/collab'
import { encodeToken } from '@ioa/collab/wire'
import { createIdentity } from '@ioa/interconnect'
import { afterAll, describe, expect, it } from 'vitest'
import { until } from '../../../test/util.js'
import { createIoaNode, initFromConfig, parseConfig } from '../src/index.js'
import type { IoaNode } from '../src/index.js'

const TCP = { transports: ['tcp' as const], allow: ['/ip4/127.0.0.1'] }
const HOUR = 3_600_000
const nodes: IoaNode[] = []

afterAll(async () => {
  for (const n of nodes.reverse()) await n.stop()
})

const text = (t: Parameters<typeof encodeToken>[0]): string => Buffer.from(encodeToken(t)).toString('base64url')

describe('a management agent from the config', () => {
  it('watches a node of the operator over TCP with the grant of management.proofs', async () => {
    const operator = await createIdentity()
    const agentKey = await createIdentity()
    const grant = await delegate(operator, { audience: agentKey.did, capabilities: [{ skill: 'ioa.manage.*' }], expiresAt: Date.now() + HOUR })
    const watched = await createIoaNode({ domain: 'acme', transport: TCP, management: { operator: operator.did } })
    nodes.push(watched)
    const init = initFromConfig(parseConfig({ domain: 'acme', bootstrap: [watched.addresses()[0]], management: { role: 'agent', operator: operator.did, proofs: [text(grant)] } }))
    const agent = await createIoaNode({ ...init, transport: { ...init.transport, ...TCP, privateKey: agentKey.privateKey } })
    nodes.push(agent)
    const topology = agent.management?.plane?.topology
    expect(topology).toBeDefined()
    await until(() => topology?.snapshot().nodes.some(n => n.did === watched.nodeIdentity.did), { timeout: 45_000, what: 'the watched node in the agent\'s topology' })
    expect(topology?.snapshot().nodes.find(n => n.did === watched.nodeIdentity.did)?.domain).toBe('acme')
  }, 60_000)

  it('refuses a grant addressed to another key, or not granting ioa.manage.watch, at start (InvalidGrantError)', async () => {
    const operator = await createIdentity()
    const other = await createIdentity()
    const toOther = await delegate(operator, { audience: other.did, capabilities: [{ skill: 'ioa.manage.*' }], expiresAt: Date.now() + HOUR })
    const failed = await createIoaNode({ transport: TCP, management: { role: 'agent', operator: operator.did, proofs: [toOther] } }).then(n => { nodes.push(n); return undefined }, (err: unknown) => err)
    expect(failed).toMatchObject({ name: 'InvalidGrantError', code: 'INVALID_GRANT', message: expect.stringContaining(other.did) })
    const agentKey = await createIdentity()
    const snapshotOnly = await delegate(operator, { audience: agentKey.did, capabilities: [{ skill: 'ioa.manage.snapshot' }], expiresAt: Date.now() + HOUR })
    const narrow = await createIoaNode({ transport: { ...TCP, privateKey: agentKey.privateKey }, management: { role: 'agent', operator: operator.did, proofs: [snapshotOnly] } }).then(n => { nodes.push(n); return undefined }, (err: unknown) => err)
    expect(narrow).toMatchObject({ name: 'InvalidGrantError', message: expect.stringContaining('ioa.manage.watch') })
  }, 60_000)
})
