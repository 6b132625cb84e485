/**
 * Approvals enabled from a node's config (`tasks.approvals`, issue 11 item
 * 17): between two nodes over TCP, a task the rules ask about waits in
 * `auth-required` until the chain's root principal approves it; one they do
 * not ask about runs at once; an input that does not say the amount is asked
 * about. A bad skill pattern is a config error that names its field.
 */
import { createApproval, delegate } from '@ioa/collab'
import { createIdentity } from '@ioa/interconnect'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { expectErrorName, until } from '../../../test/util.js'
import { createIoaNode, initFromConfig } from '../src/index.js'
import type { TaskEvent, TaskSnapshot, Token } from '@ioa/collab'
import type { HostedAgent, Identity } from '@ioa/interconnect'
import type { IoaNode } from '../src/index.js'

const LISTEN = ['/ip4/127.0.0.1/tcp/0']

let executor: IoaNode
let requester: IoaNode
let payment: HostedAgent
let car: HostedAgent
let driver: Identity
let grant: Token

beforeAll(async () => {
  executor = await createIoaNode(initFromConfig({
    listen: LISTEN,
    tasks: { approvals: [{ skill: 'payment.*', above: { amount: 200 }, reason: 'payments over 200 need the driver' }] }
  }))
  requester = await createIoaNode({ listen: LISTEN, bootstrap: [executor.addresses()[0]] })
  payment = await executor.host({
    key: 'payment',
    name: 'Payment',
    skills: [{ id: 'payment.pay' }],
    handlers: { 'payment.pay': (input: any) => ({ paid: input?.amount ?? null }) }
  })
  car = await requester.host({ key: 'car', name: 'Car', skills: [{ id: 'vehicle.car.assistant' }] })
  driver = await createIdentity()
  grant = await delegate(driver, { audience: car.did, capabilities: [{ skill: 'payment.*' }], expiresAt: Date.now() + 600_000 })
  await executor.interconnect.announced()
  await until(async () => requester.interconnect.resolve(payment.did, { cache: false, timeout: 5_000 }).then(() => true, () => undefined), { timeout: 30_000, interval: 200, what: 'payment agent resolved' })
}, 60_000)

afterAll(async () => {
  await requester?.stop().catch(() => {})
  await executor?.stop().catch(() => {})
})

/** Submit a payment and follow it; approve as the driver when it waits for approval */
async function pay (input: unknown, approve: boolean): Promise<{ states: string[], final: TaskSnapshot, auth?: TaskSnapshot['auth'] }> {
  const states: string[] = []
  let auth: TaskSnapshot['auth']
  let final: TaskSnapshot | undefined
  for await (const e of requester.tasks.submit(car.identity, payment.did, { skill: 'payment.pay', input, proofs: [grant] }) as AsyncGenerator<TaskEvent>) {
    if (e.type !== 'status') continue
    states.push(e.task.state)
    final = e.task
    if (e.task.state === 'auth-required' && auth == null) {
      auth = e.task.auth
      if (!approve) break
      const approval = await createApproval(driver, { task: e.task.id, action: e.task.auth?.action ?? '' })
      await requester.tasks.approve(payment.did, e.task.id, approval)
    }
  }
  return { states, final: final as TaskSnapshot, ...(auth != null ? { auth } : {}) }
}

describe('tasks.approvals in a node config (TCP)', () => {
  it('a payment above the bound waits for the root principal, and runs once approved', async () => {
    const { states, final, auth } = await pay({ amount: 250, currency: 'EUR' }, true)
    // (task protocol 2.0.0: the stream's first event is held back until the task needs its approval)
    expect(states).toEqual(['auth-required', 'working', 'completed'])
    expect(auth).toMatchObject({ root: driver.did, reason: 'payments over 200 need the driver' })
    expect(final.result).toEqual({ paid: 250 })
  }, 60_000)

  it('a payment within the bound runs without approval', async () => {
    const { states, final } = await pay({ amount: 120, currency: 'EUR' }, false)
    // (a task that ends within the executor's hold-back is answered with its final state only)
    expect(states).toEqual(['completed'])
    expect(final.result).toEqual({ paid: 120 })
  }, 60_000)

  it('an input that does not say the amount is asked about (fail closed)', async () => {
    const { states } = await pay({ currency: 'EUR' }, false)
    expect(states).toEqual(['auth-required'])
  }, 60_000)

  it('a skill pattern that is not one is a config error naming the field', async () => {
    const err = await expectErrorName(() => initFromConfig({ tasks: { approvals: [{ skill: 'payment*' }] } }), 'ConfigError')
    expect(err.field).toBe('tasks.approvals.0.skill')
    await expectErrorName(() => initFromConfig({ tasks: { approvals: [{ skill: 'payment.pay', below: 3 }] } }), 'ConfigError')
  })
})
