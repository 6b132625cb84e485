/**
 * A node started with a management plane lists, in its signed snapshot's
 * `proofs` (spec/management.md 1.2), the delegation tokens its agents rely
 * on: the chains of their submits an executor accepted, by `node.submit`
 * and by a handler's `ctx.call` (CID, expiry, audience, issuer), merged
 * with the `heldTokens` the code gives. Over TCP between three nodes, read
 * through the management protocol with the operator's key; and the bounds
 * of the node's list (64 tokens, expired ones dropped, the soonest to
 * expire dropped first).
 */
import { delegate, tokenCid } from '@ioa/collab'
import { createIdentity } from '@ioa/interconnect'
import { ManagementCredentials, requestSnapshot } from '@ioa/management'
import { createTransportNode } from '@ioa/transport'
import { defaultLogger } from '@libp2p/logger'
import { multiaddr } from '@multiformats/multiaddr'
import { afterAll, describe, expect, it } from 'vitest'
import { LOOPBACK, rejectionOf, until } from '../../../test/util.js'
import { createIoaNode } from '../src/index.js'
import { HeldTokens, MAX_HELD_TOKENS } from '../src/held-tokens.js'
import { scratch } from './fixtures/scratch.js'
import type { SkillContext, Token } from '@ioa/collab'
import type { Identity } from '@ioa/interconnect'
import type { SnapshotProof } from '@ioa/management'
import type { IoaNode } from '../src/index.js'
import type { TransportNode } from '@ioa/transport'
import type { PrivateKey } from '@libp2p/interface'

const { nodes } = scratch('held-tokens-')
const TCP = { transports: ['tcp' as const], allow: LOOPBACK }
const HOUR = 3_600_000
const callers: TransportNode[] = []

afterAll(async () => {
  for (const c of callers.splice(0)) await c.stop()
})

/** The snapshot entry a node lists for `t` */
async function entryOf (t: Token): Promise<SnapshotProof> {
  return { cid: (await tokenCid(t)).toString(), expiresAt: t.payload.exp, audience: t.payload.aud, issuer: t.payload.iss }
}

