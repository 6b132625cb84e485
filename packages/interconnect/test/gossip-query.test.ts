/**
 * The index query (spec interconnect.md 12.6): the spec's vectors, and over
 * TCP between separate libp2p nodes a newcomer that finds an agent through
 * its bootstrap peer's gossip index with the DHT off for the lookup, and
 * hostile answers (a bad signature, too many entries, a snapshot of another
 * capability, another topic) refused with typed errors.
 */
import { createTransportNode } from '@ioa/transport'
import * as dagCbor from '@ipld/dag-cbor'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { LOOPBACK, ed25519KeyFromSeed, fromHex, readSpecBlock, rejectionOf, toHex, until } from '../../../test/util.js'
import { CapabilityIndex } from '../src/gossip/cap-index.js'
import { IndexQuery } from '../src/gossip/index-query.js'
import { resolveGossipOptions } from '../src/gossip/options.js'
import { verifyEntry } from '../src/gossip/signed-entry.js'
import { CAPS_INDEX_PROTOCOL, componentsFromNode, createInterconnect, gossipTopic, interconnectFromComponents, signedBytes } from '../src/index.js'
import type { SignedEntry } from '../src/gossip/signed-entry.js'
import type { GossipInit, Interconnect } from '../src/index.js'
import type { TransportNode } from '@ioa/transport'
import type { Logger } from '@libp2p/interface'

interface QueryVectors {
  seed: string
  peer: string
  topic: string
  entry: Record<'from' | 'data' | 'seqno' | 'sig', string>
  signedBytes: string
  query: { value: Record<string, unknown>, hex: string }
  answer: { hex: string }
  refused: Array<{ why: string, topic?: string, cap?: string, error: string }>
}

const v = readSpecBlock<QueryVectors>('interconnect.md', 'index-query-vectors')
const entryOf = (e: QueryVectors['entry']): SignedEntry => ({ from: fromHex(e.from), data: fromHex(e.data), seqno: fromHex(e.seqno), sig: fromHex(e.sig) })
const SNAPSHOT_SEQ = 1_767_225_600_000

const quiet: Logger = Object.assign(() => {}, { enabled: false, trace: () => {}, error: () => {}, newScope: () => quiet }) as unknown as Logger

/** An IndexQuery whose peer answers `answer` (no network) */
function stubQuery (answer: unknown, topic = v.topic): IndexQuery {
  const opts = resolveGossipOptions({})
  return new IndexQuery({
    messaging: { handle: async () => {}, unhandle: async () => {}, request: async () => answer as never },
    index: new CapabilityIndex({ maxAnnouncers: 10, maxNames: 100, maxTtl: opts.maxTtl }),
    topic,
    opts,
    log: quiet,
    caps: () => [],
    timeout: 1_000
  })
}

describe('index query (spec vectors)', () => {
  afterEach(() => { vi.useRealTimers() })

  it('signs what gossipsub signs: the prefix and the protobuf of from, data, seqno, topic', async () => {
    const entry = entryOf(v.entry)
    const bytes = signedBytes(entry, v.topic)
    expect(toHex(bytes)).toBe(v.signedBytes)
    // (the TCP tests below verify entries that gossipsub itself signed over these bytes)
    const key = await ed25519KeyFromSeed(v.seed)
    expect(peerIdFromPrivateKey(key).toString()).toBe(v.peer)
    expect(toHex(await key.sign(bytes))).toBe(v.entry.sig)
    expect((await verifyEntry(entry, v.topic)).toString()).toBe(v.peer)
  })

  it('encodes the query and the answer as the vectors', () => {
    expect(toHex(dagCbor.encode(v.query.value))).toBe(v.query.hex)
    expect(toHex(dagCbor.encode({ entries: [entryOf(v.entry)] }))).toBe(v.answer.hex)
  })

  it('accepts the vector answer at the time of its snapshot', async () => {
    vi.useFakeTimers({ now: SNAPSHOT_SEQ + 1_000, toFake: ['Date'] })
    const answer = await stubQuery(dagCbor.decode(fromHex(v.answer.hex))).ask(peerIdFromPrivateKey(await ed25519KeyFromSeed(v.seed)), v.query.value.cap as string)
    expect(answer.entries.map(e => e.peer.toString())).toEqual([v.peer])
    expect(answer.entries[0].snapshot.caps).toEqual(['travel.hotel.booking'])
  })

  it.each(v.refused)('refuses the vector answer when $why', async ({ topic, cap, error }) => {
    vi.useFakeTimers({ now: SNAPSHOT_SEQ + 1_000, toFake: ['Date'] })
    const q = stubQuery(dagCbor.decode(fromHex(v.answer.hex)), topic ?? v.topic)
    const err = await rejectionOf(q.ask(peerIdFromPrivateKey(await ed25519KeyFromSeed(v.seed)), cap ?? (v.query.value.cap as string)))
    expect(err.code).toBe(error)
    expect(q.refused).toBe(1)
  })

  it('refuses an expired snapshot', async () => {
    vi.useFakeTimers({ now: SNAPSHOT_SEQ + 180_000 + 60_000 + 1_000, toFake: ['Date'] })
    const err = await rejectionOf(stubQuery(dagCbor.decode(fromHex(v.answer.hex))).ask(peerIdFromPrivateKey(await ed25519KeyFromSeed(v.seed)), 'travel.hotel'))
    expect(err).toMatchObject({ name: 'UnrequestedSnapshotError', code: 'SNAPSHOT_NOT_REQUESTED' })
  })
})

