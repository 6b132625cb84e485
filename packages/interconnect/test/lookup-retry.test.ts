/**
 * A provider found in the DHT that does not answer its first card fetch in
 * time (a loaded peer) is asked again within the lookup, not dropped (spec
 * `interconnect.md` 7, "Walking again"; issue 14). Over TCP: node 1 plays
 * the provider with its own `list` handler, whose first answer comes after
 * the asker's request timeout.
 */
import { describe, expect, it } from 'vitest'
import { startNetwork } from '../../../test/harness/index.js'
import { stopAfterEach } from '../../../test/stop-after-each.js'
import { capabilityCid, createIdentity, createInterconnect, signCard, CARD_PROTOCOL } from '../src/index.js'
import type { InterconnectInit } from '../src/index.js'

const extra = stopAfterEach()

async function slowFirstAnswer (init: InterconnectInit): Promise<{ found: string[], did: string, asked: number }> {
  const net = await startNetwork({ size: 2, transport: 'tcp', topology: 'full' })
  extra.push(net)
  await net.waitForRoutingTables(1, { timeout: 20_000 })
  const asker = await createInterconnect(net.nodes[0], { domain: 'test.example', requestTimeout: 500, ...init })
  extra.push(asker)
  const provider = net.nodes[1]
  const id = await createIdentity()
  const now = Date.now()
  const card = await signCard({ v: 1, id: id.did, name: 'Slow Hotel', domain: 'test.example', skills: [{ id: 'travel.hotel.booking' }], peer: provider.peerId.toString(), issuedAt: now, expiresAt: now + 3_600_000 }, id)
  let asked = 0
  await provider.services.messaging.handle(CARD_PROTOCOL, 'list', async () => {
    // the first answer comes after the asker gave up on it
    if (++asked === 1) await new Promise(resolve => setTimeout(resolve, 1_500))
    return { cards: [card] }
  })
  const cid = await capabilityCid('travel.hotel.booking')
  await provider.contentRouting.provide(cid, { signal: AbortSignal.timeout(20_000) })
  // the DHT knows the provider (what is tested is the fetch, not the walk)
  const providers: string[] = []
  for await (const p of net.nodes[0].contentRouting.findProviders(cid, { signal: AbortSignal.timeout(20_000) })) providers.push(p.id.toString())
  expect(providers).toContain(provider.peerId.toString())

  const found = await asker.discoverAll({ capability: 'travel.hotel.booking' }, { cache: false, timeout: 10_000 })
  return { found: found.map(r => r.card.id), did: id.did, asked }
}

describe('card fetches retried within a lookup (TCP)', () => {
  it('a provider whose first answer is late is asked again and found', async () => {
    const { found, did, asked } = await slowFirstAnswer({})
    expect(found).toEqual([did])
    expect(asked).toBe(2)
  }, 60_000)

  it('with fetchAttempts 1 the late provider is skipped', async () => {
    const { found, asked } = await slowFirstAnswer({ fetchAttempts: 1 })
    expect(found).toEqual([])
    expect(asked).toBe(1)
  }, 60_000)
})
