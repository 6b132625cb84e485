/**
 * The executor's events say what the requester sees (issue 11 items 2 and
 * 3), over TCP between two nodes: a result with `undefined` fields completes
 * without them, one that cannot be encoded fails with RESULT_NOT_ENCODABLE
 * on both sides, and refused requests (policy, escalation, principal
 * mismatch) are `task-refused` events with their code, caller and skill.
 */
import { delegate } from '@ioa/collab'
import { createIdentity } from '@ioa/interconnect'
import { describe, expect, it } from 'vitest'
import { rejectionOf, until } from '../../../test/util.js'
import { createIoaNode, initFromConfig, parseConfig } from '../src/index.js'
import type { NodeTaskEvent } from '../src/index.js'
import { scratch } from './fixtures/scratch.js'

const { nodes } = scratch('executor-events-')

async function pair (config: unknown = {}): Promise<{ executor: Awaited<ReturnType<typeof createIoaNode>>, requester: Awaited<ReturnType<typeof createIoaNode>>, events: NodeTaskEvent[] }> {
  const executor = await createIoaNode(initFromConfig(parseConfig(config)))
  nodes.push(executor)
  const events: NodeTaskEvent[] = []
  executor.events.onTask(e => { events.push(e) })
  const requester = await createIoaNode({ bootstrap: [executor.addresses()[0]] })
  nodes.push(requester)
  return { executor, requester, events }
}

describe('executor events over TCP', () => {
  it('a result with undefined fields completes without them; one that cannot be encoded fails with RESULT_NOT_ENCODABLE, on both sides', async () => {
    const { executor, requester, events } = await pair()
    expect(executor.addresses()[0]).toMatch(/\/tcp\//)
    const shop = await executor.host({
      key: 'shop',
      name: 'Shop',
      skills: [{ id: 'shop.quote' }, { id: 'shop.weird' }],
      handlers: {
        'shop.quote': () => ({ price: 12, discount: undefined, lines: [1, undefined], nested: { note: undefined, ok: true } }),
        'shop.weird': () => ({ when: Symbol('not data') })
      }
    })
    const buyer = await requester.host({ key: 'buyer', name: 'Buyer', skills: [{ id: 'shop.buyer' }] })
    const grant = await delegate(buyer.identity, { audience: shop.did, capabilities: [{ skill: 'shop.*' }], expiresAt: Date.now() + 60_000 })

    const done = await requester.tasks.submitAndWait(buyer.identity, shop.did, { skill: 'shop.quote', input: null, proofs: [grant], taskId: 'quote-1' })
    expect(done.state).toBe('completed')
    expect(done.result).toEqual({ price: 12, lines: [1, null], nested: { ok: true } })
    await until(() => events.find(e => e.type === 'task-completed' && e.taskId === 'quote-1'), { what: 'task-completed' })

    const failed = await rejectionOf(requester.tasks.submitAndWait(buyer.identity, shop.did, { skill: 'shop.weird', input: null, proofs: [grant], taskId: 'weird-1' }))
    expect(failed.code).toBe('RESULT_NOT_ENCODABLE')
    expect(failed.name).toBe('ResultNotEncodableError')
    const end = await until(() => events.find(e => e.taskId === 'weird-1' && (e.type === 'task-completed' || e.type === 'task-failed')), { what: 'the end of weird-1' })
    expect(end).toMatchObject({ type: 'task-failed', state: 'failed', error: { code: 'RESULT_NOT_ENCODABLE' } })
  }, 60_000)

  it('refused requests are task-refused events with their code, caller and skill', async () => {
    const { executor, requester, events } = await pair({ tasks: { enforceConstraints: true } })
    const shop = await executor.host({
      key: 'shop',
      name: 'Shop',
      skills: [{ id: 'shop.order' }],
      handlers: { 'shop.order': (input) => ({ ordered: input }) }
    })
    const buyer = await requester.host({ key: 'buyer', name: 'Buyer', skills: [{ id: 'shop.buyer' }] })
    const user = await createIdentity()
    const other = await createIdentity()
    const capped = await delegate(user, { audience: buyer.did, capabilities: [{ skill: 'shop.*', constraints: { maxAmount: 100 } }], expiresAt: Date.now() + 60_000 })
    const submit = async (taskId: string, proofs: typeof capped[], amount = 50): Promise<any> =>
      await rejectionOf(requester.tasks.submitAndWait(buyer.identity, shop.did, { skill: 'shop.order', input: { amount }, proofs, taskId }))

    // the policy: an amount above the cap
    expect((await submit('over-cap', [capped], 500)).code).toBe('POLICY_DENIED')
    // the chain: a leaf wider than its proof (signed without the issue-time check)
    const wider = await delegate(buyer.identity, { audience: shop.did, capabilities: [{ skill: 'shop.order', constraints: { maxAmount: 1000 } }], expiresAt: Date.now() + 30_000, proofs: [capped] }, { verify: false })
    expect((await submit('escalated', [wider, capped])).code).toBe('ESCALATION')
    // a token addressed to someone else
    const notMine = await delegate(user, { audience: other.did, capabilities: [{ skill: 'shop.*' }], expiresAt: Date.now() + 60_000 })
    const stolen = await delegate(buyer.identity, { audience: shop.did, capabilities: [{ skill: 'shop.order' }], expiresAt: Date.now() + 30_000, proofs: [notMine] }, { verify: false })
    expect((await submit('mismatch', [stolen, notMine])).code).toBe('PRINCIPAL_MISMATCH')

    for (const [taskId, code] of [['over-cap', 'POLICY_DENIED'], ['escalated', 'ESCALATION'], ['mismatch', 'PRINCIPAL_MISMATCH']]) {
      const e = await until(() => events.find(x => x.type === 'task-refused' && x.taskId === taskId), { what: `task-refused of ${taskId}` })
      expect(e).toMatchObject({ type: 'task-refused', code, caller: buyer.did, skill: 'shop.order', agent: shop.did, peer: requester.transport.peerId.toString() })
    }
    // none of them started a handler
    expect(events.filter(e => e.type === 'task-started')).toEqual([])
  }, 60_000)
})
