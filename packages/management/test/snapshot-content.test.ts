/**
 * A node's snapshot content stays within the limits of spec/management.md
 * 1.7 whatever the node holds: lists are cut (and `truncated` set) so that
 * the signed snapshot is one a receiver accepts.
 */
import { createIdentity } from '@ioa/interconnect'
import { describe, expect, it } from 'vitest'
import { SNAPSHOT_LIMITS, signSnapshot, snapshotSigningBytes, verifySnapshot } from '../src/index.js'
import { TaskCounts, snapshotContent } from '../src/protocol/managed-node.js'
import type { ManagedNode } from '../src/index.js'

describe('snapshot content', () => {
  it('a node with more agents, skills and connections than a snapshot holds signs one that fits and verifies', async () => {
    const identity = await createIdentity()
    const others = await Promise.all(Array.from({ length: 4 }, async () => createIdentity()))
    const long = (i: number): string => `skill${i}.${'x'.repeat(60)}`
    const agents = Array.from({ length: 300 }, (_, i) => ({
      did: others[i % others.length].did,
      card: { card: { name: 'n'.repeat(600), skills: Array.from({ length: 40 }, (_, j) => ({ id: long(j) })) } }
    }))
    const connections = Array.from({ length: 700 }, (_, i) => ({
      status: 'open', direction: i % 2 === 0 ? 'inbound' : 'outbound',
      remotePeer: { toString: () => `12D3KooWpeer${i}` },
      remoteAddr: { toString: () => `/ip4/10.0.${i >> 8}.${i & 255}/tcp/4001/${'p'.repeat(400)}` }
    }))
    const node = {
      nodeIdentity: identity,
      interconnect: { agents: () => agents, domain: 'acme' },
      transport: { getConnections: () => connections, getMultiaddrs: () => [], peerId: { toString: () => '12D3KooWself' }, services: { dht: {} } }
    } as unknown as ManagedNode
    const content = snapshotContent(node, new TaskCounts(), 'node')
    expect(content.truncated).toBe(true)
    expect(content.agents.length).toBeLessThanOrEqual(SNAPSHOT_LIMITS.maxAgents)
    expect(content.connections.length).toBeLessThanOrEqual(SNAPSHOT_LIMITS.maxConnections)
    expect(content.agents.every(a => a.name.length <= SNAPSHOT_LIMITS.maxString && a.skills.length <= SNAPSHOT_LIMITS.maxSkills)).toBe(true)
    const signed = await signSnapshot(identity, { ...content, seq: 1, time: Date.now() })
    expect(snapshotSigningBytes(signed.payload).byteLength).toBeLessThanOrEqual(SNAPSHOT_LIMITS.maxBytes)
    await expect(verifySnapshot(signed, { node: identity.did })).resolves.toMatchObject({ payload: { truncated: true } })
  })
})
