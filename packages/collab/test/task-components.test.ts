/**
 * The task service against stubbed components (TaskServiceComponents): no
 * libp2p node and no interconnect, only the slice the service declares. Both
 * agents are hosted here, so a task runs through the in-process path; the
 * stub messaging records what the service registers and shows that nothing
 * went out on the network.
 */
import { createIdentity } from '@ioa/interconnect'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { defaultLogger } from '@libp2p/logger'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { afterEach, describe, expect, it } from 'vitest'
import { delegate } from '../src/auth/delegation.js'
import { TASK_PROTOCOL, TASK_PROTOCOL_V2, taskService } from '../src/tasks/service.js'
import type { TaskService, TaskServiceComponents } from '../src/tasks/api.js'
import type { HostedAgent, Outcome } from '@ioa/interconnect'

function stubMessaging (): TaskServiceComponents['messaging'] & { registered: string[], unregistered: string[], calls: number } {
  const registered: string[] = []
  const unregistered: string[] = []
  const stub = {
    registered,
    unregistered,
    calls: 0,
    handle: async (protocol: string, method: string) => { registered.push(`${protocol} ${method}`) },
    handleStream: async (protocol: string, method: string) => { registered.push(`${protocol} ${method}`) },
    unhandle: async (protocol: string) => { unregistered.push(protocol) },
    request: async () => { stub.calls++; throw new Error('no network in this test') },
    stream: () => { stub.calls++; throw new Error('no network in this test') }
  }
  return stub as unknown as ReturnType<typeof stubMessaging>
}

describe('task service on stubbed components', () => {
  let service: TaskService | undefined

  afterEach(async () => {
    await service?.stop()
    service = undefined
  })

  it('serves, submits and completes a task between two agents hosted here, with no network', async () => {
    const [root, alice, bob] = await Promise.all([createIdentity(), createIdentity(), createIdentity()])
    const agents = [alice, bob].map(identity => ({ did: identity.did, identity }) as unknown as HostedAgent)
    const observed: Outcome[] = []
    const messaging = stubMessaging()
    const components: TaskServiceComponents = {
      peerId: peerIdFromPrivateKey(await generateKeyPair('Ed25519')),
      logger: defaultLogger(),
      messaging,
      interconnect: {
        agents: () => agents,
        resolve: async () => { throw new Error('no directory in this test') },
        observe: (_did, outcome) => { observed.push(outcome) }
      }
    }
    service = taskService({ leaseInterval: 200 })(components)
    await service.serve(bob.did, 'test.echo', (input, ctx) => {
      ctx.progress('echoing')
      return { echo: input, caller: ctx.caller }
    })
    expect(messaging.registered.sort()).toEqual([
      ...['approve', 'cancel', 'get', 'resubscribe', 'submit'].map(m => `${TASK_PROTOCOL} ${m}`),
      ...['approve', 'bind', 'cancel', 'challenge', 'get', 'resubscribe', 'submit'].map(m => `${TASK_PROTOCOL_V2} ${m}`)
    ])

    const token = await delegate(root, { audience: alice.did, capabilities: [{ skill: 'test.*' }], expiresAt: Date.now() + 60_000 })
    const task = await service.submitAndWait(alice.did, bob.did, { skill: 'test.echo', input: { x: 1 }, proofs: [token] })
    expect(task.state).toBe('completed')
    expect(task.result).toEqual({ echo: { x: 1 }, caller: alice.did })
    expect(task.messages).toEqual(['echoing'])
    expect(await service.get(bob.did, task.id)).toMatchObject({ id: task.id, state: 'completed' })
    expect(messaging.calls).toBe(0)
    // the finished task reached the ranking feedback through the stub interconnect
    expect(observed).toEqual([{ ok: true }])

    await service.stop()
    expect(messaging.unregistered).toEqual([TASK_PROTOCOL, TASK_PROTOCOL_V2])
    service = undefined
  })
})
