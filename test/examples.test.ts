/**
 * The examples of `examples/` run as tests: the audit layer (a custom layer
 * with its own protocol, `spec/audit-example.md`) between real nodes over TCP,
 * the quick start, the layer example and the config-file example. The README
 * blocks that show them are checked against these files by `readme.test.ts`.
 */
import { fileURLToPath } from 'node:url'
import { delegate } from '@ioa/collab'
import { createIdentity } from '@ioa/interconnect'
import { createIoaNode, loadConfig, startFromConfig } from '@ioa/node'
import * as dagCbor from '@ipld/dag-cbor'
import { MemoryDatastore } from 'datastore-core'
import { Key } from 'interface-datastore'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  AUDIT_PROTOCOL, AuditChainError, AuditError, AuditForbiddenError, GENESIS_HASH, InvalidAuditResponseError, auditLayer, entryHash,
  fetchAudit, verifyAuditChain
} from '../examples/audit-layer.js'
import { main as collabMain } from '../examples/collab-orchestration.js'
import { main as extendMain } from '../examples/extend.js'
import { main as gatewayMain } from '../examples/gateway.js'
import { main as discoveryMain } from '../examples/interconnect-discovery.js'
import { main as interconnectMain } from '../examples/interconnect.js'
import { main as quickstartMain } from '../examples/quickstart.js'
import { main as messagingMain } from '../examples/transport-messaging.js'
import { main as transportMain } from '../examples/transport.js'
import { delay, expectErrorCode, expectErrorName, readSpecBlock, rejectionOf, toHex } from './util.js'
import type { AuditEntry, AuditLayer } from '../examples/audit-layer.js'
import type { Token } from '@ioa/collab'
import type { HostedAgent, Identity } from '@ioa/interconnect'
import type { IoaNode, NodeLogEvent } from '@ioa/node'

const SKILL = 'travel.hotel.booking'
const ENTRY_KEY = (seq: number): Key => new Key(`/ioa/audit/entries/${String(seq).padStart(16, '0')}`)

/** A hotel agent whose bookings fail with NO_ROOM when asked to */
async function hostHotel (node: IoaNode): Promise<HostedAgent> {
  const hotel = await node.host({
    key: 'hotel',
    name: 'Seaside Hotel',
    skills: [{ id: SKILL }],
    handlers: {
      [SKILL]: (input) => {
        if ((input as { fail?: boolean }).fail === true) throw Object.assign(new Error('No room left'), { code: 'NO_ROOM' })
        return { booked: true }
      }
    }
  })
  await node.interconnect.announced({ signal: AbortSignal.timeout(10_000) })
  return hotel
}

