/**
 * Capability snapshots and the gossip index without a network: the spec's
 * vectors (spec/interconnect.md 12.5), typed decode errors, and the index's
 * replace, prefix, expiry and size rules.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { describe, expect, it } from 'vitest'
import { errorOf, fromHex, readSpecBlock, toHex } from '../../../test/util.js'
import { CapabilityIndex } from '../src/gossip/cap-index.js'
import { decodeSnapshot, encodeSnapshot, gossipTopic } from '../src/index.js'
import type { CapabilitySnapshot } from '../src/index.js'

interface GossipVectors {
  topic: { domain: string, name: string }
  snapshot: { value: CapabilitySnapshot, hex: string }
  withdrawal: { value: CapabilitySnapshot, hex: string }
  addressed: { value: CapabilitySnapshot, hex: string }
  refused: Array<{ why: string, value: Record<string, unknown>, error: string }>
}

const v = readSpecBlock<GossipVectors>('interconnect.md', 'gossip-vectors')
const LIMITS = { maxBytes: 65_536, maxCapabilities: 1_024 }

describe('capability snapshots (spec vectors)', () => {
  it('names the topic of a domain', () => {
    expect(gossipTopic(v.topic.domain)).toBe(v.topic.name)
  })

  it.each(['snapshot', 'withdrawal', 'addressed'] as const)('encodes and decodes the %s vector', (name) => {
    const { value, hex } = v[name]
    expect(toHex(encodeSnapshot(value))).toBe(hex)
    expect(decodeSnapshot(fromHex(hex), LIMITS)).toEqual(value)
  })

  it.each(v.refused)('refuses a snapshot where $why', ({ value, error }) => {
    const err = errorOf(() => decodeSnapshot(dagCbor.encode(value), LIMITS))
    expect(err.code).toBe(error)
    expect(err.name).toBe('InvalidSnapshotError')
  })

  it('refuses oversized snapshots before parsing them, and ignores unknown keys', () => {
    const big = errorOf(() => decodeSnapshot(new Uint8Array(65_537), LIMITS))
    expect(big).toMatchObject({ name: 'SnapshotTooLargeError', code: 'SNAPSHOT_TOO_LARGE' })
    const many = errorOf(() => decodeSnapshot(encodeSnapshot({ v: 1, seq: 1, ttl: 1, caps: ['a', 'b', 'c'] }), { maxBytes: 1_000, maxCapabilities: 2 }))
    expect(many).toMatchObject({ name: 'SnapshotTooLargeError', code: 'SNAPSHOT_TOO_LARGE' })
    expect(decodeSnapshot(dagCbor.encode({ v: 1, seq: 5, ttl: 9, caps: ['a'], extra: 'x' }), LIMITS)).toEqual({ v: 1, seq: 5, ttl: 9, caps: ['a'] })
  })
})

describe('capability index', () => {
  const snap = (seq: number, caps: string[], ttl = 10_000): CapabilitySnapshot => ({ v: 1, seq, ttl, caps })

  it('replaces by seq, matches prefixes, expires and bounds the names held', () => {
    const changed: string[] = []
    const index = new CapabilityIndex({ maxAnnouncers: 10, maxNames: 6, maxTtl: 5_000, onChange: names => { changed.push(...names) } })
    expect(index.apply('p1', snap(2, ['travel.hotel.booking']), 0)).toBe('stored')
    expect(index.peers('travel', 0)).toEqual(['p1'])
    expect(index.peers('travel.hotel.booking', 0)).toEqual(['p1'])
    expect(index.peers('travel.hotel.book', 0)).toEqual([])
    expect(changed.sort()).toEqual(['travel', 'travel.hotel', 'travel.hotel.booking'])
    expect(index.apply('p1', snap(2, ['geo']), 0)).toBe('stale')
    expect(index.apply('p1', snap(1, ['geo']), 0)).toBe('stale')
    expect(index.apply('p1', snap(3, ['travel.car']), 0)).toBe('stored')
    expect(index.peers('travel.hotel', 0)).toEqual([])
    expect(index.peers('travel', 0)).toEqual(['p1'])
    // ttl 10 s clamped to maxTtl 5 s
    expect(index.peers('travel', 4_999)).toEqual(['p1'])
    expect(index.peers('travel', 5_000)).toEqual([])
    // 2 names of p1 + 3 of p2 + 3 of p3 > 6: p1, the least recently updated, goes
    index.apply('p2', snap(1, ['a.b.c']), 0)
    index.apply('p3', snap(1, ['x.y.z']), 0)
    expect(index.peers('travel', 0)).toEqual([])
    expect(index.peers('a', 0)).toEqual(['p2'])
    expect(index.stats()).toEqual({ announcers: 2, names: 6, evicted: 1 })
    index.prune(10_000)
    expect(index.stats()).toEqual({ announcers: 0, names: 0, evicted: 1 })
  })
})

describe('capability index: addresses', () => {
  it('keeps the announcer\'s own addresses of its latest snapshot, not those naming another peer, until it expires', () => {
    const index = new CapabilityIndex({ maxAnnouncers: 10, maxNames: 100, maxTtl: 5_000 })
    const addrs = ['/ip4/192.0.2.7/tcp/4001', '/ip4/192.0.2.7/tcp/4002/p2p/p1', '/ip4/192.0.2.8/tcp/4001/p2p/p2']
    index.apply('p1', { v: 1, seq: 1, ttl: 5_000, caps: ['geo'], addrs }, 0)
    expect(index.addresses('p1', 0)).toEqual(addrs.slice(0, 2))
    expect(index.addresses('p2', 0)).toEqual([])
    // a withdrawal lists none
    index.apply('p1', { v: 1, seq: 2, ttl: 5_000, caps: [] }, 0)
    expect(index.addresses('p1', 0)).toEqual([])
    index.apply('p1', { v: 1, seq: 3, ttl: 5_000, caps: ['geo'], addrs: addrs.slice(0, 1) }, 0)
    expect(index.addresses('p1', 4_999)).toEqual(addrs.slice(0, 1))
    expect(index.addresses('p1', 5_000)).toEqual([])
  })
})
