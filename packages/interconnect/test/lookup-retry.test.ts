/**
 * The lookup's card fetches (spec `interconnect.md` 7, step 4 and "Asking a
 * provider again"; issue 14), over TCP on 127.0.0.1: a provider found in the
 * DHT whose first card answer does not come in time (a loaded peer) is asked
 * again within the lookup, not dropped, and so is one whose dial ran out of
 * time; a refusal, a malformed answer or a provider that is gone (its dial
 * is refused) is asked once; a lookup that lost a provider to a
 * fetch that broke is not cached.
 *
 * The providers here are bare nodes with their own `list` handler, so that
 * the test decides when an answer comes. A withheld answer waits for the
 * asker's next request (or the end of the test), never for a fixed time: the
 * first fetch times out whatever the machine's load.
 */
import { describe, expect, it, vi } from 'vitest'
import { startNetwork } from '../../../test/harness/index.js'
import { stopAfterEach } from '../../../test/stop-after-each.js'
import { until } from '../../../test/util.js'
import { BadRequestError, CARD_PROTOCOL, capabilityCid, createIdentity, createInterconnect, signCard } from '../src/index.js'
import type { Network } from '../../../test/harness/index.js'
import type { Interconnect, InterconnectInit, SignedCard } from '../src/index.js'
import { DialFailedError } from '@ioa/transport'
import type { TransportNode } from '@ioa/transport'

const extra = stopAfterEach()

const CAPABILITY = 'travel.hotel.booking'
/** The asker's per-fetch timeout: long enough for an answer on a loaded machine, short beside the lookup's */
const REQUEST_TIMEOUT = 3_000
const LOOKUP = { cache: false, timeout: 30_000 }

/** How a test provider answers `list`: `late-first` withholds its first answer until it is asked again */
type Answer = 'late-first' | 'refuse' | 'malformed' | 'at-once'

interface TestProvider {
  did: string
  /** `list` requests received */
  asked: () => number
  /** Answer every withheld request now */
  release: () => void
}

/** Serve one signed card of `CAPABILITY` from `node`, answering as `answer` says, and provide the capability in the DHT */
async function provider (net: Network, index: number, answer: Answer, name: string): Promise<TestProvider> {
  const node = net.nodes[index]
  const id = await createIdentity()
  const now = Date.now()
  const card: SignedCard = await signCard({ v: 1, id: id.did, name, domain: 'test.example', skills: [{ id: CAPABILITY }], peer: node.peerId.toString(), issuedAt: now, expiresAt: now + 3_600_000 }, id)
  let asked = 0
  const waiting: Array<() => void> = []
  const release = (): void => { for (const w of waiting.splice(0)) w() }
  await node.services.messaging.handle(CARD_PROTOCOL, 'list', async () => {
    const n = ++asked
    if (answer === 'refuse') throw new BadRequestError('not for you')
    if (answer === 'malformed') return { cards: 'none' }
    if (answer === 'late-first') {
      // a later request releases the first; the first answer then comes after the asker gave up on it
      release()
      if (n === 1) await new Promise<void>(resolve => { waiting.push(resolve) })
    }
    return { cards: [card] }
  })
  extra.push({ stop: async () => { release() } })
  await provideAndCheck(node, net.nodes[0])
  return { did: id.did, asked: () => asked, release }
}

/**
 * Provide the capability from `node` until a bare walk from `asker` finds it:
 * what these tests check is the fetch, not the DHT (a provide walk may lose
 * its queries on a loaded machine)
 */
async function provideAndCheck (node: TransportNode, asker: TransportNode): Promise<void> {
  const cid = await capabilityCid(CAPABILITY)
  const want = node.peerId.toString()
  await until(async () => {
    await node.contentRouting.provide(cid, { signal: AbortSignal.timeout(20_000) }).catch(() => {})
    for await (const p of asker.contentRouting.findProviders(cid, { signal: AbortSignal.timeout(20_000) })) {
      if (p.id.toString() === want) return true
    }
    return false
  }, { timeout: 60_000, interval: 200, what: 'the provider record' })
}

async function network (size: number, init: InterconnectInit = {}): Promise<{ net: Network, asker: Interconnect }> {
  const net = await startNetwork({ size, transport: 'tcp', topology: 'full' })
  extra.push(net)
  await net.waitForRoutingTables(size - 1, { timeout: 30_000 })
  const asker = await createInterconnect(net.nodes[0], { domain: 'test.example', requestTimeout: REQUEST_TIMEOUT, ...init })
  extra.push(asker)
  return { net, asker }
}