// ---------------------------------------------------------------------------
// over TCP

const stoppers: Array<{ stop(): void | Promise<void> }> = []

afterEach(async () => {
  for (const x of stoppers.splice(0).reverse()) await Promise.resolve(x.stop()).catch(() => {})
})

const DOMAIN = 'query.example'
const TOPIC = gossipTopic(DOMAIN)
const CAP = 'travel.hotel.booking'
const POLL = { timeout: 20_000, interval: 100 }

async function tcpNode (): Promise<TransportNode> {
  const node = await createTransportNode({ transports: ['tcp'], allow: LOOPBACK })
  stoppers.push(node)
  return node
}

async function interconnect (node: TransportNode, gossip: GossipInit = {}): Promise<Interconnect> {
  const ic = await createInterconnect(node, { domain: DOMAIN, gossip })
  stoppers.push(ic)
  return ic
}

const subscribed = async (a: TransportNode, b: TransportNode): Promise<void> => {
  await until(() => a.services.pubsub?.getSubscribers(TOPIC).some(p => p.equals(b.peerId)), { ...POLL, what: 'subscription' })
}

/**
 * A host H with a hotel agent and a bootstrap peer B whose index holds H;
 * H has answered a hello already and answers the next one only in a day,
 * so a newcomer that joins through B learns H from no gossip of H's in the test
 */
async function settled (bootstrap: GossipInit = {}): Promise<{ host: TransportNode, hostIc: Interconnect, boot: TransportNode, bootIc: Interconnect, did: string }> {
  const host = await tcpNode()
  const hostIc = await interconnect(host, { helloMinInterval: 86_400_000, interval: 3_600_000 })
  const agent = await hostIc.host({ key: 'hotel', name: 'Hotel', skills: [{ id: CAP }] })
  const boot = await tcpNode()
  const bootIc = await interconnect(boot, bootstrap)
  await boot.dial(host.getMultiaddrs()[0])
  await until(() => bootIc.gossip?.announcers(CAP).includes(host.peerId.toString()), { ...POLL, what: 'the bootstrap peer indexing the host' })
  // the host's first snapshot and its answer to the bootstrap peer's hello are out
  await until(() => (hostIc.gossip?.stats().published ?? 0) >= 2, { ...POLL, what: 'the host answering the hello' })
  return { host, hostIc, boot, bootIc, did: agent.did }
}

