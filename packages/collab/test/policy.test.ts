/**
 * Call-time policies and approval records.
 */
import { createIdentity } from '@ioa/interconnect'
import { beforeAll, describe, expect, it } from 'vitest'
import { delegate, verifyChain } from '../src/auth/delegation.js'
import {
  allOf, allowAll, approvalPolicy, approvalSigningBytes, constraintPolicy, createApproval, evaluatePolicy, parseApproval,
  rateLimitPolicy, timeWindowPolicy, verifyApproval, APPROVAL_PREFIX
} from '../src/auth/policy.js'
import { expectErrorCode } from '../../../test/util.js'
import type { Capability, VerifiedChain } from '../src/auth/delegation.js'
import type { Policy, PolicyContext } from '../src/auth/policy.js'
import type { Identity } from '@ioa/interconnect'

let driver: Identity
let car: Identity
let chain: VerifiedChain

beforeAll(async () => {
  driver = await createIdentity()
  car = await createIdentity()
  const token = await delegate(driver, {
    audience: car.did,
    capabilities: [{ skill: 'payment.pay', constraints: { maxAmount: 300, currency: 'EUR' } }],
    expiresAt: Date.now() + 60_000
  })
  chain = await verifyChain(token, [])
})

function ctx (input: unknown, capability: Capability = { skill: 'payment.pay', constraints: { maxAmount: 300, currency: 'EUR' } }, extra: Partial<PolicyContext> = {}): PolicyContext {
  return { chain, capability, caller: car.did, skill: 'payment.pay', input, now: Date.now(), ...extra }
}

describe('constraintPolicy', () => {
  const p = constraintPolicy()

  it('allows an amount within maxAmount in the right currency', async () => {
    expect(await p.decide(ctx({ amount: 300, currency: 'EUR' }))).toEqual({ effect: 'allow' })
    expect(await p.decide(ctx({ amount: 12.5, currency: 'EUR', note: 'x' }))).toEqual({ effect: 'allow' })
  })

  it('denies above the cap, in another currency, or without the constrained fields', async () => {
    for (const input of [
      { amount: 300.01, currency: 'EUR' },
      { amount: 100, currency: 'USD' },
      { currency: 'EUR' },
      { amount: '100', currency: 'EUR' },
      { amount: 100 },
      null,
      [1, 2],
      'pay me'
    ]) {
      const d = await p.decide(ctx(input))
      expect(d.effect, JSON.stringify(input)).toBe('deny')
    }
  })

  it('handles min bounds, lists, equality, no constraints and ignored keys', async () => {
    const cap: Capability = { skill: 'travel.hotel', constraints: { minStars: 3, city: ['Berlin', 'Paris'], smoking: false } }
    expect((await p.decide(ctx({ stars: 4, city: 'Paris', smoking: false }, cap))).effect).toBe('allow')
    expect((await p.decide(ctx({ stars: 2, city: 'Paris', smoking: false }, cap))).effect).toBe('deny')
    expect((await p.decide(ctx({ stars: 4, city: 'Rome', smoking: false }, cap))).effect).toBe('deny')
    expect((await p.decide(ctx({ stars: 4, city: ['Paris', 'Berlin'], smoking: false }, cap))).effect).toBe('allow')
    expect((await p.decide(ctx({ stars: 4, city: 'Paris', smoking: true }, cap))).effect).toBe('deny')
    expect((await p.decide(ctx('anything', { skill: 'x' }))).effect).toBe('allow')
    const ignoring = constraintPolicy({ ignore: ['smoking'] })
    expect((await ignoring.decide(ctx({ stars: 4, city: 'Paris' }, cap))).effect).toBe('allow')
  })
})

describe('rateLimitPolicy', () => {
  it('allows `requests` per caller per sliding window', async () => {
    const p = rateLimitPolicy({ requests: 2, per: 1_000 })
    const t0 = 1_000_000
    expect((await p.decide(ctx(null, undefined, { now: t0 }))).effect).toBe('allow')
    expect((await p.decide(ctx(null, undefined, { now: t0 + 10 }))).effect).toBe('allow')
    expect((await p.decide(ctx(null, undefined, { now: t0 + 20 }))).effect).toBe('deny')
    // another caller has its own budget
    expect((await p.decide(ctx(null, undefined, { now: t0 + 20, caller: driver.did }))).effect).toBe('allow')
    // the window slides
    expect((await p.decide(ctx(null, undefined, { now: t0 + 1_001 }))).effect).toBe('allow')
    expect((await p.decide(ctx(null, undefined, { now: t0 + 1_002 }))).effect).toBe('deny')
  })

  it('tracks a bounded number of callers and validates options', async () => {
    const p = rateLimitPolicy({ requests: 1, per: 60_000, maxCallers: 2 })
    const now = Date.now()
    for (const c of ['a', 'b', 'c']) expect((await p.decide(ctx(null, undefined, { now, caller: c }))).effect).toBe('allow')
    // 'a' was forgotten (least recently seen), so it starts afresh
    expect((await p.decide(ctx(null, undefined, { now, caller: 'a' }))).effect).toBe('allow')
    expect((await p.decide(ctx(null, undefined, { now, caller: 'c' }))).effect).toBe('deny')
    expect(() => rateLimitPolicy({ requests: 0, per: 1 })).toThrow(RangeError)
    expect(() => rateLimitPolicy({ requests: 1, per: 0 })).toThrow(RangeError)
  })
})

