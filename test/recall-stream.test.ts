/**
 * Results stream before the lookup ends (issue 14), over TCP on 127.0.0.1
 * between separate libp2p nodes, through the public API: a lookup with a
 * fast and a slow provider yields the fast provider's agent while the slow
 * provider's card fetch is still open (so the lookup has not ended), and the
 * slow one's agent after it answers.
 *
 * The slow provider is an ordinary interconnect whose `list` answer waits on
 * a card source that the test releases only after the first result has
 * arrived: a lookup that held its results back until its end would never see
 * the release, and would end (at its timeout) without the slow agent. No
 * fixed wait; the asker's per-fetch timeout and the lookup's timeout are
 * longer than the test's.
 */
import { describe, expect, it } from 'vitest'
import { createInterconnect } from '../packages/interconnect/src/index.js'
import { startNetwork } from './harness/index.js'
import { stopAfterEach } from './stop-after-each.js'
import { until } from './util.js'
import type { DiscoveredAgent } from '../packages/interconnect/src/index.js'

const extra = stopAfterEach()

const CAPABILITY = 'travel.hotel.booking'
const DOMAIN = 'stream.example'
/** Longer than the test, so that only the release ends the slow fetch */
const PATIENT = 600_000

describe('discovery streams its results (TCP)', () => {
  it('yields a fast provider\'s agent before a slow provider has answered, then the slow one\'s', async () => {
    const net = await startNetwork({ size: 3, transport: 'tcp', topology: 'full' })
    extra.push(net)
    await net.waitForRoutingTables(2, { timeout: 30_000 })
    const [asker, fast, slow] = await Promise.all(net.nodes.map(async (n, i) =>
      createInterconnect(n, { domain: DOMAIN, ...(i === 0 ? { requestTimeout: PATIENT } : {}) })))
    extra.push(asker, fast, slow)

    const fastAgent = await fast.host({ key: 'fast', name: 'Fast Hotel', skills: [{ id: CAPABILITY }] })
    const slowAgent = await slow.host({ key: 'slow', name: 'Slow Hotel', skills: [{ id: CAPABILITY }] })
    await Promise.all([fast.announced(), slow.announced()])
    // both records are in the DHT before the lookup under test (what is tested is the streaming, not the walk)
    await until(async () => (await asker.discoverAll({ capability: CAPABILITY }, { cache: false, timeout: 20_000 })).length === 2,
      { timeout: 120_000, interval: 200, what: 'both hotels found' })

    // from now on the slow node's `list` answers only when released
    let open = (): void => {}
    const released = new Promise<void>(resolve => { open = resolve })
    let slowAsked = 0
    slow.addCardSource(async () => {
      slowAsked++
      await released
      return []
    })
    extra.push({ stop: async () => { open() } })

    const lookup = asker.discover({ capability: CAPABILITY }, { cache: false, timeout: PATIENT })
    const first = await lookup.next()
    expect(first.done).toBe(false)
    expect((first.value as DiscoveredAgent).card.id).toBe(fastAgent.did)
    // the slow provider was asked (or is still to be): its answer has not come, the lookup goes on
    open()
    const rest: string[] = []
    for await (const r of lookup) rest.push(r.card.id)
    expect(rest).toEqual([slowAgent.did])
    expect(slowAsked).toBe(1)
  }, 240_000)
})