describe('index query over TCP', () => {
  it('a newcomer finds an agent through its bootstrap peer\'s index, the DHT off for the lookup', async () => {
    const { host, boot, bootIc, did } = await settled()
    const newcomer = await tcpNode()
    const ic = await interconnect(newcomer)
    await newcomer.dial(boot.getMultiaddrs()[0])
    expect(ic.gossip?.announcers(CAP)).toEqual([])

    const found = await ic.discoverAll({ capability: 'travel.hotel' }, { dht: false, cache: false, timeout: 15_000 })
    expect(found.map(r => r.card.id)).toEqual([did])
    expect(found[0].source).toBe('gossip')
    expect(found[0].peer).toBe(host.peerId.toString())
    // the verified entry is in the newcomer's index now, as if gossip had brought it
    expect(ic.gossip?.announcers(CAP)).toEqual([host.peerId.toString()])
    expect(bootIc.gossip?.stats().queriesServed).toBeGreaterThanOrEqual(1)
  })

  it('a newcomer asks its identified bootstrap peer before any topic subscription has arrived', async () => {
    const { host, boot, bootIc, did } = await settled()
    const newcomer = await tcpNode()
    // the newcomer's gossipsub never tells of a peer of the topic: only identify says who serves the query
    const components = componentsFromNode(newcomer)
    const pubsub = components.pubsub
    if (pubsub == null) throw new Error('no pubsub')
    const blind = Object.assign(Object.create(pubsub), {
      getSubscribers: () => [],
      addEventListener: () => {},
      removeEventListener: () => {}
    })
    const ic = await interconnectFromComponents({ ...components, pubsub: blind }, { domain: DOMAIN, gossip: { queryWait: 10_000 } })
    stoppers.push(ic)
    const lookup = ic.discoverAll({ capability: CAP }, { dht: false, cache: false, timeout: 15_000 })
    await newcomer.dial(boot.getMultiaddrs()[0])
    const found = await lookup
    expect(found.map(r => r.card.id)).toEqual([did])
    expect(found[0].peer).toBe(host.peerId.toString())
    expect(bootIc.gossip?.stats().queriesServed).toBe(1)
  })

  it('a newcomer that announces nothing holds its hello for helloHold, and sends it once it announces (spec 12.4)', async () => {
    const { boot, bootIc, did } = await settled()
    const newcomer = await tcpNode()
    const ic = await interconnect(newcomer, { debounce: 0, helloHold: 30_000 })
    await newcomer.dial(boot.getMultiaddrs()[0])
    // its first lookup is answered by the index query, with no hello sent
    const found = await ic.discoverAll({ capability: CAP }, { dht: false, cache: false, timeout: 15_000 })
    expect(found.map(r => r.card.id)).toEqual([did])
    await subscribed(newcomer, boot)
    const published = (): number => ic.gossip?.stats().published ?? 0
    // a peer of the topic is known and the debounce (0) has passed: the hello is held
    await new Promise(resolve => setTimeout(resolve, 300))
    expect(published()).toBe(0)
    // something to announce sends it at once, as a hello with the capability
    await ic.host({ key: 'late', name: 'Late', skills: [{ id: 'geo.route' }] })
    await until(() => published() >= 1, { ...POLL, what: 'the hello once the node announces' })
    await until(() => bootIc.gossip?.announcers('geo.route').includes(newcomer.peerId.toString()), { ...POLL, what: 'the bootstrap peer indexing the newcomer' })
  })

  it('a lookup with a limit ends once the index query\'s candidate is verified', async () => {
    const { boot, did } = await settled()
    const newcomer = await tcpNode()
    const ic = await interconnect(newcomer)
    await newcomer.dial(boot.getMultiaddrs()[0])
    const walks: string[] = []
    const find = newcomer.contentRouting.findProviders.bind(newcomer.contentRouting)
    newcomer.contentRouting.findProviders = (cid, options) => { walks.push(cid.toString()); return find(cid, options) }
    const found = await ic.discoverAll({ capability: CAP }, { limit: 1, cache: false, timeout: 15_000 })
    expect(found.map(r => r.card.id)).toEqual([did])
    // the walk waited for the candidate and was not needed
    expect(walks).toEqual([])
  })

  it('answers the server itself when it announces the capability (self)', async () => {
    const { host, hostIc } = await settled()
    const asker = await tcpNode()
    const ic = await interconnect(asker)
    await asker.dial(host.getMultiaddrs()[0])
    expect(await ic.gossip?.ask(host.peerId, CAP)).toEqual([host.peerId.toString()])
    expect(hostIc.gossip?.stats().queriesServed).toBe(1)
  })

  it('rate-limits the queries of one peer with RATE_LIMITED', async () => {
    const { boot } = await settled({ queriesPerMinute: 2 })
    const asker = await tcpNode()
    const ic = await interconnect(asker)
    await asker.dial(boot.getMultiaddrs()[0])
    await ic.gossip?.ask(boot.peerId, CAP)
    await ic.gossip?.ask(boot.peerId, CAP)
    const err = await rejectionOf(ic.gossip?.ask(boot.peerId, CAP) ?? Promise.resolve())
    expect(err).toMatchObject({ name: 'RateLimitedError', code: 'RATE_LIMITED' })
  })

  describe('hostile answers', () => {
    /** A real signed entry of the host (fetched from the bootstrap peer), and a rogue node that answers `who` with what a test sets */
    async function rogueSetup (): Promise<{ genuine: SignedEntry, rogue: TransportNode, ic: Interconnect, answer: { value: unknown } }> {
      const { boot } = await settled()
      const rogue = await tcpNode()
      rogue.services.pubsub?.subscribe(TOPIC)
      await rogue.dial(boot.getMultiaddrs()[0])
      const raw = await rogue.services.messaging.request<{ entries: SignedEntry[] }>(boot.peerId, CAPS_INDEX_PROTOCOL, 'who', { cap: CAP }, { timeout: 10_000 })
      expect(raw.entries).toHaveLength(1)
      const answer: { value: unknown } = { value: raw }
      await rogue.services.messaging.handle(CAPS_INDEX_PROTOCOL, 'who', () => answer.value)
      const newcomer = await tcpNode()
      const ic = await interconnect(newcomer)
      await newcomer.dial(rogue.getMultiaddrs()[0])
      await subscribed(newcomer, rogue)
      return { genuine: raw.entries[0], rogue, ic, answer }
    }

    it('refuses each with a typed error and counts it; a lookup through the rogue alone finds nothing', async () => {
      const { genuine, rogue, ic, answer } = await rogueSetup()
      const ask = async (cap = CAP): Promise<any> => rejectionOf(ic.gossip?.ask(rogue.peerId, cap) ?? Promise.resolve())

      // the genuine answer passes
      expect(await ic.gossip?.ask(rogue.peerId, CAP)).toHaveLength(1)

      const sig = genuine.sig.slice()
      sig[0] ^= 0xff
      answer.value = { entries: [{ ...genuine, sig }] }
      expect(await ask()).toMatchObject({ name: 'InvalidSignatureError', code: 'INVALID_SIGNATURE' })

      // the announcer's data, changed to announce another capability, under its old signature
      const data = dagCbor.encode({ ...dagCbor.decode<Record<string, unknown>>(genuine.data), caps: [CAP, 'pay.card'] })
      answer.value = { entries: [{ ...genuine, data }] }
      expect(await ask('pay.card')).toMatchObject({ name: 'InvalidSignatureError', code: 'INVALID_SIGNATURE' })

      answer.value = { entries: [genuine] }
      expect(await ask('geo.route')).toMatchObject({ name: 'UnrequestedSnapshotError', code: 'SNAPSHOT_NOT_REQUESTED' })

      answer.value = { entries: Array.from({ length: 33 }, () => genuine) }
      expect(await ask()).toMatchObject({ name: 'SnapshotTooLargeError', code: 'SNAPSHOT_TOO_LARGE' })

      answer.value = { entries: [{ ...genuine, data: new Uint8Array(70_000) }] }
      expect(await ask()).toMatchObject({ name: 'SnapshotTooLargeError', code: 'SNAPSHOT_TOO_LARGE' })

      answer.value = { entries: [genuine, genuine] }
      expect(await ask()).toMatchObject({ name: 'BadRequestError', code: 'BAD_REQUEST' })

      answer.value = { nothing: true }
      expect(await ask()).toMatchObject({ name: 'BadRequestError', code: 'BAD_REQUEST' })

      expect(ic.gossip?.stats().answersRefused).toBe(7)
    })

    it('a lookup whose only answer is hostile takes nothing from it', async () => {
      const { genuine, rogue, ic, answer } = await rogueSetup()
      const sig = genuine.sig.slice()
      sig[0] ^= 0xff
      answer.value = { entries: [{ ...genuine, sig }] }
      const found = await ic.discoverAll({ capability: CAP }, { dht: false, cache: false, timeout: 10_000 })
      expect(found).toEqual([])
      expect(ic.gossip?.stats().answersRefused).toBe(1)
      expect(rogue.services.messaging).toBeDefined()
    })
  })
})