describe('tokens of the agents\' submits in the management snapshot', () => {
  it('lists the chains of accepted submits (node.submit and ctx.call), not those refused, merged with heldTokens', async () => {
    const operator: Identity & { privateKey: PrivateKey } = await createIdentity()
    const shopNode = await createIoaNode({ transport: TCP })
    nodes.push(shopNode)
    const shop = await shopNode.host({ key: 'shop', name: 'Shop', skills: [{ id: 'shop.order' }], handlers: { 'shop.order': input => ({ ordered: input }) } })
    // the planner's node: a management plane as a config file makes it, plus a token the code holds
    const extra = await delegate(operator, { audience: operator.did, capabilities: [{ skill: 'ops.*' }], expiresAt: Date.now() + 5 * HOUR })
    const plannerNode = await createIoaNode({ transport: TCP, bootstrap: [shopNode.addresses()[0]], management: { operator: operator.did, heldTokens: () => [extra] } })
    nodes.push(plannerNode)
    const planner = await plannerNode.host({
      key: 'planner',
      name: 'Planner',
      skills: [{ id: 'trip.plan' }],
      handlers: { 'trip.plan': async (input: unknown, ctx: SkillContext) => ({ shop: await ctx.call(shop.did, 'shop.order', input) }) }
    })
    const userNode = await createIoaNode({ transport: TCP, bootstrap: [shopNode.addresses()[0]], management: { operator: operator.did } })
    nodes.push(userNode)
    const app = await userNode.host({ key: 'app', name: 'App', skills: [{ id: 'app.ui' }] })

    const caller = await createTransportNode({ ...TCP, privateKey: operator.privateKey })
    callers.push(caller)
    const credentials = new ManagementCredentials({ identity: operator })
    const proofsOf = async (n: IoaNode): Promise<SnapshotProof[] | undefined> =>
      (await requestSnapshot(caller.services.messaging, multiaddr(n.addresses()[0]), n.nodeIdentity.did, credentials)).snapshot.payload.proofs

    // nothing submitted yet: no proofs (the field is absent, never empty); the planner's node lists the code's token
    expect(await proofsOf(userNode)).toBeUndefined()
    expect(await proofsOf(plannerNode)).toEqual([await entryOf(extra)])

    const user = await createIdentity()
    const grant = await delegate(user, { audience: app.did, capabilities: [{ skill: 'trip.plan' }, { skill: 'shop.*' }], expiresAt: Date.now() + 2 * HOUR })
    const invocation = await delegate(app.identity, { audience: planner.did, capabilities: [{ skill: 'trip.plan' }, { skill: 'shop.*' }], expiresAt: Date.now() + HOUR, proofs: [grant] })
    // a chain the planner refuses (its leaf is addressed to the shop, not the planner): the app does not rely on it
    const stray = await delegate(app.identity, { audience: shop.did, capabilities: [{ skill: 'trip.plan' }], expiresAt: Date.now() + 1.5 * HOUR, proofs: [grant] })
    const refused = await rejectionOf(userNode.tasks.submitAndWait(app.identity, planner.did, { skill: 'trip.plan', input: { n: 0 }, proofs: [stray, grant] }))
    // refused by the planner's executor, after the chain verified there
    expect(refused.code).toBe('UNAUTHORIZED')
    expect(refused.message).toMatch(/not granted to the sender/)

    let done: unknown
    for await (const e of userNode.submit(app, planner.did, { skill: 'trip.plan', input: { n: 1 }, proofs: [invocation, grant] })) {
      if (e.type === 'status' && e.task.state === 'completed') done = e.task.result
    }
    expect(done).toEqual({ shop: { ordered: { n: 1 } } })

    // the user's node: the chain of its agent's submit, leaf first in it, soonest to expire first in the snapshot
    const wanted = [await entryOf(invocation), await entryOf(grant)]
    const listed = await until(async () => {
      const p = await proofsOf(userNode)
      return p?.length === 2 ? p : undefined
    }, { timeout: 10_000, what: 'the app\'s chain in the user node\'s snapshot' })
    expect(listed).toEqual(wanted)
    expect(listed).not.toContainEqual(await entryOf(stray))
    expect(userNode.heldTokens()).toEqual([invocation, grant])

    // the planner's node: the token its handler's ctx.call delegated to the shop (leaf), the task's chain behind it, and the code's token
    const planned = await until(async () => {
      const p = await proofsOf(plannerNode)
      return p != null && p.length >= 4 ? p : undefined
    }, { timeout: 10_000, what: 'the ctx.call chain in the planner node\'s snapshot' })
    const leaf = planned.find(p => p.issuer === planner.did && p.audience === shop.did)
    expect(leaf).toBeDefined()
    expect(leaf?.expiresAt).toBeLessThanOrEqual(invocation.payload.exp)
    expect(planned).toEqual(expect.arrayContaining([...wanted, await entryOf(extra)]))
    expect(planned).toHaveLength(4)
    expect(planned.map(p => p.expiresAt)).toEqual([...planned.map(p => p.expiresAt)].sort((x, y) => x - y))
  }, 90_000)
})

describe('the node\'s list of held tokens', () => {
  const silent = defaultLogger().forComponent('test:held-tokens')

  it('keeps at most 64 tokens by CID, dropping the soonest to expire first and the expired ones', async () => {
    const me = await createIdentity()
    const held = new HeldTokens(silent)
    const now = Date.now()
    const tokens: Token[] = []
    for (let i = 0; i < MAX_HELD_TOKENS + 2; i++) {
      tokens.push(await delegate(me, { audience: me.did, capabilities: [{ skill: 'x.y' }], expiresAt: now + 60_000 + i * 1_000 }))
    }
    const short = await delegate(me, { audience: me.did, capabilities: [{ skill: 'x.y' }], expiresAt: now + 400 })
    // the same token twice (and again as a copy of its own): kept once
    held.record([tokens[5], tokens[5]])
    held.record([structuredClone(tokens[5])])
    await until(() => held.list().length === 1, { what: 'one token' })
    held.record([short, ...tokens.slice().reverse()])
    const kept = await until(() => {
      const l = held.list()
      return l.length === MAX_HELD_TOKENS && !l.includes(short) ? l : undefined
    }, { what: '64 tokens' })
    // the two soonest to expire (besides `short`, gone first) were dropped; the rest are listed soonest first
    expect(kept).toEqual(tokens.slice(2))

    const small = new HeldTokens(silent, 2)
    small.record([short])
    await until(() => small.list().length === 1, { what: 'the short token' })
    await until(() => small.list().length === 0, { timeout: 5_000, what: 'the short token to expire' })
    expect(() => new HeldTokens(silent, 65)).toThrow(RangeError)
  })
})