describe('timeWindowPolicy', () => {
  const at = (h: number, m = 0): number => Date.UTC(2025, 0, 1, h, m)

  it('allows only within the hours, wrapping midnight, with a UTC offset', async () => {
    const office = timeWindowPolicy({ from: 9, to: 17 })
    expect((await office.decide(ctx(null, undefined, { now: at(9) }))).effect).toBe('allow')
    expect((await office.decide(ctx(null, undefined, { now: at(16, 59) }))).effect).toBe('allow')
    expect((await office.decide(ctx(null, undefined, { now: at(17) }))).effect).toBe('deny')
    expect((await office.decide(ctx(null, undefined, { now: at(3) }))).effect).toBe('deny')
    const night = timeWindowPolicy({ from: 22, to: 6 })
    expect((await night.decide(ctx(null, undefined, { now: at(23) }))).effect).toBe('allow')
    expect((await night.decide(ctx(null, undefined, { now: at(5) }))).effect).toBe('allow')
    expect((await night.decide(ctx(null, undefined, { now: at(12) }))).effect).toBe('deny')
    const berlin = timeWindowPolicy({ from: 9, to: 17, utcOffsetMinutes: 60 })
    expect((await berlin.decide(ctx(null, undefined, { now: at(8) }))).effect).toBe('allow')
    expect((await berlin.decide(ctx(null, undefined, { now: at(16) }))).effect).toBe('deny')
    expect(() => timeWindowPolicy({ from: 24, to: 1 })).toThrow(RangeError)
  })
})

describe('combinators', () => {
  const deny: Policy = { decide: () => ({ effect: 'deny', reason: 'no' }) }
  const approve = approvalPolicy(c => (c.input as { amount: number }).amount > 100, 'large payment')

  it('allOf: first deny wins, then approve, else allow', async () => {
    expect(await allOf().decide(ctx({}))).toEqual({ effect: 'allow' })
    expect(await allOf(allowAll(), approve).decide(ctx({ amount: 150 }))).toEqual({ effect: 'approve', reason: 'large payment' })
    expect(await allOf(approve, deny).decide(ctx({ amount: 150 }))).toEqual({ effect: 'deny', reason: 'no' })
    expect(await allOf(constraintPolicy(), approve).decide(ctx({ amount: 50, currency: 'EUR' }))).toEqual({ effect: 'allow' })
    expect((await allOf(constraintPolicy(), approve).decide(ctx({ amount: 500, currency: 'EUR' }))).effect).toBe('deny')
  })

  it('evaluatePolicy: a throwing or broken policy denies', async () => {
    expect(await evaluatePolicy(undefined, ctx({}))).toEqual({ effect: 'allow' })
    expect((await evaluatePolicy({ decide: () => { throw new Error('boom') } }, ctx({}))).effect).toBe('deny')
    expect((await evaluatePolicy({ decide: () => ({ effect: 'maybe' }) as any }, ctx({}))).effect).toBe('deny')
    expect((await evaluatePolicy({ decide: async () => undefined as any }, ctx({}))).effect).toBe('deny')
  })
})

describe('approval records', () => {
  const action = 'bafyreigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi'

  it('are signed by the root over the prefix and verify for their task and action', async () => {
    const a = await createApproval(driver, { task: 'task-1', action })
    expect(a.payload).toMatchObject({ v: 1, iss: driver.did, task: 'task-1', action })
    const bytes = approvalSigningBytes(a.payload)
    expect(new TextDecoder().decode(bytes.subarray(0, APPROVAL_PREFIX.length))).toBe('ioa:approval:v1\n')
    expect(await verifyApproval(a, { root: driver.did, task: 'task-1', action })).toEqual(a)
  })

  it('rejects other issuers, forgeries, other tasks/actions, expired and malformed records', async () => {
    const a = await createApproval(driver, { task: 'task-1', action })
    await expectErrorCode(verifyApproval(await createApproval(car, { task: 'task-1', action }), { root: driver.did, task: 'task-1', action }), 'UNAUTHORIZED')
    // the car pretending to be the driver: signature does not verify
    const forged = { payload: a.payload, sig: (await createApproval(car, { task: 'task-1', action })).sig }
    await expectErrorCode(verifyApproval(forged, { root: driver.did, task: 'task-1', action }), 'INVALID_SIGNATURE')
    await expectErrorCode(verifyApproval(a, { root: driver.did, task: 'task-2', action }), 'APPROVAL_REQUIRED')
    await expectErrorCode(verifyApproval(a, { root: driver.did, task: 'task-1', action: action.replace('a', 'b') }), 'APPROVAL_REQUIRED')
    const old = await createApproval(driver, { task: 'task-1', action, expiresAt: Date.now() - 60_000 })
    await expectErrorCode(verifyApproval(old, { root: driver.did, task: 'task-1', action }), 'APPROVAL_REQUIRED')
    for (const bad of [null, {}, { payload: a.payload }, { ...a, x: 1 }, { ...a, payload: { ...a.payload, v: 2 } }, { ...a, payload: { ...a.payload, task: '' } }]) {
      expect(() => parseApproval(bad)).toThrow(expect.objectContaining({ code: 'INVALID_ENVELOPE' }))
    }
  })
})
