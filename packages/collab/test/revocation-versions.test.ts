/**
 * Versions of the revocation protocol over TCP (spec/collab-delegation.md,
 * section 8.3): a current node floods on `/ioa/revocation/1.1.0`; a peer
 * that speaks only `/ioa/revocation/1.0.0` (simulated with a bare messaging
 * handler and the strict parse of that version, which refuses `exp`) still
 * gets the records without `exp` and is not sent the others; 1.0.0 inbound
 * stays served.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { createIdentity } from '@ioa/interconnect'
import { createTransportNode } from '@ioa/transport'
import { MemoryDatastore } from 'datastore-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { delegate } from '../src/auth/delegation.js'
import { InvalidTokenError } from '../src/errors.js'
import {
  ANNOUNCE_METHOD, REVOCATION_PROTOCOL, REVOCATION_PROTOCOL_1_0, RevocationStore, createRevocation,
  createRevocationService, encodeRevocation, revocationCid, verifyRevocation
} from '../src/auth/revocation.js'
import { delay, until } from '../../../test/util.js'
import type { Capability, Token } from '../src/auth/delegation.js'
import type { Revocation, RevocationService } from '../src/auth/revocation.js'
import type { Identity } from '@ioa/interconnect'
import type { TransportNode } from '@ioa/transport'
import type { PeerId } from '@libp2p/interface'

const HOUR = 3_600_000
const PAY: Capability = { skill: 'payment.pay', constraints: { maxAmount: 300, currency: ['EUR'] } }

/** The record check of a 1.0.0 peer: no key beyond v, iss, revoke, at */
async function oldStrictParse (payload: unknown): Promise<Revocation> {
  const value = dagCbor.decode(payload as Uint8Array) as Revocation
  const extra = Object.keys(value.payload).filter(k => !['v', 'iss', 'revoke', 'at'].includes(k))
  if (extra.length > 0) throw new InvalidTokenError(`Unknown fields in revocation payload: ${extra.join(', ')}`)
  return verifyRevocation(value)
}

const cidOf = async (rev: Revocation): Promise<string> => (await revocationCid(rev)).toString()
const streamProtocols = (from: TransportNode, to: PeerId): string[] =>
  from.getConnections(to).flatMap(c => c.streams.map(s => s.protocol ?? ''))