describe('audit layer over TCP', () => {
  const store = new MemoryDatastore()
  let reader: IoaNode
  let stranger: IoaNode
  let server: IoaNode
  let hotel: HostedAgent
  let car: HostedAgent
  let user: Identity
  let grant: Token
  const started: IoaNode[] = []

  const layer = (): AuditLayer => {
    const l = server.layer<AuditLayer>('audit')
    if (l == null) throw new Error('no audit layer')
    return l
  }

  /** Book through the task protocol from the reader's node; returns the task id */
  async function book (fail = false): Promise<string> {
    const request = { skill: SKILL, input: { fail }, proofs: [grant] }
    if (!fail) return (await reader.tasks.submitAndWait(car.identity, hotel.did, request, { signal: AbortSignal.timeout(20_000) })).id
    const err = await expectErrorCode(reader.tasks.submitAndWait(car.identity, hotel.did, request, { signal: AbortSignal.timeout(20_000) }), 'NO_ROOM')
    return err.task.id
  }

  beforeAll(async () => {
    reader = await createIoaNode({ domain: 'audit.example' })
    started.push(reader)
    stranger = await createIoaNode({ bootstrap: reader.addresses() })
    started.push(stranger)
    server = await createIoaNode({
      datastore: store,
      domain: 'hotels.example',
      bootstrap: reader.addresses(),
      layers: [auditLayer({ readers: [reader.transport.peerId.toString()], maxEntries: 3 })]
    })
    started.push(server)
    hotel = await hostHotel(server)
    car = await reader.host({ key: 'car', name: 'Car', skills: [{ id: 'vehicle.assistant' }] })
    user = await createIdentity()
    grant = await delegate(user, { audience: car.did, capabilities: [{ skill: 'travel.*' }], expiresAt: Date.now() + 10 * 60_000 })
  })

  afterAll(async () => {
    for (const n of started.reverse()) await n.stop().catch(() => {})
  })

  it('appends every served task to a hash chain in the node datastore', async () => {
    const ids = [await book(), await book(true), await book()]
    await layer().flush()
    const entries = await layer().tail({ limit: 10 })

    expect(entries.map(e => [e.seq, e.task, e.outcome, e.error])).toEqual([
      [1, ids[0], 'completed', undefined],
      [2, ids[1], 'failed', 'NO_ROOM'],
      [3, ids[2], 'completed', undefined]
    ])
    for (const e of entries) {
      expect(e).toMatchObject({ agent: hotel.did, skill: SKILL, caller: car.did, root: user.did })
      expect(e.duration).toBeGreaterThanOrEqual(0)
      expect(e.hash).toBe(await entryHash(e))
    }
    expect(entries[0].prev).toBe(GENESIS_HASH)
    expect(entries[1].prev).toBe(entries[0].hash)
    expect(entries[2].prev).toBe(entries[1].hash)
    await verifyAuditChain(entries)

    // stored under the layer's prefix of the node's own datastore
    expect(dagCbor.decode(await store.get(new Key('/ioa/audit/head')))).toEqual({ seq: 3, hash: entries[2].hash })
    expect(dagCbor.decode(await store.get(ENTRY_KEY(2)))).toEqual(entries[1])
    expect(layer().head()).toEqual({ seq: 3, hash: entries[2].hash })
    expect(layer().stats()).toMatchObject({ appended: 3, dropped: 0, failed: 0, pending: 0 })
  })

  it('serves verified entries to a reader, bounded by maxEntries and paged with before', async () => {
    const local = await layer().tail({ limit: 10 })
    const first = await fetchAudit(reader, server.transport.peerId, { limit: 10 })
    expect(first).toEqual({ entries: local, head: 3 })

    await book()
    await book()
    await layer().flush()
    const newest = await fetchAudit(reader, server.transport.peerId.toString(), { limit: 10 })
    expect(newest.head).toBe(5)
    expect(newest.entries.map(e => e.seq)).toEqual([3, 4, 5]) // maxEntries: 3

    const older = await fetchAudit(reader, server.transport.peerId, { limit: 10, before: newest.entries[0].seq })
    expect(older.entries.map(e => e.seq)).toEqual([1, 2])
    expect(older.entries[1].hash).toBe(newest.entries[0].prev) // the pages chain together

    const last = await fetchAudit(reader, server.addresses()[0], { limit: 1 })
    expect(last.entries.map(e => e.seq)).toEqual([5])
  })

  it('refuses a peer that is not a reader with FORBIDDEN and malformed requests with INVALID_ARGUMENT', async () => {
    const err = await expectErrorName(fetchAudit(stranger, server.transport.peerId, { limit: 5 }), 'AuditForbiddenError')
    expect(err).toBeInstanceOf(AuditForbiddenError)
    expect(err).toBeInstanceOf(AuditError)
    expect(err.code).toBe('FORBIDDEN')
    expect(err.remote).toBe(true)

    const messaging = reader.transport.services.messaging
    for (const bad of [{ limit: 0 }, { limit: 1001 }, { limit: 1.5 }, { limit: 5, from: 1 }, { limit: 5, before: 0 }, 'tail', null]) {
      await expectErrorCode(messaging.request(server.transport.peerId, AUDIT_PROTOCOL, 'tail', bad, { timeout: 5_000 }), 'INVALID_ARGUMENT')
    }
    // the client refuses an out-of-range limit before sending anything
    await expectErrorCode(fetchAudit(reader, server.transport.peerId, { limit: 5_000 }), 'INVALID_ARGUMENT')
  })

  it('detects a tampered entry, a re-hashed one, and responses out of spec', async () => {
    const original = await store.get(ENTRY_KEY(4))
    const entry = dagCbor.decode<AuditEntry>(original)
    try {
      // the entry says something else, its hash is left as it was
      const forged: AuditEntry = { ...entry, outcome: 'failed', error: 'NO_ROOM' }
      await store.put(ENTRY_KEY(4), dagCbor.encode(forged))
      const stale = await expectErrorName(fetchAudit(reader, server.transport.peerId, { limit: 3 }), 'AuditChainError')
      expect(stale).toBeInstanceOf(AuditChainError)
      expect(stale.code).toBe('AUDIT_CHAIN_BROKEN')
      expect(stale.message).toMatch(/Entry 4 does not match its hash/)

      // re-hashed: the entry is consistent but the next one no longer links to it
      await store.put(ENTRY_KEY(4), dagCbor.encode({ ...forged, hash: await entryHash(forged) }))
      const unlinked = await expectErrorCode(fetchAudit(reader, server.transport.peerId, { limit: 3 }), 'AUDIT_CHAIN_BROKEN')
      expect(unlinked.message).toMatch(/Entry 5 does not link/)
    } finally {
      await store.put(ENTRY_KEY(4), original)
    }
    expect((await fetchAudit(reader, server.transport.peerId, { limit: 3 })).entries).toHaveLength(3)

    // a peer that answers on the protocol with something else
    const entries = await layer().tail({ limit: 3 })
    const answers: unknown[] = [
      { entries: [{ ...entries[0], seq: 'one' }], head: 5 },
      { entries, head: 5, more: true },
      { entries: [...entries, ...entries], head: 5 },
      { entries, head: 2 },
      [entries]
    ]
    await stranger.transport.services.messaging.handle(AUDIT_PROTOCOL, 'tail', () => answers.shift())
    try {
      for (let i = 0; i < 5; i++) {
        const e = await rejectionOf(fetchAudit(reader, stranger.transport.peerId, { limit: 3 }))
        expect(e).toBeInstanceOf(InvalidAuditResponseError)
        expect(e.code).toBe('INVALID_AUDIT_RESPONSE')
      }
    } finally {
      await stranger.transport.services.messaging.unhandle(AUDIT_PROTOCOL)
    }
    // an entry dropped from the middle is a gap
    await expect(verifyAuditChain([entries[0], entries[2]])).rejects.toThrow(/Entry 5 follows entry 3/)
  })

  it('stops with the node and continues the chain after a restart', async () => {
    const audit = layer()
    const before = audit.head()
    await audit.stop()
    // no protocol, no more entries
    const gone = await rejectionOf(fetchAudit(reader, server.transport.peerId, { limit: 3, timeout: 5_000 }))
    expect(['PROTOCOL_NOT_SUPPORTED', 'UNKNOWN_METHOD']).toContain(gone.code)
    await book()
    await delay(50)
    expect(audit.head()).toEqual(before)
    expect(audit.stats().appended).toBe(5)

    const peer = server.transport.peerId.toString()
    await server.stop() // stops the layer again: idempotent
    expect(dagCbor.decode(await store.get(new Key('/ioa/audit/head')))).toEqual(before)

    // the same datastore: same peer id, same agent, the chain goes on; the
    // response budget fits two entries like the last one (a few bytes spare), not three
    const size = dagCbor.encode((await audit.tail({ limit: 1 }))[0]).length
    server = await createIoaNode({
      datastore: store,
      bootstrap: reader.addresses(),
      layers: [auditLayer({ readers: [reader.transport.peerId], maxResponseBytes: 32 + 2 * size + 8 })]
    })
    started.push(server)
    expect(server.transport.peerId.toString()).toBe(peer)
    expect((await hostHotel(server)).did).toBe(hotel.did)
    await book()
    await layer().flush()
    expect(layer().head().seq).toBe(6)

    const page = await fetchAudit(reader, server.addresses()[0], { limit: 10 })
    expect(page.head).toBe(6)
    expect(page.entries.map(e => e.seq)).toEqual([5, 6]) // maxResponseBytes left out 1 to 4
    expect(page.entries[0].hash).toBe(before.hash)
    expect(page.entries[1].prev).toBe(before.hash)

    const audit2 = layer()
    await server.stop()
    expect(audit2.stats().pending).toBe(0)
  })
})

