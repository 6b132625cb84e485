/**
 * The verification cache (issue 10, caches): parsed keys and verified token
 * signatures are kept by an owner (the task service, the orchestrator, a
 * caller of `verifyChain`), bounded by its options; only successes are kept,
 * by the CID of the exact signed bytes. The task service is checked over TCP.
 */
import { createIdentity } from '@ioa/interconnect'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { rejectionOf } from '../../../test/util.js'
import { delegate, verifyChain } from '../src/auth/delegation.js'
import { VerificationCache, defaultVerificationCache } from '../src/auth/verification-cache.js'
import { createTaskService } from '../src/tasks/service.js'
import { resolvable, startTaskPair } from './task-pair.js'
import type { Token } from '../src/auth/delegation.js'
import type { HostedAgent, Identity, Interconnect } from '@ioa/interconnect'

const HOUR = 3_600_000

/** A chain user -> a -> b -> c of `skill`, leaf first */
async function chainOf (ids: Identity[], skill: string): Promise<Token[]> {
  const tokens: Token[] = []
  const expiresAt = Date.now() + HOUR
  for (let i = 0; i + 1 < ids.length; i++) {
    tokens.unshift(await delegate(ids[i], {
      audience: ids[i + 1].did, capabilities: [{ skill }], expiresAt, proofs: tokens.slice(0, 1)
    }))
  }
  return tokens
}

describe('VerificationCache', () => {
  let ids: Identity[]
  beforeAll(async () => {
    ids = await Promise.all([0, 1, 2, 3].map(async () => createIdentity()))
  })

  it('keeps the signatures verified with it, within maxSignatures, and leaves the default cache alone', async () => {
    const chain = await chainOf(ids, 'test.*')
    const cache = new VerificationCache({ maxSignatures: 2, maxKeys: 2 })
    const before = defaultVerificationCache.stats().signatures
    const verified = await verifyChain(chain[0], chain.slice(1), { verificationCache: cache })
    expect(verified.path).toHaveLength(3)
    expect(cache.stats()).toMatchObject({ signatures: 2, keys: 2 })
    // the oldest entry went first
    expect(verified.cids.map(cid => cache.hasSignature(cid))).toEqual([false, true, true])
    expect(defaultVerificationCache.stats().signatures).toBe(before)
    // a second owner learns on its own
    const other = new VerificationCache()
    await verifyChain(chain[0], chain.slice(1), { verificationCache: other })
    expect(other.stats().signatures).toBe(3)
  })

  it('never keeps a failed verification, and a different signature is a different entry', async () => {
    const [leaf] = await chainOf(ids.slice(0, 2), 'test.x')
    const cache = new VerificationCache()
    const forged: Token = { payload: leaf.payload, sig: new Uint8Array(leaf.sig) }
    forged.sig[0] ^= 1
    for (let i = 0; i < 2; i++) {
      const err = await rejectionOf(verifyChain(forged, [], { verificationCache: cache }))
      expect(err.name).toBe('InvalidSignatureError')
      expect(err.code).toBe('INVALID_SIGNATURE')
      expect(cache.stats().signatures).toBe(0)
    }
    await verifyChain(leaf, [], { verificationCache: cache })
    expect(cache.stats().signatures).toBe(1)
    // the genuine token is known now; the forged one (same payload) still fails
    expect((await rejectionOf(verifyChain(forged, [], { verificationCache: cache }))).name).toBe('InvalidSignatureError')
    expect(cache.stats().signatures).toBe(1)
  })

  it('refuses bounds that are not positive integers', () => {
    expect(() => new VerificationCache({ maxKeys: 0 })).toThrow(RangeError)
    expect(() => new VerificationCache({ maxSignatures: 1.5 })).toThrow(RangeError)
    expect(() => new VerificationCache({ maxCids: -1 })).toThrow(RangeError)
  })
})

describe('the task service owns its verification cache (over TCP)', () => {
  const closers: Array<() => Promise<unknown>> = []
  let icE: Interconnect
  let icR: Interconnect
  let worker: HostedAgent
  let caller: HostedAgent

  beforeAll(async () => {
    ;({ icE, icR } = await startTaskPair(closers))
    worker = await icE.host({ key: 'worker', name: 'Worker', skills: [{ id: 'test.echo' }] })
    caller = await icR.host({ key: 'caller', name: 'Caller', skills: [{ id: 'test.none' }] })
    await resolvable(icR, worker.did)
  })

  afterAll(async () => {
    for (const close of closers.reverse()) await close().catch(() => {})
  })

  it('verifies the chains of received tasks with the cache it was given, bounded by its options', async () => {
    const cache = new VerificationCache({ maxSignatures: 2 })
    const tsE = createTaskService(icE, { verificationCache: cache })
    const tsR = createTaskService(icR)
    closers.push(async () => tsE.stop(), async () => tsR.stop())
    await tsE.serve(worker.did, 'test.echo', async (input) => input)
    const user = await createIdentity()
    const users = await Promise.all([0, 1].map(async () => createIdentity()))
    const chain = await chainOf([user, ...users, caller.identity], 'test.*')
    const before = defaultVerificationCache.stats().signatures

    const done = await tsR.submitAndWait(caller.did, worker.did, { skill: 'test.echo', input: { n: 1 }, proofs: chain })
    expect(done.state).toBe('completed')
    expect(done.result).toEqual({ n: 1 })
    // three tokens verified, two kept; the envelope's signer and the issuers' keys are parsed here
    expect(cache.stats().signatures).toBe(2)
    expect(cache.stats().keys).toBeGreaterThanOrEqual(3)
    expect(defaultVerificationCache.stats().signatures).toBe(before)

    // the second task reuses what the first one learned, and the bound holds
    const again = await tsR.submitAndWait(caller.did, worker.did, { skill: 'test.echo', input: { n: 2 }, proofs: chain })
    expect(again.state).toBe('completed')
    expect(cache.stats().signatures).toBe(2)
  })

  it('takes bounds for a cache of its own and refuses bad ones', () => {
    expect(() => createTaskService(icE, { verificationCache: { maxKeys: 0 } })).toThrow(RangeError)
  })
})