describe('revocation protocol versions over TCP', () => {
  let user: Identity
  let A: TransportNode // current: publishes
  let O: TransportNode // old: serves only /ioa/revocation/1.0.0, strictly
  let N: TransportNode // current
  let services: RevocationService[]
  let stores: RevocationStore[]
  /** what O accepted, and what it refused */
  const oldAccepted: Revocation[] = []
  const oldRefused: string[] = []

  const tokenOf = async (): Promise<Token> =>
    delegate(user, { audience: (await createIdentity()).did, capabilities: [PAY], expiresAt: Date.now() + HOUR })

  beforeAll(async () => {
    user = await createIdentity()
    ;[A, O, N] = await Promise.all([0, 1, 2].map(async () => createTransportNode({ transports: ['tcp'] })))
    stores = await Promise.all([A, N].map(async () => RevocationStore.open(new MemoryDatastore())))
    services = [await createRevocationService(A, stores[0]), await createRevocationService(N, stores[1])]
    await O.services.messaging.handle(REVOCATION_PROTOCOL_1_0, ANNOUNCE_METHOD, async (payload) => {
      try {
        oldAccepted.push(await oldStrictParse(payload))
        return { new: true }
      } catch (err: any) {
        oldRefused.push(err.code)
        throw err
      }
    })
    await A.dial(O.getMultiaddrs())
    await A.dial(N.getMultiaddrs())
    // identify has told A what O and N speak
    await until(async () => {
      const o = await A.peerStore.get(O.peerId)
      const n = await A.peerStore.get(N.peerId)
      return o.protocols.includes(REVOCATION_PROTOCOL_1_0) && n.protocols.includes(REVOCATION_PROTOCOL)
    }, { timeout: 10_000, what: 'A identified O and N' })
  }, 60_000)

  afterAll(async () => {
    for (const s of services ?? []) await s.stop().catch(() => {})
    for (const n of [A, O, N]) await Promise.resolve(n?.stop()).catch(() => {})
  })

  it('a record without exp reaches the 1.0.0 peer on 1.0.0 and the current peer on 1.1.0', async () => {
    const rev = await createRevocation(user, await tokenOf(), { exp: null })
    expect(rev.payload.exp).toBeUndefined()
    const result = await services[0].publish(rev)
    expect(result).toEqual({ new: true, peers: 2, delivered: 2, skipped: 0 })
    expect(oldAccepted.map(r => r.payload.revoke)).toEqual([rev.payload.revoke])
    expect(stores[1].has(await cidOf(rev))).toBe(true)
    expect(streamProtocols(A, N.peerId)).toContain(REVOCATION_PROTOCOL)
    expect(streamProtocols(A, O.peerId)).toContain(REVOCATION_PROTOCOL_1_0)
    expect(streamProtocols(A, O.peerId)).not.toContain(REVOCATION_PROTOCOL)
  })

  it('a record with exp reaches the current peer and is skipped for the 1.0.0 peer', async () => {
    const rev = await createRevocation(user, await tokenOf())
    expect(rev.payload.exp).toBeTypeOf('number')
    const before = oldAccepted.length
    const result = await services[0].publish(rev)
    // the old peer was never sent it: it neither accepted nor refused anything
    expect(oldRefused).toEqual([])
    expect(oldAccepted).toHaveLength(before)
    expect(result).toEqual({ new: true, peers: 2, delivered: 1, skipped: 1 })
    expect(stores[1].has(await cidOf(rev))).toBe(true)
  })

  it('forwarding: what N announces to A on 1.1.0 goes on to the 1.0.0 peer when it has no exp', async () => {
    const withExp = await createRevocation(user, await tokenOf())
    const without = await createRevocation(user, await tokenOf(), { exp: null })
    for (const rev of [withExp, without]) {
      expect(await N.services.messaging.request(A.peerId, REVOCATION_PROTOCOL, ANNOUNCE_METHOD, encodeRevocation(rev))).toEqual({ new: true })
    }
    await until(() => oldAccepted.some(r => r.payload.revoke === without.payload.revoke), { timeout: 10_000, what: 'O got the record without exp' })
    await delay(300)
    expect(oldAccepted.some(r => r.payload.revoke === withExp.payload.revoke)).toBe(false)
    expect(oldRefused).toEqual([])
  })

  it('1.0.0 is still served: an old peer\'s record is taken and flooded on 1.1.0; 1.0.0 inbound also takes exp', async () => {
    const fromOld = await createRevocation(user, await tokenOf(), { exp: null })
    expect(await O.services.messaging.request(A.peerId, REVOCATION_PROTOCOL_1_0, ANNOUNCE_METHOD, encodeRevocation(fromOld))).toEqual({ new: true })
    const c = await cidOf(fromOld)
    await until(() => stores[1].has(c), { timeout: 10_000, what: 'N got the old peer\'s record through A' })

    // lenient: a record with exp on 1.0.0 is accepted too
    const lenient = await createRevocation(user, await tokenOf())
    expect(await N.services.messaging.request(A.peerId, REVOCATION_PROTOCOL_1_0, ANNOUNCE_METHOD, encodeRevocation(lenient))).toEqual({ new: true })
    expect(stores[0].has(await cidOf(lenient))).toBe(true)
  })
})

