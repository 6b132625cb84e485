/**
 * Ranking and filtering of discovered agents.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { beforeAll, describe, expect, it } from 'vitest'
import { createIdentity, defaultRanker, matchQuery, parseCard, schemaSatisfies } from '../src/index.js'
import type { AgentCard, DiscoveryQuery, RankInput, SkillInit } from '../src/index.js'

const NOW = 1_767_225_600_000

let did: string
let peer: string

beforeAll(async () => {
  did = (await createIdentity()).did
  peer = peerIdFromPrivateKey(await generateKeyPair('Ed25519')).toString()
})

function card (skills: SkillInit[], extra: { domain?: string, issuedAt?: number } = {}): AgentCard {
  const issuedAt = extra.issuedAt ?? NOW
  return parseCard({
    v: 1,
    id: did,
    name: 'agent',
    domain: extra.domain ?? 'hotels.example',
    skills,
    peer,
    issuedAt,
    expiresAt: issuedAt + 3_600_000
  })
}

function candidate (c: AgentCard, query: DiscoveryQuery, more: Partial<RankInput> = {}): RankInput {
  return { card: c, skills: matchQuery(c, query), alive: true, local: false, ...more }
}

describe('defaultRanker', () => {
  const ranker = defaultRanker()

  it('ranks an exact match above a prefix match', () => {
    const q = { capability: 'travel.hotel' }
    const exact = ranker.score(candidate(card([{ id: 'travel.hotel' }]), q, { latency: 20 }), q, NOW)
    const child = ranker.score(candidate(card([{ id: 'travel.hotel.booking' }]), q, { latency: 20 }), q, NOW)
    const grandchild = ranker.score(candidate(card([{ id: 'travel.hotel.booking.instant' }]), q, { latency: 20 }), q, NOW)
    expect(exact).toBeGreaterThan(child)
    expect(child).toBeGreaterThan(grandchild)
  })

  it('uses the best matching skill of a card', () => {
    const q = { capability: 'travel.hotel' }
    const both = ranker.score(candidate(card([{ id: 'travel.hotel.booking' }, { id: 'travel.hotel' }]), q), q, NOW)
    const exact = ranker.score(candidate(card([{ id: 'travel.hotel' }]), q), q, NOW)
    expect(both).toBeCloseTo(exact, 10)
  })

  it('ranks lower latency above higher latency', () => {
    const q = { capability: 'travel' }
    const c = card([{ id: 'travel' }])
    const fast = ranker.score(candidate(c, q, { latency: 5 }), q, NOW)
    const slow = ranker.score(candidate(c, q, { latency: 500 }), q, NOW)
    const unknown = ranker.score(candidate(c, q), q, NOW)
    const local = ranker.score(candidate(c, q, { local: true, latency: 1000 }), q, NOW)
    expect(fast).toBeGreaterThan(slow)
    expect(local).toBeGreaterThan(fast)
    // unmeasured latency scores as half
    expect(unknown).toBeCloseTo(ranker.score(candidate(c, q, { latency: 50 }), q, NOW), 10)
  })

  it('ranks fresher cards higher', () => {
    const q = { capability: 'travel' }
    const fresh = ranker.score(candidate(card([{ id: 'travel' }], { issuedAt: NOW }), q, { latency: 10 }), q, NOW)
    const old = ranker.score(candidate(card([{ id: 'travel' }], { issuedAt: NOW - 1_800_000 }), q, { latency: 10 }), q, NOW)
    expect(fresh).toBeGreaterThan(old)
  })

  it('scores a dead peer 0', () => {
    const q = { capability: 'travel' }
    expect(ranker.score(candidate(card([{ id: 'travel' }]), q, { alive: false, latency: 1, local: true }), q, NOW)).toBe(0)
  })

  it('follows the documented formula', () => {
    const q = { capability: 'travel.hotel' }
    // match 1/(1+1) = 0.5; freshness 600000/(600000+600000) = 0.5; latency 50/(50+150) = 0.25
    const c = card([{ id: 'travel.hotel.booking' }], { issuedAt: NOW - 600_000 })
    // no record of the agent: history 0
    const score = ranker.score(candidate(c, q, { latency: 150 }), q, NOW)
    expect(score).toBeCloseTo(0.4 * 0.5 + 0.3 * 0 + 0.2 * 0.25 + 0.1 * 0.5, 10)
    // 3 answered, 1 failed: history 3/(3+1+1) = 0.6; the smoothed rtt (50 ms: 0.5) replaces the measured one
    const known = ranker.score(candidate(c, q, { latency: 150, history: { successes: 3, failures: 1, rtt: 50 } }), q, NOW)
    expect(known).toBeCloseTo(0.4 * 0.5 + 0.3 * 0.6 + 0.2 * 0.5 + 0.1 * 0.5, 10)
    // best case: exact, fresh, local
    const best = ranker.score(candidate(card([{ id: 'travel.hotel' }]), q, { local: true }), q, NOW)
    expect(best).toBeCloseTo(1, 10)
  })

  it('scores within [0, 1] and a card from the future counts as fresh', () => {
    const q = { capability: 'travel' }
    const s = ranker.score(candidate(card([{ id: 'travel' }], { issuedAt: NOW + 30_000 }), q, { latency: 0, history: { successes: 1_000, failures: 0 } }), q, NOW)
    expect(s).toBeGreaterThan(0.99)
    expect(s).toBeLessThanOrEqual(1)
    // a card from the future is no fresher than one issued now
    const now = ranker.score(candidate(card([{ id: 'travel' }], { issuedAt: NOW }), q, { latency: 3 }), q, NOW)
    const future = ranker.score(candidate(card([{ id: 'travel' }], { issuedAt: NOW + 50_000 }), q, { latency: 3 }), q, NOW)
    expect(future).toBeCloseTo(now, 10)
  })

  it('freshness alone never beats an agent with a good record (spec 7.1)', () => {
    const q = { capability: 'travel.hotel.booking' }
    // the real agent: card re-signed 30 minutes ago (half its TTL), answered once
    const real = card([{ id: 'travel.hotel.booking' }], { issuedAt: NOW - 1_800_000 })
    // a newcomer's card with the same skill, issued 50 s in the future (within the clock skew)
    const rogue = card([{ id: 'travel.hotel.booking' }], { issuedAt: NOW + 50_000 })
    for (const rtt of [1, 20, 200]) {
      const known = ranker.score(candidate(real, q, { latency: rtt, history: { successes: 1, failures: 0, rtt } }), q, NOW)
      const fresh = ranker.score(candidate(rogue, q, { latency: rtt }), q, NOW)
      expect(known).toBeGreaterThan(fresh)
    }
    // even a card a day old
    const stale = card([{ id: 'travel.hotel.booking' }], { issuedAt: NOW - 86_400_000 })
    expect(ranker.score(candidate(stale, q, { latency: 5, history: { successes: 1, failures: 0, rtt: 5 } }), q, NOW))
      .toBeGreaterThan(ranker.score(candidate(rogue, q, { latency: 5 }), q, NOW))
    // between two agents never seen, the fresher card still wins
    expect(ranker.score(candidate(rogue, q, { latency: 5 }), q, NOW)).toBeGreaterThan(ranker.score(candidate(real, q, { latency: 5 }), q, NOW))
  })

  it('ranks failures down', () => {
    const q = { capability: 'travel' }
    const c = card([{ id: 'travel' }])
    const good = ranker.score(candidate(c, q, { history: { successes: 5, failures: 0 } }), q, NOW)
    const flaky = ranker.score(candidate(c, q, { history: { successes: 5, failures: 5 } }), q, NOW)
    const bad = ranker.score(candidate(c, q, { history: { successes: 0, failures: 5 } }), q, NOW)
    const unknown = ranker.score(candidate(c, q), q, NOW)
    expect(good).toBeGreaterThan(flaky)
    expect(flaky).toBeGreaterThan(bad)
    expect(bad).toBeCloseTo(unknown, 10)
  })

  it('takes custom weights', () => {
    const q = { capability: 'travel' }
    const latencyOnly = defaultRanker({ matchWeight: 0, historyWeight: 0, freshnessWeight: 0, latencyWeight: 1, latencyHalf: 100 })
    expect(latencyOnly.score(candidate(card([{ id: 'travel.x.y' }]), q, { latency: 100 }), q, NOW)).toBeCloseTo(0.5, 10)
  })
})

describe('schemaSatisfies', () => {
  const obj = (required: string[], properties: Record<string, unknown>, type: string | undefined = 'object'): Record<string, unknown> =>
    ({ ...(type != null ? { type } : {}), required, properties })

  it.each<[string, Record<string, unknown> | undefined, Record<string, unknown> | undefined, boolean]>([
    ['no consumer schema', { type: 'string' }, undefined, true],
    ['neither schema', undefined, undefined, true],
    ['no provider, consumer requires nothing and has no type', undefined, { properties: { a: {} } }, true],
    ['no provider, consumer requires a property', undefined, obj(['a'], { a: {} }), false],
    ['no provider, consumer names a type', undefined, { type: 'string' }, false],
    ['all required present', obj(['a', 'b'], { a: { type: 'string' }, b: { type: 'integer' }, c: {} }), obj(['a', 'b'], { a: { type: 'string' }, b: { type: 'integer' } }), true],
    ['required property missing', obj([], { a: { type: 'string' } }), obj(['a', 'b'], { a: {}, b: {} }), false],
    ['property type mismatch', obj([], { a: { type: 'string' } }), obj(['a'], { a: { type: 'number' } }), false],
    ['provider leaves the type open', obj([], { a: {} }), obj(['a'], { a: { type: 'number' } }), true],
    ['consumer leaves the type open', obj([], { a: { type: 'string' } }), obj(['a'], { a: {} }), true],
    ['top-level types agree', { type: 'string' }, { type: 'string' }, true],
    ['top-level types differ', { type: 'string' }, { type: 'object' }, false],
    ['optional consumer properties are not needed', obj([], {}), obj([], { a: { type: 'string' } }), true],
    ['malformed required is ignored', { type: 'object' }, { type: 'object', required: 'a' }, true],
    ['malformed properties count as none', { type: 'object', properties: [] }, obj(['a'], { a: {} }), false]
  ])('%s', (_name, provider, consumer, expected) => {
    expect(schemaSatisfies(provider, consumer)).toBe(expected)
  })
})

describe('matchQuery', () => {
  let c: AgentCard
  beforeAll(() => {
    c = card([
      {
        id: 'travel.hotel.booking',
        tags: ['hotel', 'instant'],
        inputSchema: { type: 'object', required: ['near', 'nights'], properties: { near: { type: 'string' }, nights: { type: 'integer' } } },
        outputSchema: { type: 'object', required: ['reservation'], properties: { reservation: { type: 'string' }, price: { type: 'number' } } }
      },
      { id: 'travel.hotel.search', tags: ['hotel'] },
      { id: 'payment.card', tags: ['card'] }
    ])
  })
  const ids = (q: DiscoveryQuery): string[] => matchQuery(c, q).map(s => s.id)

  it('matches by capability prefix', () => {
    expect(ids({ capability: 'travel' })).toEqual(['travel.hotel.booking', 'travel.hotel.search'])
    expect(ids({ capability: 'travel.hotel.booking' })).toEqual(['travel.hotel.booking'])
    expect(ids({ capability: 'payment' })).toEqual(['payment.card'])
    expect(ids({ capability: 'travel.flight' })).toEqual([])
    expect(ids({ capability: 'trav' })).toEqual([])
  })

  it('requires every tag on the same skill', () => {
    expect(ids({ capability: 'travel', tags: ['hotel'] })).toEqual(['travel.hotel.booking', 'travel.hotel.search'])
    expect(ids({ capability: 'travel', tags: ['hotel', 'instant'] })).toEqual(['travel.hotel.booking'])
    expect(ids({ capability: 'travel', tags: ['instant', 'card'] })).toEqual([])
    expect(ids({ capability: 'travel', tags: [] })).toHaveLength(2)
  })

  it('filters by domain', () => {
    expect(ids({ capability: 'travel', domain: 'hotels.example' })).toHaveLength(2)
    expect(ids({ capability: 'travel', domain: 'other.example' })).toEqual([])
  })

  it('keeps skills whose input the caller can provide', () => {
    const full = { type: 'object', required: ['near', 'nights'], properties: { near: { type: 'string' }, nights: { type: 'integer' } } }
    // the search skill has no input schema: any input does
    expect(ids({ capability: 'travel', input: full })).toEqual(['travel.hotel.booking', 'travel.hotel.search'])
    const partial = { type: 'object', properties: { near: { type: 'string' } } }
    expect(ids({ capability: 'travel', input: partial })).toEqual(['travel.hotel.search'])
    const wrongType = { type: 'object', properties: { near: { type: 'string' }, nights: { type: 'string' } } }
    expect(ids({ capability: 'travel.hotel.booking', input: wrongType })).toEqual([])
  })

  it('keeps skills whose output covers what the caller needs', () => {
    expect(ids({ capability: 'travel', output: { type: 'object', required: ['reservation'], properties: { reservation: { type: 'string' } } } }))
      .toEqual(['travel.hotel.booking'])
    expect(ids({ capability: 'travel', output: { type: 'object', required: ['price'], properties: { price: { type: 'number' } } } }))
      .toEqual(['travel.hotel.booking'])
    expect(ids({ capability: 'travel', output: { type: 'object', required: ['refund'], properties: {} } })).toEqual([])
    // a caller that needs nothing in particular accepts skills without an output schema
    expect(ids({ capability: 'travel', output: { properties: {} } })).toEqual(['travel.hotel.booking', 'travel.hotel.search'])
  })

  it('combines every filter', () => {
    expect(ids({
      capability: 'travel.hotel',
      tags: ['hotel'],
      domain: 'hotels.example',
      input: { type: 'object', properties: { near: { type: 'string' }, nights: { type: 'integer' } } },
      output: { type: 'object', required: ['reservation'], properties: { reservation: { type: 'string' } } }
    })).toEqual(['travel.hotel.booking'])
  })
})
