/**
 * `ctx.call` of a JS skill handler (issue 11 item 7), over TCP between three
 * nodes: a planner agent calls a shop on behalf of its task, under a token
 * narrowed from the task's chain, found by discovery or named; a chain not
 * addressed to the planner, or constraints wider than the chain's, are
 * refused with UNAUTHORIZED.
 */
import { delegate } from '@ioa/collab'
import { createIdentity } from '@ioa/interconnect'
import { describe, expect, it } from 'vitest'
import { rejectionOf, until } from '../../../test/util.js'
import { createIoaNode } from '../src/index.js'
import type { NodeTaskEvent } from '../src/index.js'
import type { SkillContext } from '@ioa/collab'
import { scratch } from './fixtures/scratch.js'

const { nodes } = scratch('handler-call-')

describe('ctx.call over TCP', () => {
  it('a handler calls another agent on behalf of its task, under a narrowed delegation', async () => {
    const shopNode = await createIoaNode()
    nodes.push(shopNode)
    const shopEvents: NodeTaskEvent[] = []
    shopNode.events.onTask(e => { shopEvents.push(e) })
    const shop = await shopNode.host({
      key: 'shop',
      name: 'Shop',
      skills: [{ id: 'shop.order' }],
      handlers: { 'shop.order': (input, ctx) => ({ ordered: input, capability: ctx.capability, root: ctx.chain.root, caller: ctx.caller }) }
    })
    const plannerNode = await createIoaNode({ bootstrap: [shopNode.addresses()[0]] })
    nodes.push(plannerNode)
    const planner = await plannerNode.host({
      key: 'planner',
      name: 'Planner',
      skills: [{ id: 'trip.plan' }],
      handlers: {
        'trip.plan': async (input: unknown, ctx: SkillContext) => {
          const { amount, to, constraints } = input as { amount: number, to?: string, constraints?: Record<string, unknown> }
          return { shop: await ctx.call(to, 'shop.order', { amount }, constraints != null ? { constraints } : {}) }
        }
      }
    })
    await until(async () => {
      const found = await plannerNode.discover({ capability: 'shop.order' }, { cache: false, timeout: 3_000 })
      return found.length > 0 || undefined
    }, { timeout: 30_000, what: 'the shop discovered' })

    const userNode = await createIoaNode({ bootstrap: [shopNode.addresses()[0]] })
    nodes.push(userNode)
    const app = await userNode.host({ key: 'app', name: 'App', skills: [{ id: 'app.ui' }] })
    const user = await createIdentity()
    const grant = await delegate(user, { audience: app.did, capabilities: [{ skill: 'trip.plan' }, { skill: 'shop.*', constraints: { maxAmount: 300 } }], expiresAt: Date.now() + 120_000 })
    // the app hands the task to the planner with an invocation token: the planner is the chain's audience
    const invocation = await delegate(app.identity, { audience: planner.did, capabilities: [{ skill: 'trip.plan' }, { skill: 'shop.*', constraints: { maxAmount: 200 } }], expiresAt: grant.payload.exp, proofs: [grant] })
    const plan = async (input: unknown, proofs = [invocation, grant]): Promise<any> =>
      await userNode.tasks.submitAndWait(app.identity, planner.did, { skill: 'trip.plan', input, proofs })

    // found by discovery; the shop sees the planner as caller, the user as root, the chain's constraint for the skill
    const found = await plan({ amount: 120 })
    expect(found.result.shop).toEqual({
      ordered: { amount: 120 }, capability: { skill: 'shop.order', constraints: { maxAmount: 200 } }, root: user.did, caller: planner.did
    })
    // named, with tighter constraints
    const named = await plan({ amount: 50, to: shop.did, constraints: { maxAmount: 60 } })
    expect(named.result.shop.capability).toEqual({ skill: 'shop.order', constraints: { maxAmount: 60 } })
    expect(shopEvents.filter(e => e.type === 'task-completed' && e.caller === planner.did)).toHaveLength(2)

    // wider than the chain: refused before anything is sent
    const wider = await rejectionOf(plan({ amount: 50, to: shop.did, constraints: { maxAmount: 1_000 } }))
    expect(wider.code).toBe('UNAUTHORIZED')
    expect(wider.message).toMatch(/wider/)
    // a chain addressed to the app, not the planner: the planner cannot hand it on
    const appOnly = await rejectionOf(plan({ amount: 50, to: shop.did }, [grant]))
    expect(appOnly.code).toBe('UNAUTHORIZED')
    expect(appOnly.message).toMatch(/cannot delegate further/)
    expect(shopEvents.filter(e => e.type === 'task-started')).toHaveLength(2)
  }, 90_000)
})
