/**
 * Capability names: grammar, prefixes, matching and DHT keys.
 */
import { sha256 } from 'multiformats/hashes/sha2'
import { CID } from 'multiformats/cid'
import { describe, expect, it } from 'vitest'
import {
  agentCid, assertCapability, capabilityCid, capabilityMatches, capabilityPrefixes, isCapability,
  MAX_CAPABILITY_DEPTH, MAX_CAPABILITY_LENGTH
} from '../src/index.js'
import { errorOf, rejectionOf } from '../../../test/util.js'

describe('capability grammar', () => {
  const valid = [
    'travel',
    'travel.hotel',
    'travel.hotel.booking',
    'a',
    'a1',
    'x-ray',
    'a-',
    'map.route-planning',
    'payment.card.v2',
    'robot.patrol.alert',
    'mcp.tool.fs-read',
    'a.b.c.d.e.f.g.h',
    'a' + 'b'.repeat(31),
    ['a'.repeat(32), 'b'.repeat(32), 'c'.repeat(32), 'd'.repeat(29)].join('.')
  ]
  it.each(valid)('accepts %j', (name) => {
    expect(isCapability(name)).toBe(true)
    expect(() => { assertCapability(name) }).not.toThrow()
  })

  const invalid: Array<[string, unknown]> = [
    ['empty', ''],
    ['upper case', 'Travel'],
    ['upper case segment', 'travel.Hotel'],
    ['leading digit', '1travel'],
    ['segment with leading digit', 'travel.2hotel'],
    ['leading dash', '-travel'],
    ['underscore', 'travel_hotel'],
    ['space', 'travel hotel'],
    ['slash', 'travel/hotel'],
    ['leading dot', '.travel'],
    ['trailing dot', 'travel.'],
    ['double dot', 'travel..hotel'],
    ['only a dot', '.'],
    ['non-ASCII', 'réservation'],
    ['segment of 33 characters', 'a' + 'b'.repeat(32)],
    ['nine segments', 'a.b.c.d.e.f.g.h.i'],
    ['129 characters', ['a'.repeat(32), 'b'.repeat(32), 'c'.repeat(32), 'd'.repeat(30)].join('.')],
    ['wildcard', 'travel.*'],
    ['number', 42],
    ['null', null],
    ['undefined', undefined],
    ['array', ['travel']]
  ]
  it.each(invalid)('rejects %s', (_why, name) => {
    expect(isCapability(name)).toBe(false)
    const err = errorOf(() => { assertCapability(name) })
    expect(err.name).toBe('InvalidCapabilityError')
    expect(err.code).toBe('INVALID_CAPABILITY')
  })

  it('exports its limits', () => {
    expect(MAX_CAPABILITY_DEPTH).toBe(8)
    expect(MAX_CAPABILITY_LENGTH).toBe(128)
    expect(['a'.repeat(32), 'b'.repeat(32), 'c'.repeat(32), 'd'.repeat(29)].join('.').length).toBe(128)
  })
})

describe('capability prefixes and matching', () => {
  it('lists every prefix, shortest first', () => {
    expect(capabilityPrefixes('travel')).toEqual(['travel'])
    expect(capabilityPrefixes('travel.hotel.booking')).toEqual(['travel', 'travel.hotel', 'travel.hotel.booking'])
    expect(capabilityPrefixes('a.b.c.d.e.f.g.h')).toHaveLength(8)
  })

  it('rejects invalid names when listing prefixes', () => {
    expect(errorOf(() => capabilityPrefixes('Travel.hotel')).name).toBe('InvalidCapabilityError')
  })

  it('matches a name with itself and with its prefixes at segment boundaries', () => {
    expect(capabilityMatches('travel', 'travel')).toBe(true)
    expect(capabilityMatches('travel', 'travel.hotel')).toBe(true)
    expect(capabilityMatches('travel', 'travel.hotel.booking')).toBe(true)
    expect(capabilityMatches('travel.hotel', 'travel.hotel.booking')).toBe(true)
    expect(capabilityMatches('travel.hotel.booking', 'travel.hotel.booking')).toBe(true)
  })

  it('does not match across segment boundaries, siblings or upwards', () => {
    expect(capabilityMatches('travel', 'travelling')).toBe(false)
    expect(capabilityMatches('travel.hotel', 'travel.hotels')).toBe(false)
    expect(capabilityMatches('travel.hotel', 'travel.flight')).toBe(false)
    expect(capabilityMatches('travel.hotel.booking', 'travel.hotel')).toBe(false)
    expect(capabilityMatches('hotel', 'travel.hotel')).toBe(false)
  })
})

describe('DHT keys', () => {
  it('derives a CIDv1 raw sha2-256 key from the domain-separated name', async () => {
    const cid = await capabilityCid('travel.hotel')
    expect(cid.version).toBe(1)
    expect(cid.code).toBe(0x55)
    expect(cid.multihash.code).toBe(0x12)
    const digest = await sha256.digest(new TextEncoder().encode('ioa:capability:v1:travel.hotel'))
    expect(cid.equals(CID.createV1(0x55, digest))).toBe(true)
    expect(cid.toString()).toMatch(/^bafkrei/)
  })

  it('gives each name its own key', async () => {
    const names = ['travel', 'travel.hotel', 'travel.hotel.booking', 'travel.flight']
    const cids = await Promise.all(names.map(async n => (await capabilityCid(n)).toString()))
    expect(new Set(cids).size).toBe(names.length)
    expect((await capabilityCid('travel')).toString()).toBe(cids[0])
  })

  it('refuses to derive a key for an invalid name', async () => {
    expect((await rejectionOf(capabilityCid('Travel'))).name).toBe('InvalidCapabilityError')
    expect((await rejectionOf(capabilityCid(''))).name).toBe('InvalidCapabilityError')
  })

  it('derives agent keys in their own namespace', async () => {
    const did = 'did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK'
    const cid = await agentCid(did)
    const digest = await sha256.digest(new TextEncoder().encode('ioa:agent:v1:' + did))
    expect(cid.equals(CID.createV1(0x55, digest))).toBe(true)
    expect(cid.toString()).not.toBe((await capabilityCid('travel')).toString())
  })
})
