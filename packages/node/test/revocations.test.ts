/**
 * The node's revocation store knows the node's trusted roots (`tasks.roots`)
 * and its hosted agents: over TCP, while untrusted issuers hold the whole
 * untrusted quota, a root's or a hosted agent's revocation is still accepted
 * (issue 9, item 3b).
 */
import { createRevocation, delegate, tokenCid } from '@ioa/collab'
import { ANNOUNCE_METHOD, REVOCATION_PROTOCOL, encodeRevocation } from '@ioa/collab/wire'
import { createIdentity } from '@ioa/interconnect'
import { afterEach, describe, expect, it } from 'vitest'
import { rejectionOf, until } from '../../../test/util.js'
import { createIoaNode } from '../src/index.js'
import type { IoaNode } from '../src/index.js'
import type { Revocation, Token } from '@ioa/collab'
import type { Identity } from '@ioa/interconnect'

const nodes: IoaNode[] = []

afterEach(async () => {
  for (const n of nodes.splice(0).reverse()) await n.stop().catch(() => {})
})

const HOUR = 3_600_000

async function tokenOf (issuer: Identity): Promise<Token> {
  return delegate(issuer, { audience: (await createIdentity()).did, capabilities: [{ skill: 'travel.*' }], expiresAt: Date.now() + HOUR })
}

describe('the node\'s revocation store', () => {
  it('gives the node\'s trusted roots priority: a root\'s revocation is accepted while an untrusted flood is at quota', async () => {
    const root = await createIdentity()
    const a = await createIoaNode({ tasks: { roots: [root.did], clockSkew: 45_000 }, revocations: { maxRecords: 3 } })
    nodes.push(a)
    const b = await createIoaNode({ bootstrap: [a.addresses()[0]] })
    nodes.push(b)
    await until(() => a.transport.getPeers().some(p => p.equals(b.transport.peerId)), { timeout: 20_000, what: 'b connected to a' })
    expect(a.revocationStore.limits.clockSkew).toBe(45_000)

    const announce = async (rev: Revocation): Promise<unknown> =>
      b.transport.services.messaging.request(a.transport.peerId, REVOCATION_PROTOCOL, ANNOUNCE_METHOD, encodeRevocation(rev))

    // fresh identities fill a's room for untrusted issuers
    for (let i = 0; i < 3; i++) {
      const someone = await createIdentity()
      expect(await announce(await createRevocation(someone, await tokenOf(someone)))).toEqual({ new: true })
    }
    const someone = await createIdentity()
    const over = await rejectionOf(announce(await createRevocation(someone, await tokenOf(someone))))
    expect(over.code).toBe('REVOCATION_QUOTA')
    expect(a.revocationStore.limits.counts).toEqual({ trusted: 0, untrusted: 3 })

    // the root's revocation still gets in, and the token is refused from then on
    const token = await tokenOf(root)
    expect(await announce(await createRevocation(root, token))).toEqual({ new: true })
    expect(a.revocationStore.limits.counts).toEqual({ trusted: 1, untrusted: 3 })
    expect(a.revocationStore.isRevoked((await tokenCid(token)).toString(), [root.did])).toBe(true)
  }, 60_000)

  it('gives the agents it hosts priority too: with no roots and the untrusted quota full, node.revoke still works', async () => {
    const a = await createIoaNode({ revocations: { maxRecords: 2 } })
    nodes.push(a)
    const b = await createIoaNode({ bootstrap: [a.addresses()[0]] })
    nodes.push(b)
    await until(() => a.transport.getPeers().some(p => p.equals(b.transport.peerId)), { timeout: 20_000, what: 'b connected to a' })
    const car = await a.host({ key: 'car', name: 'Car', skills: [{ id: 'vehicle.assistant' }] })

    for (let i = 0; i < 2; i++) {
      const someone = await createIdentity()
      expect(await b.revocations.publish(await createRevocation(someone, await tokenOf(someone)))).toMatchObject({ delivered: 1 })
    }
    await until(() => a.revocationStore.limits.counts.untrusted === 2, { timeout: 10_000, what: 'a holds the flood' })

    const sub = await a.delegate(car, { audience: (await createIdentity()).did, capabilities: [{ skill: 'travel.*' }], expiresAt: Date.now() + HOUR })
    await a.revoke(car, sub)
    const cid = (await tokenCid(sub)).toString()
    expect(a.revocationStore.isRevoked(cid, [car.did])).toBe(true)
    expect(a.revocationStore.limits.counts).toEqual({ trusted: 1, untrusted: 2 })
    // and it reached b
    await until(() => b.revocationStore.isRevoked(cid, [car.did]), { timeout: 10_000, what: 'b has the car\'s revocation' })
  }, 60_000)
})
