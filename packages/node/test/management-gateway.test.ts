/**
 * Metrics of a domain gateway with a management section, over TCP
 * (spec/management.md 2.3): a task relayed into the domain and one the
 * gateway refuses are counted by outcome and reason; the gateway's inner
 * node's lookups count with `network="domain"`, the outer ones with
 * `public`; an orchestrator's run outside counts its steps and its
 * `gen_ai_workflow_duration_seconds`; no label names a DID or peer.
 */
import { declarativePlanner, delegate } from '@ioa/collab'
import { createIdentity } from '@ioa/interconnect'
import { generateDomainKey } from '@ioa/transport'
import { describe, expect, it } from 'vitest'
import { rejectionOf, until } from '../../../test/util.js'
import { createIoaNode, initFromConfig, parseConfig } from '../src/index.js'
import { labelValues, sample } from './fixtures/prometheus.js'
import { scratch } from './fixtures/scratch.js'

const { nodes } = scratch('management-gateway-')

describe('metrics of a domain gateway, over TCP', () => {
  it('counts relays and refusals, tells the inner node\'s lookups apart by network, and counts an orchestrator\'s run', async () => {
    const domainPsk = generateDomainKey()
    const gw = await createIoaNode(initFromConfig(parseConfig({
      domain: 'riviera.example',
      domainPsk,
      gateway: { exports: [{ skill: 'travel.hotel.booking', domains: ['cars.example'] }], refreshInterval: 300 },
      management: { http: '127.0.0.1:0' }
    })))
    nodes.push(gw)
    const hotelNode = await createIoaNode(initFromConfig(parseConfig({
      domain: 'riviera.example',
      bootstrap: [gw.gateway!.addresses()[0]],
      domainPsk,
      behindGateways: [{ outer: gw.transport.peerId.toString(), inner: gw.gateway!.inner.peerId.toString() }]
    })))
    nodes.push(hotelNode)
    const hotel = await hotelNode.host({
      key: 'hotel',
      name: 'Riviera Hotels',
      skills: [{ id: 'travel.hotel.booking' }, { id: 'hospitality.rota' }],
      handlers: { 'travel.hotel.booking': () => ({ booked: true }), 'hospitality.rota': () => ({ shifts: [] }) }
    })
    const cars = await createIoaNode({ domain: 'cars.example', bootstrap: [gw.addresses()[0]], management: {} })
    nodes.push(cars)
    const car = await cars.host({ key: 'car', name: 'Car', skills: [{ id: 'vehicle.assistant' }] })
    await until(async () => (await cars.discover({ capability: 'travel.hotel.booking' }, { cache: false, timeout: 3_000 })).length > 0, { timeout: 30_000, what: 'the exported hotel found outside' })

    const scrape = async (): Promise<string> => await (await fetch(`${gw.management!.http!.url}/metrics`)).text()
    const before = await scrape()
    const user = await createIdentity()
    const grant = await delegate(user, { audience: car.did, capabilities: [{ skill: 'travel.hotel.*' }, { skill: 'hospitality.*' }], expiresAt: Date.now() + 60_000 })
    const orchestrator = cars.orchestrator(car, {
      planner: declarativePlanner({ templates: { 'book a room': { output: 'book', steps: [{ id: 'book', capability: 'travel.hotel.booking', input: {} }] } } })
    })
    const run = await orchestrator.runToCompletion({ intent: 'book a room', input: {} }, { proofs: [grant] })
    expect(run.state).toBe('completed')
    // the rota is not exported: the gateway refuses it
    expect((await rejectionOf(cars.tasks.submitAndWait(car.identity, hotel.did, { skill: 'hospitality.rota', input: null, proofs: [grant] }))).code).toBe('NOT_EXPORTED')

    // the cars node counts as well (without an HTTP server): a process shares one set of metrics
    const moved = (after: string, name: string, labels: Record<string, string>): number => sample(after, name, labels) - sample(before, name, labels)
    const after = await until(async () => {
      const text = await scrape()
      return moved(text, 'ioa_gateway_relays_total', { network: 'public', outcome: 'accepted' }) >= 1 && moved(text, 'ioa_discovery_lookups_total', { network: 'domain', outcome: 'found' }) >= 1 ? text : undefined
    }, { timeout: 20_000, what: 'the relay and the gateway\'s next refresh counted' })
    expect(moved(after, 'ioa_gateway_refusals_total', { network: 'public', reason: 'NOT_EXPORTED' })).toBe(1)
    expect(sample(after, 'ioa_discovery_lookup_duration_seconds_count', { network: 'domain' })).toBeGreaterThanOrEqual(1)
    // the car's orchestrator: one step started and completed, one run completed
    expect(moved(after, 'ioa_orchestrator_steps_total', { network: 'public', outcome: 'started' })).toBe(1)
    expect(moved(after, 'ioa_orchestrator_steps_total', { network: 'public', outcome: 'completed' })).toBe(1)
    expect(moved(after, 'gen_ai_workflow_duration_seconds_count', { network: 'public', outcome: 'completed' })).toBe(1)
    expect(moved(after, 'ioa_tasks_submitted_total', { network: 'public', skill: 'travel.hotel.booking', state: 'completed' })).toBe(1)
    const ids = [hotel.did, car.did, user.did, gw.transport.peerId.toString(), gw.gateway!.inner.peerId.toString(), hotelNode.transport.peerId.toString()]
    expect(labelValues(after).filter(v => /did:key|12D3KooW/.test(v) || ids.some(id => v.includes(id)))).toEqual([])
  }, 90_000)
})
