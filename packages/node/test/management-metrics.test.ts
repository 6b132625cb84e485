/**
 * Metrics of a node with a `management` section (spec/management.md 2.3),
 * over TCP between two nodes: `/metrics` carries libp2p's metrics and ours;
 * after tasks the task counters and duration histograms have moved with the
 * right labels (served and submitted, refusals by code, chains rejected by
 * code, lookups, cards verified); no label carries a DID, a peer id or a task id.
 *
 * The nodes of one process share one set of metrics (a process is what
 * Prometheus scrapes): the two nodes here both count in it, the executor as
 * `side="server"`, the requester as `side="client"`.
 */
import { delegate } from '@ioa/collab'
import { createIdentity } from '@ioa/interconnect'
import { describe, expect, it } from 'vitest'
import { rejectionOf } from '../../../test/util.js'
import { createIoaNode, initFromConfig, parseConfig } from '../src/index.js'
import { labelValues, sample } from './fixtures/prometheus.js'
import { scratch } from './fixtures/scratch.js'

const { nodes } = scratch('management-metrics-')

describe('metrics of a node, over TCP', () => {
  it('/metrics has libp2p\'s metrics and ours; after tasks, the counters and histograms moved with the right labels, and no label names a DID, peer or task', async () => {
    const executor = await createIoaNode(initFromConfig(parseConfig({ management: { http: '127.0.0.1:0' }, tasks: { enforceConstraints: true } })))
    nodes.push(executor)
    const requester = await createIoaNode({ bootstrap: [executor.addresses()[0]], management: {} })
    nodes.push(requester)
    const url = executor.management?.http?.url
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/)
    // a node without an HTTP server has no URL, but counts all the same
    expect(requester.management?.http).toBeUndefined()
    const scrape = async (): Promise<string> => {
      const r = await fetch(`${url}/metrics`)
      expect(r.status).toBe(200)
      return await r.text()
    }

    const shop = await executor.host({
      key: 'shop',
      name: 'Shop',
      skills: [{ id: 'shop.quote' }, { id: 'shop.order' }],
      handlers: { 'shop.quote': () => ({ price: 12 }), 'shop.order': (input) => ({ ordered: input }) }
    })
    const buyer = await requester.host({ key: 'buyer', name: 'Buyer', skills: [{ id: 'shop.buyer' }] })
    const user = await createIdentity()
    const grant = await delegate(buyer.identity, { audience: shop.did, capabilities: [{ skill: 'shop.*' }], expiresAt: Date.now() + 60_000 })
    const before = await scrape()

    const served = { network: 'public', skill: 'shop.quote' }
    const done = await requester.tasks.submitAndWait(buyer.identity, shop.did, { skill: 'shop.quote', input: null, proofs: [grant], taskId: 'quote-1' })
    expect(done.state).toBe('completed')
    const events = []
    for await (const e of requester.submit(buyer, shop.did, { skill: 'shop.quote', input: null, proofs: [grant], taskId: 'quote-2' })) events.push(e)
    expect(events.at(-1)).toMatchObject({ type: 'status', task: { state: 'completed' } })

    // refused: the policy (an amount above the cap) and the chain (a leaf wider than its proof)
    const capped = await delegate(user, { audience: buyer.did, capabilities: [{ skill: 'shop.*', constraints: { maxAmount: 100 } }], expiresAt: Date.now() + 60_000 })
    const leaf = await delegate(buyer.identity, { audience: shop.did, capabilities: [{ skill: 'shop.order', constraints: { maxAmount: 100 } }], expiresAt: Date.now() + 30_000, proofs: [capped] })
    expect((await rejectionOf(requester.tasks.submitAndWait(buyer.identity, shop.did, { skill: 'shop.order', input: { amount: 500 }, proofs: [leaf, capped] }))).code).toBe('POLICY_DENIED')
    const wider = await delegate(buyer.identity, { audience: shop.did, capabilities: [{ skill: 'shop.order', constraints: { maxAmount: 1000 } }], expiresAt: Date.now() + 30_000, proofs: [capped] }, { verify: false })
    expect((await rejectionOf(requester.tasks.submitAndWait(buyer.identity, shop.did, { skill: 'shop.order', input: { amount: 50 }, proofs: [wider, capped] }))).code).toBe('ESCALATION')

    const found = await requester.discover({ capability: 'shop.quote' })
    expect(found.map(a => a.card.id)).toContain(shop.did)

    // the executor reports a task's end right after its answer went out: wait for the counters
    await expect.poll(async () => sample(await scrape(), 'ioa_tasks_served_total', { ...served, state: 'completed' }) - sample(before, 'ioa_tasks_served_total', { ...served, state: 'completed' }), { timeout: 10_000 }).toBe(2)
    const after = await scrape()
    const moved = (name: string, labels: Record<string, string>): number => sample(after, name, labels) - sample(before, name, labels)

    // libp2p's own metrics are there: connections, streams, the DHT, Noise
    expect(after).toMatch(/^libp2p_connection_manager_connections\{/m)
    expect(after).toMatch(/^libp2p_kad_dht_routing_table_size /m)
    expect(after).toMatch(/^libp2p_noise_xxhandshake_successes_total /m)
    expect(after).toMatch(/^ioa_transport_messaging_requests_total\{outcome="served"\} /m)

    // served here: two started and completed, with their durations
    expect(moved('ioa_tasks_served_total', { ...served, state: 'working' })).toBe(2)
    expect(moved('gen_ai_invoke_agent_duration_seconds_count', { network: 'public', side: 'server', skill: 'shop.quote' })).toBe(2)
    expect(moved('gen_ai_invoke_agent_duration_seconds_bucket', { network: 'public', side: 'server', skill: 'shop.quote', le: '+Inf' })).toBe(2)
    expect(moved('ioa_delegation_chains_verified_total', { network: 'public' })).toBe(2)
    // submitted there (submitAndWait and the stream), and the refused ones as they ended for the requester
    expect(moved('ioa_tasks_submitted_total', { network: 'public', skill: 'shop.quote', state: 'completed' })).toBe(2)
    expect(moved('gen_ai_invoke_agent_duration_seconds_count', { network: 'public', side: 'client', skill: 'shop.quote' })).toBe(2)
    expect(moved('ioa_tasks_submitted_total', { network: 'public', skill: 'shop.order', state: 'error' })).toBe(2)
    // refusals by code; the chain's rejection by its code
    expect(moved('ioa_tasks_refused_total', { network: 'public', code: 'POLICY_DENIED' })).toBe(1)
    expect(moved('ioa_tasks_refused_total', { network: 'public', code: 'ESCALATION' })).toBe(1)
    expect(moved('ioa_delegation_chains_rejected_total', { network: 'public', code: 'ESCALATION' })).toBe(1)
    expect(moved('ioa_delegation_chains_rejected_total', { network: 'public', code: 'POLICY_DENIED' })).toBe(0)
    // the lookup
    expect(moved('ioa_discovery_lookups_total', { network: 'public', outcome: 'found' })).toBe(1)
    expect(moved('ioa_discovery_lookup_duration_seconds_count', { network: 'public' })).toBe(1)
    expect(sample(after, 'ioa_discovery_lookup_results_sum', { network: 'public' })).toBeGreaterThanOrEqual(1)
    // the cards it fetched verified (a layer's own metric, through libp2p's metrics component)
    expect(moved('ioa_cards_verified_total', {})).toBeGreaterThanOrEqual(1)
    expect(after).toMatch(/^# TYPE ioa_cards_rejected_total counter$/m)

    // no label value anywhere is a DID, a peer id or a task id
    const values = labelValues(after)
    expect(values.length).toBeGreaterThan(100)
    const ids = [shop.did, buyer.did, user.did, executor.transport.peerId.toString(), requester.transport.peerId.toString(), 'quote-1', 'quote-2']
    expect(values.filter(v => /did:key|12D3KooW|Qm[1-9A-Za-z]{44}/.test(v) || ids.some(id => v.includes(id)))).toEqual([])
    for (const id of ids) expect(after).not.toContain(id)
  }, 60_000)

  it('a node without a management section records no metrics and loads no metrics library', async () => {
    const plain = await createIoaNode()
    nodes.push(plain)
    expect(plain.management).toBeUndefined()
    expect(plain.transport.metrics).toBeUndefined()
  })
})
