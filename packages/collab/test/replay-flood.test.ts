/**
 * The replay cache under a flood over TCP (issue 9, item 3a): a peer that
 * submits envelopes signed by fresh did:keys, without proofs or with tokens
 * it issued itself (no `roots`: any root is accepted), against an executor
 * on another node. Envelopes refused by their chain take no entries; the
 * flooding peer stops at its quota; a bystander's task still runs and its
 * replay is still refused.
 */
import { createIdentity, createInterconnect } from '@ioa/interconnect'
import { createTransportNode } from '@ioa/transport'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { rejectionOf, until } from '../../../test/util.js'
import { delegate } from '../src/auth/delegation.js'
import { ReplayCache, createEnvelope } from '../src/auth/envelope.js'
import { fromRemote } from '../src/errors.js'
import { TASK_PROTOCOL, createTaskService } from '../src/tasks/service.js'
import type { Envelope } from '../src/auth/envelope.js'
import type { TaskService } from '../src/tasks/service.js'
import type { HostedAgent, Identity, Interconnect } from '@ioa/interconnect'
import type { TransportNode } from '@ioa/transport'

const PER_PEER = 10
const body = { input: { amount: 10, currency: 'EUR' } }

describe('replay cache under a flood over TCP', () => {
  let executor: TransportNode
  let mallory: TransportNode
  let alice: TransportNode
  let ic: Interconnect
  let ts: TaskService
  let payment: HostedAgent
  let driver: Identity
  let car: Identity
  const cache = new ReplayCache({ maxEntriesPerPeer: PER_PEER })

  beforeAll(async () => {
    const tcp = async (): Promise<TransportNode> => createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'] })
    ;[executor, mallory, alice] = [await tcp(), await tcp(), await tcp()]
    await mallory.dial(executor.getMultiaddrs())
    await alice.dial(executor.getMultiaddrs())
    await until(() => executor.getPeers().length === 2, { timeout: 10_000, what: 'both peers connected to the executor' })
    ic = await createInterconnect(executor, { requestTimeout: 3_000 })
    payment = await ic.host({ key: 'payment', name: 'Payment', skills: [{ id: 'payment.pay' }] })
    ts = createTaskService(ic, { replayCache: cache })
    await ts.serve(payment.did, 'payment.pay', (input: any) => ({ paid: input.amount }))
    driver = await createIdentity()
    car = await createIdentity()
  }, 60_000)

  afterAll(async () => {
    await ts?.stop().catch(() => {})
    await ic?.stop().catch(() => {})
    for (const n of [executor, mallory, alice]) await Promise.resolve(n?.stop()).catch(() => {})
  })

  /** Submit a raw envelope from `node`; resolves the last state, or the error code */
  async function submit (node: TransportNode, envelope: Envelope): Promise<string> {
    try {
      let last = ''
      for await (const e of node.services.messaging.stream(executor.peerId, TASK_PROTOCOL, 'submit', { envelope, body }) as AsyncIterable<any>) {
        if (e?.task?.state != null) last = e.task.state
      }
      return last
    } catch (err: any) {
      return (fromRemote(err) as any).code
    }
  }

  async function fresh (selfSigned: boolean, i: number): Promise<Envelope> {
    const id = await createIdentity()
    const proofs = selfSigned
      ? [await delegate(id, { audience: id.did, capabilities: [{ skill: 'payment.pay' }], expiresAt: Date.now() + 600_000 })]
      : []
    return createEnvelope(id, { to: payment.did, skill: 'payment.pay', task: `flood-${selfSigned ? 's' : 'n'}-${i}`, body, proofs })
  }

  it('envelopes without proofs from fresh keys are refused and take no entries', async () => {
    for (let i = 0; i < 30; i++) expect(await submit(mallory, await fresh(false, i))).toBe('UNAUTHORIZED')
    expect(cache.size).toBe(0)
    expect(cache.stats.taken).toBe(0)
  })

  it('self-signed chains from one peer stop at its quota (TOO_MANY_REQUESTS); a bystander is served; replays are refused', async () => {
    const outcomes: string[] = []
    for (let i = 0; i < PER_PEER + 5; i++) outcomes.push(await submit(mallory, await fresh(true, i)))
    expect(outcomes.filter(o => o === 'completed')).toHaveLength(PER_PEER)
    expect(outcomes.filter(o => o === 'TOO_MANY_REQUESTS')).toHaveLength(5)
    expect(cache.stats.peerQuotaRefusals).toBe(5)
    expect(cache.size).toBe(PER_PEER)

    // alice's legitimate task runs; its sender's floor never moved
    const token = await delegate(driver, { audience: car.did, capabilities: [{ skill: 'payment.pay' }], expiresAt: Date.now() + 3_600_000 })
    const envelope = await createEnvelope(car, { to: payment.did, skill: 'payment.pay', task: 'alice-1', body, proofs: [token] })
    expect(await submit(alice, envelope)).toBe('completed')
    expect(cache.size).toBe(PER_PEER + 1)
    expect(cache.floorOf(car.did)).toBe(-Infinity)
    // a replay is refused, whoever sends it
    expect(await submit(mallory, envelope)).toBe('REPLAY')
    expect(await submit(alice, envelope)).toBe('REPLAY')
    const err = await rejectionOf((async () => {
      for await (const _ of alice.services.messaging.stream(executor.peerId, TASK_PROTOCOL, 'submit', { envelope, body })) { /* nothing */ }
    })())
    expect((fromRemote(err) as any).name).toBe('ReplayError')
  })
})