describe('spec/audit-example.md', () => {
  it('matches the entry encodings and hashes of its vectors', async () => {
    const v = readSpecBlock<{ entries: Array<AuditEntry & { encoding: string }> }>('audit-example.md', 'vectors')
    expect(v.entries.length).toBeGreaterThanOrEqual(2)
    const entries: AuditEntry[] = []
    for (const { encoding, ...entry } of v.entries) {
      const { hash: _hash, ...body } = entry
      expect(toHex(dagCbor.encode(body))).toBe(encoding)
      expect(await entryHash(entry)).toBe(entry.hash)
      entries.push(entry)
    }
    await verifyAuditChain(entries)
  })
})

describe('examples', () => {
  it('quickstart.ts books a hotel between two nodes', async () => {
    const lines: string[] = []
    const booking = await quickstartMain({ log: (line: string) => { lines.push(line) }, signal: AbortSignal.timeout(45_000) })
    expect(booking).toMatchObject({ booked: true, nights: 2 })
    expect(booking.guest).toMatch(/^did:key:z/)
    expect(lines[0]).toMatch(/^found Seaside Hotel \(did:key:/)
    expect(lines.at(-1)).toMatch(/: completed$/)
  })

  it('transport.ts answers a request of its own protocol', async () => {
    const reply = await transportMain()
    expect(reply).toMatchObject({ hello: 'car' })
    expect((reply as { from: string }).from).toMatch(/^12D3KooW/)
  })

  it('interconnect.ts finds an agent by capability and sends it a message', async () => {
    expect(await interconnectMain()).toEqual({ ok: true, got: { nights: 1 } })
  })

  it('extend.ts runs a node with the audit layer and reads its log', async () => {
    const lines: string[] = []
    const entries = await extendMain({ log: (line: string) => { lines.push(line) }, signal: AbortSignal.timeout(45_000) })
    expect(entries).toHaveLength(1)
    expect(entries[0]).toMatchObject({ seq: 1, skill: SKILL, outcome: 'completed', prev: GENESIS_HASH })
    expect(lines.at(-1)).toBe('1 of 1 entries, chain verified')
  })

  it('node.json with hotel-agent.js starts from the config file, with the audit layer stacked on it', async () => {
    const config = await loadConfig(fileURLToPath(new URL('../examples/node.json', import.meta.url)))
    const events: NodeLogEvent[] = []
    const started = await startFromConfig(config, { layers: [auditLayer()], onEvent: e => { events.push(e) } })
    const client = await createIoaNode({ bootstrap: started.node.addresses() })
    try {
      const [hotel] = started.agents
      expect(hotel.kind).toBe('module')
      await started.node.interconnect.announced({ signal: AbortSignal.timeout(10_000) })
      const guest = await client.host({ key: 'guest', name: 'Guest', skills: [{ id: 'guest' }] })
      const proofs = [await delegate(await createIdentity(), { audience: guest.did, capabilities: [{ skill: SKILL }], expiresAt: Date.now() + 60_000 })]
      const request = { skill: SKILL, input: {}, proofs }
      const done = await client.tasks.submitAndWait(guest.identity, hotel.agent.did, request, { signal: AbortSignal.timeout(20_000) })
      expect(done.result).toEqual({ booked: true, hotel: hotel.agent.did, guest: guest.did, free: 0 })
      // options.rooms is 1: the second booking fails with the module's code
      await expectErrorCode(client.tasks.submitAndWait(guest.identity, hotel.agent.did, request, { signal: AbortSignal.timeout(20_000) }), 'NO_ROOM')
      expect(events.find(e => e.event === 'booked')).toMatchObject({ source: 'hotel', data: { guest: guest.did, free: 0 } })

      const audit = started.node.layer<AuditLayer>('audit')
      await audit?.flush()
      expect((await audit?.tail())?.map(e => e.outcome)).toEqual(['completed', 'failed'])
    } finally {
      await client.stop()
      await started.stop()
    }
  })
})

describe('examples of the package READMEs', () => {
  it('transport-messaging.ts serves a unary and a streamed method; breaking out of a stream cancels its handler', async () => {
    const { echoed, counted, partial, activeHandlers } = await messagingMain({ signal: AbortSignal.timeout(30_000) })
    expect(echoed).toMatchObject({ echo: { any: 'DAG-CBOR data' } })
    expect((echoed as { from: string }).from).toMatch(/^12D3KooW/)
    expect(counted).toEqual([1, 2, 3])
    expect(partial).toEqual([1, 2])
    // without the cancel the handler (a million items) would still be running
    expect(activeHandlers).toBe(0)
  })

  it('interconnect-discovery.ts finds the hotel agent by capability and tag, ranks it and sends it a message', async () => {
    const logged: unknown[][] = []
    const result = await discoveryMain({ log: (...args: unknown[]) => { logged.push(args) }, signal: AbortSignal.timeout(50_000) })
    expect(result.hotel).toMatch(/^did:key:z/)
    expect(result.ranked).toEqual([result.hotel])
    expect(result.answer).toEqual({ booked: true, for: result.traveller })
    expect(logged).toHaveLength(1)
    expect(logged[0][0]).toBe('Seaside Hotel')
    expect(logged[0][1]).toEqual(expect.any(Number))
  })

  it('gateway.ts reaches an agent of a closed domain through the gateway, with its exported skill only', async () => {
    const result = await gatewayMain({ signal: AbortSignal.timeout(50_000) })
    // found through the gateway's outer node, without addresses, with the exported skill only
    expect(result.found.peer).toBe(result.gatewayPeer)
    expect(result.found.card.gateways).toEqual([result.gatewayPeer])
    expect(result.found.card.addrs).toEqual([])
    expect(result.found.card.skills.map(s => s.id)).toEqual(['travel.hotel.booking'])
    expect(result.answer).toEqual({ booked: true, skill: 'travel.hotel.booking', request: { nights: 1 } })
    expect(result.refused).toBe('NOT_EXPORTED')
    expect(result.direct).not.toBe('reached')
  })

  it('collab-orchestration.ts plans two steps, finds their providers and runs them under the user\'s delegation', async () => {
    const lines: string[] = []
    const { dids, events, steps, booking } = await collabMain({ log: (line: unknown) => { lines.push(String(line)) }, signal: AbortSignal.timeout(50_000) })
    expect(lines[0]).toBe('plan')
    expect(lines.at(-1)).toBe('completed')
    const plan = events.find(e => e.type === 'plan')
    expect(plan?.type === 'plan' ? plan.plan.steps.map(s => [s.id, s.capability]) : []).toEqual([['route', 'geo.route'], ['hotel', 'travel.hotel.book']])
    expect(steps.route).toMatchObject({ state: 'completed', providers: [dids.map], result: { stop: { city: 'Lyon' } } })
    expect(steps.hotel).toMatchObject({ state: 'completed', providers: [dids.hotel] })
    // the route's stop fed the hotel step; the hotel agent saw the chain user -> car agent -> hotel agent
    expect(booking).toEqual({ booked: true, city: 'Lyon', guest: dids.user, via: dids.car, links: 2 })
    // each provider got a token for its step's skill only
    const delegated = events.flatMap(e => e.type === 'delegated' ? [[e.provider, e.capabilities.map(c => c.skill)]] : [])
    expect(delegated).toEqual([[dids.map, ['geo.route']], [dids.hotel, ['travel.hotel.book']]])
  })
})
