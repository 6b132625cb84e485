/**
 * The snapshot vectors of spec/management.md 1.8, read at run time: the node
 * key of the seed, the signing bytes of the payload, the signature, and a
 * tampered payload refused.
 */
import { identityFromPrivateKey } from '@ioa/interconnect'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { describe, expect, it } from 'vitest'
import { ed25519KeyFromSeed, expectErrorCode, fromHex, readSpecBlock, toHex } from '../../../test/util.js'
import { signSnapshot, snapshotSigningBytes, verifySnapshot } from '../src/index.js'
import type { SnapshotPayload } from '../src/index.js'

interface Vectors {
  seed: string
  did: string
  peer: string
  payload: SnapshotPayload
  signingBytes: string
  signature: string
  tampered: { field: keyof SnapshotPayload, value: unknown, error: string }
  withProofs: { proofs: NonNullable<SnapshotPayload['proofs']>, signingBytes: string, signature: string }
}

const v = readSpecBlock<Vectors>('management.md', 'vectors')

describe('management snapshot vectors (spec/management.md 1.8)', () => {
  it('the seed gives the node did and peer id; the payload gives the signing bytes and the signature', async () => {
    const key = await ed25519KeyFromSeed(v.seed)
    const node = identityFromPrivateKey(key)
    expect(node.did).toBe(v.did)
    expect(peerIdFromPrivateKey(key).toString()).toBe(v.peer)
    expect(toHex(snapshotSigningBytes(v.payload))).toBe(v.signingBytes)
    const signed = await signSnapshot(node, v.payload)
    expect(toHex(signed.sig)).toBe(v.signature)
    const checked = await verifySnapshot({ payload: v.payload, sig: fromHex(v.signature) }, { node: v.did })
    expect(checked.payload).toEqual(v.payload)
  })

  it('the payload with the optional proofs field gives its signing bytes and signature; a malformed proof is refused', async () => {
    const node = identityFromPrivateKey(await ed25519KeyFromSeed(v.seed))
    const payload = { ...v.payload, proofs: v.withProofs.proofs }
    expect(toHex(snapshotSigningBytes(payload))).toBe(v.withProofs.signingBytes)
    expect(toHex((await signSnapshot(node, payload)).sig)).toBe(v.withProofs.signature)
    const sig = fromHex(v.withProofs.signature)
    expect((await verifySnapshot({ payload, sig }, { node: v.did })).payload.proofs).toEqual(v.withProofs.proofs)
    await expectErrorCode(verifySnapshot({ payload: { ...payload, proofs: [{ ...v.withProofs.proofs[0], token: 'x' }] }, sig }), 'INVALID_NODE_SNAPSHOT')
    await expectErrorCode(verifySnapshot({ payload: { ...payload, proofs: [] }, sig }), 'INVALID_NODE_SNAPSHOT')
    await expectErrorCode(verifySnapshot({ payload: { ...payload, proofs: Array.from({ length: 65 }, () => v.withProofs.proofs[0]) }, sig }), 'INVALID_NODE_SNAPSHOT')
  })

  it('a tampered payload, a foreign signer and a malformed snapshot are refused', async () => {
    const sig = fromHex(v.signature)
    await expectErrorCode(verifySnapshot({ payload: { ...v.payload, [v.tampered.field]: v.tampered.value }, sig }), v.tampered.error)
    await expectErrorCode(verifySnapshot({ payload: v.payload, sig }, { node: v.payload.agents[0].did }), 'INVALID_NODE_SNAPSHOT')
    await expectErrorCode(verifySnapshot({ payload: { ...v.payload, extra: 1 }, sig }), 'INVALID_NODE_SNAPSHOT')
    await expectErrorCode(verifySnapshot({ payload: v.payload, sig: sig.subarray(1) }), 'INVALID_NODE_SNAPSHOT')
    await expectErrorCode(verifySnapshot({ payload: { ...v.payload, agents: Array.from({ length: 257 }, () => v.payload.agents[0]) }, sig }), 'INVALID_NODE_SNAPSHOT')
  })
})
