/**
 * `tasks.requireEnvelope` and `tasks.auth` from the config (spec/collab-tasks.md
 * 2.6), over TCP between two nodes: a skill the executor's config requires
 * envelope mode for still completes (the requester's signed retry), another
 * runs in session mode, and `auth: 'envelope'` reaches the task service.
 */
import { delegate } from '@ioa/collab'
import { createIdentity } from '@ioa/interconnect'
import { describe, expect, it } from 'vitest'
import { errorOf } from '../../../test/util.js'
import { createIoaNode, initFromConfig, parseConfig } from '../src/index.js'
import { scratch } from './fixtures/scratch.js'

const { nodes } = scratch('session-config-')

describe('tasks.requireEnvelope and tasks.auth', () => {
  it('refuses unsigned requests for the skills named, which the requester then signs; other skills run unsigned', async () => {
    const refused: string[] = []
    const base = initFromConfig(parseConfig({ tasks: { requireEnvelope: ['payment.*'] } }))
    const bankNode = await createIoaNode({
      ...base,
      tasks: { ...base.tasks, onEvent: e => { if (e.type === 'task-refused') refused.push(e.code) } }
    })
    nodes.push(bankNode)
    const bank = await bankNode.host({
      key: 'bank',
      name: 'Bank',
      skills: [{ id: 'payment.pay' }, { id: 'bank.rates' }],
      handlers: { 'payment.pay': (input) => ({ paid: (input as { amount: number }).amount }), 'bank.rates': () => ({ eur: 1 }) }
    })
    const client = await createIoaNode({ bootstrap: [bankNode.addresses()[0]] })
    nodes.push(client)
    const buyer = await client.host({ key: 'buyer', name: 'Buyer', skills: [{ id: 'shop.buyer' }] })
    const user = await createIdentity()
    const grant = await delegate(user, { audience: buyer.did, capabilities: [{ skill: 'payment.*' }, { skill: 'bank.*' }], expiresAt: Date.now() + 60_000 })
    const run = async (skill: string, input: unknown): Promise<unknown> =>
      (await client.tasks.submitAndWait(buyer.identity, bank.did, { skill, input, proofs: [grant] })).result
    expect(await run('bank.rates', null)).toEqual({ eur: 1 })
    expect(await run('payment.pay', { amount: 12 })).toEqual({ paid: 12 })
    expect(await run('payment.pay', { amount: 13 })).toEqual({ paid: 13 })
    // refused once unsigned, then signed (the second payment went signed at once)
    expect(refused).toEqual(['ENVELOPE_REQUIRED'])

    const init = initFromConfig(parseConfig({ tasks: { auth: 'envelope', requireEnvelope: ['payment.pay'] } }))
    expect(init.tasks?.auth).toBe('envelope')
    expect(init.tasks?.session?.requireEnvelope).toEqual(['payment.pay'])
    expect(errorOf(() => parseConfig({ tasks: { auth: 'none' } })).name).toBe('ConfigError')
    expect(errorOf(() => parseConfig({ tasks: { requireEnvelope: ['Pay Ment'] } })).field).toMatch(/^tasks\.requireEnvelope/)
  }, 60_000)
})
