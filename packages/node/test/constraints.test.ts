/**
 * `tasks.enforceConstraints` per skill, with `ignore` from the config (issue
 * 11 item 9), over TCP: a capped `shop.*` grant checks the amount of
 * `shop.order` and leaves `shop.catalog`, which takes no amount, alone.
 */
import { constraintPolicy, delegate } from '@ioa/collab'
import { createIdentity } from '@ioa/interconnect'
import { describe, expect, it } from 'vitest'
import { errorOf, rejectionOf } from '../../../test/util.js'
import { createIoaNode, initFromConfig, parseConfig } from '../src/index.js'
import { scratch } from './fixtures/scratch.js'

const { nodes } = scratch('constraints-')

describe('enforceConstraints per skill', () => {
  it('checks the skills it names, skips the keys it ignores, and refuses a bad pattern naming the field', async () => {
    const shopNode = await createIoaNode(initFromConfig(parseConfig({
      tasks: { enforceConstraints: { skills: ['shop.order'], ignore: ['region'] } }
    })))
    nodes.push(shopNode)
    const shop = await shopNode.host({
      key: 'shop',
      name: 'Shop',
      skills: [{ id: 'shop.order' }, { id: 'shop.catalog' }],
      handlers: {
        'shop.order': (input) => ({ ordered: (input as { amount: number }).amount }),
        'shop.catalog': () => ({ items: ['tea'] })
      }
    })
    const client = await createIoaNode({ bootstrap: [shopNode.addresses()[0]] })
    nodes.push(client)
    const buyer = await client.host({ key: 'buyer', name: 'Buyer', skills: [{ id: 'shop.buyer' }] })
    const user = await createIdentity()
    const grant = await delegate(user, { audience: buyer.did, capabilities: [{ skill: 'shop.*', constraints: { maxAmount: 500, region: 'eu' } }], expiresAt: Date.now() + 60_000 })
    const run = async (skill: string, input: unknown): Promise<unknown> =>
      (await client.tasks.submitAndWait(buyer.identity, shop.did, { skill, input, proofs: [grant] })).result

    // the sibling skill that takes no amount runs
    expect(await run('shop.catalog', { query: 'tea' })).toEqual({ items: ['tea'] })
    // the named skill is checked, without the ignored key
    expect(await run('shop.order', { amount: 100 })).toEqual({ ordered: 100 })
    const over = await rejectionOf(run('shop.order', { amount: 800 }))
    expect(over.code).toBe('POLICY_DENIED')
    expect(over.message).toMatch(/input\.amount=800 exceeds maxAmount=500/)

    // `true` still checks every skill
    expect(initFromConfig(parseConfig({ tasks: { enforceConstraints: true } })).tasks?.policy).toBeDefined()
    const bad = errorOf(() => parseConfig({ tasks: { enforceConstraints: { skills: ['Shop Order'] } } }))
    expect(bad.name).toBe('ConfigError')
    expect(bad.field).toMatch(/^tasks\.enforceConstraints/)
    expect(errorOf(() => constraintPolicy({ skills: ['not a pattern'] })).name).toBe('RangeError')
  }, 60_000)
})