const ids = async (asker: Interconnect, options = LOOKUP): Promise<string[]> =>
  (await asker.discoverAll({ capability: CAPABILITY }, options)).map(r => r.card.id).sort()

describe('card fetches of a lookup (TCP)', () => {
  it('a provider whose first answer is late is asked again and found', async () => {
    const { net, asker } = await network(2)
    const slow = await provider(net, 1, 'late-first', 'Slow Hotel')
    expect(await ids(asker)).toEqual([slow.did])
    expect(slow.asked()).toBe(2)
  }, 120_000)

  it('with fetchAttempts 1 the late provider is skipped', async () => {
    const { net, asker } = await network(2, { fetchAttempts: 1 })
    const slow = await provider(net, 1, 'late-first', 'Slow Hotel')
    expect(await ids(asker)).toEqual([])
    expect(slow.asked()).toBe(1)
  }, 120_000)

  it('a provider that refuses, or answers with garbage, is asked once', async () => {
    const { net, asker } = await network(3)
    const refusing = await provider(net, 1, 'refuse', 'Refusing Hotel')
    const garbage = await provider(net, 2, 'malformed', 'Garbage Hotel')
    expect(await ids(asker)).toEqual([])
    expect(refusing.asked()).toBe(1)
    expect(garbage.asked()).toBe(1)
  }, 120_000)

  it('a provider that is gone (the dial fails) is asked once', async () => {
    const { net, asker } = await network(2)
    await provider(net, 1, 'at-once', 'Gone Hotel')
    await net.nodes[1].stop()
    await until(() => !net.isConnected(0, 1), { timeout: 20_000, what: 'the connection to the stopped node closed' })
    const request = vi.spyOn(net.nodes[0].services.messaging, 'request')
    const errors: string[] = []
    const lists = (): number => request.mock.calls.filter(c => c[1] === CARD_PROTOCOL && c[2] === 'list').length
    // the record stays on the asker (it is the only other peer) while its provider is gone
    expect(await ids(asker)).toEqual([])
    for (const r of request.mock.results) {
      if (r.type === 'return') await (r.value as Promise<unknown>).catch((err: any) => { errors.push(err.code) })
    }
    expect(lists()).toBe(1)
    expect(errors).toEqual(['DIAL_FAILED'])
  }, 120_000)

  it.each([
    ['a dial timeout', new DOMException('The operation was aborted due to timeout', 'TimeoutError')],
    ['the abort of a shared dial', Object.assign(new Error('The operation was aborted'), { name: 'AbortError' })]
  ])('a provider whose dial ran out of time (%s) is asked again', async (_, cause) => {
    const { net, asker } = await network(2)
    const hotel = await provider(net, 1, 'at-once', 'Far Hotel')
    // libp2p's own dial timeout (5 s) cannot be shortened from here: the asker's
    // first list request fails as a dial that timed out does, the second goes out
    const messaging = net.nodes[0].services.messaging
    const real = messaging.request.bind(messaging)
    let failed = 0
    vi.spyOn(messaging, 'request').mockImplementation(async (...args: Parameters<typeof messaging.request>) => {
      if (args[1] === CARD_PROTOCOL && failed++ === 0) {
        throw new DialFailedError(`Could not dial: ${cause.message}`, { cause })
      }
      return real(...args)
    })
    expect(await ids(asker)).toEqual([hotel.did])
    expect(failed).toBe(2)
    expect(hotel.asked()).toBe(1)
  }, 120_000)

  it('a lookup that lost a provider to a late answer is not cached: the next one asks again', async () => {
    const { net, asker } = await network(3, { fetchAttempts: 1 })
    const slow = await provider(net, 1, 'late-first', 'Slow Hotel')
    const fast = await provider(net, 2, 'at-once', 'Fast Hotel')
    expect(await ids(asker, { cache: true, timeout: 30_000 })).toEqual([fast.did])
    expect(slow.asked()).toBe(1)
    // the cache would answer with the fast provider alone; the lookup walks again and finds both
    expect(await ids(asker, { cache: true, timeout: 30_000 })).toEqual([fast.did, slow.did].sort())
    expect(slow.asked()).toBe(2)
    expect(fast.asked()).toBe(2)
  }, 120_000)
})