describe('revocation protocol versions over TCP: a 1.0.0 peer is remembered', () => {
  let user: Identity
  let A: TransportNode // current: publishes
  let O: TransportNode // old: serves only /ioa/revocation/1.0.0
  let service: RevocationService
  const accepted: string[] = []

  const tokenOf = async (): Promise<Token> =>
    delegate(user, { audience: (await createIdentity()).did, capabilities: [PAY], expiresAt: Date.now() + HOUR })

  beforeAll(async () => {
    user = await createIdentity()
    ;[A, O] = await Promise.all([0, 1].map(async () => createTransportNode({ transports: ['tcp'] })))
    service = await createRevocationService(A, await RevocationStore.open(new MemoryDatastore()))
    await O.services.messaging.handle(REVOCATION_PROTOCOL_1_0, ANNOUNCE_METHOD, async (payload) => {
      accepted.push((await oldStrictParse(payload)).payload.revoke)
      return { new: true }
    })
    await A.dial(O.getMultiaddrs())
    await until(async () => (await A.peerStore.get(O.peerId)).protocols.includes(REVOCATION_PROTOCOL_1_0), { timeout: 10_000, what: 'A identified O' })
  }, 60_000)

  afterAll(async () => {
    await service?.stop().catch(() => {})
    for (const n of [A, O]) await Promise.resolve(n?.stop()).catch(() => {})
  })

  /** The protocols of the announces A sends to O while `fn` runs */
  async function asked (fn: () => Promise<unknown>): Promise<string[]> {
    const protocols: string[] = []
    const messaging = A.services.messaging
    const request = messaging.request.bind(messaging)
    messaging.request = (async (peer: PeerId, protocol: string, ...rest: any[]) => {
      if (peer.equals(O.peerId)) protocols.push(protocol)
      return (request as any)(peer, protocol, ...rest)
    }) as typeof messaging.request
    try {
      await fn()
    } finally {
      messaging.request = request
    }
    return protocols
  }

  it('after one refused 1.1.0 stream, later records go to it on 1.0.0 (or are skipped) without asking 1.1.0 again', async () => {
    const first = await createRevocation(user, await tokenOf(), { exp: null })
    expect(await asked(async () => service.publish(first))).toEqual([REVOCATION_PROTOCOL, REVOCATION_PROTOCOL_1_0])

    const records = [
      await createRevocation(user, await tokenOf(), { exp: null }),
      await createRevocation(user, await tokenOf()),
      await createRevocation(user, await tokenOf(), { exp: null })
    ]
    const results: unknown[] = []
    const protocols = await asked(async () => { for (const rev of records) results.push(await service.publish(rev)) })
    expect(protocols).toEqual([REVOCATION_PROTOCOL_1_0, REVOCATION_PROTOCOL_1_0])
    expect(results).toEqual([
      { new: true, peers: 1, delivered: 1, skipped: 0 },
      { new: true, peers: 1, delivered: 0, skipped: 1 },
      { new: true, peers: 1, delivered: 1, skipped: 0 }
    ])
    expect(accepted).toEqual([first, records[0], records[2]].map(r => r.payload.revoke))
  })

  it('once identify lists 1.1.0 for the peer (it was upgraded and reconnects), it is asked on 1.1.0 again', async () => {
    const current: string[] = []
    await O.services.messaging.handle(REVOCATION_PROTOCOL, ANNOUNCE_METHOD, async (payload) => {
      current.push(dagCbor.decode<Revocation>(payload as Uint8Array).payload.revoke)
      return { new: true }
    })
    // the upgraded peer comes back (identify runs on the new connection)
    await A.hangUp(O.peerId)
    await A.dial(O.getMultiaddrs())
    await until(async () => (await A.peerStore.get(O.peerId)).protocols.includes(REVOCATION_PROTOCOL), { timeout: 10_000, what: 'identify told A that O speaks 1.1.0' })
    const rev = await createRevocation(user, await tokenOf())
    expect(await asked(async () => service.publish(rev))).toEqual([REVOCATION_PROTOCOL])
    expect(current).toEqual([rev.payload.revoke])
  })
})
