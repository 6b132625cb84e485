/**
 * The management protocol `/ioa/manage/1.0.0` over TCP between separate
 * nodes (spec/management.md, "Management protocol"): an authorized caller
 * gets a signed snapshot that matches the node; callers without the
 * operator's authority are refused with their code; a watch reports an
 * agent hosted and a connection made; watches are bounded per peer.
 */
import { delegate } from '@ioa/collab'
import { defaultVerificationCache } from '@ioa/collab/wire'
import { createIdentity } from '@ioa/interconnect'
import {
  ManagementCredentials, createManagement, requestSnapshot, verifySnapshot, watchNode, MANAGEMENT_PROTOCOL
} from '@ioa/management'
import { createIoaNode } from '@ioa/node'
import { createTransportNode } from '@ioa/transport'
import { multiaddr } from '@multiformats/multiaddr'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { expectErrorCode } from './util.js'
import type { Identity } from '@ioa/interconnect'
import type { ReceivedWatchItem } from '@ioa/management'
import type { IoaNode } from '@ioa/node'
import type { TransportNode } from '@ioa/transport'
import type { PrivateKey } from '@libp2p/interface'

const SKILL = { id: 'demo.echo', name: 'Echo' }
const HOUR = 3_600_000

let operator: Identity & { privateKey: PrivateKey }
let node: IoaNode
let nodeDid: string
/** Peers of other keys, made on demand */
const peers: TransportNode[] = []

async function peerOf (key: PrivateKey): Promise<TransportNode> {
  const p = await createTransportNode({ transports: ['tcp'], privateKey: key })
  peers.push(p)
  return p
}

/** A peer of its own key holding a grant of ioa.manage.* from the operator */
async function manager (): Promise<{ caller: TransportNode, creds: ManagementCredentials }> {
  const id = await createIdentity()
  const grant = await delegate(operator, { audience: id.did, capabilities: [{ skill: 'ioa.manage.*' }], expiresAt: Date.now() + HOUR })
  return { caller: await peerOf(id.privateKey), creds: new ManagementCredentials({ identity: id, proofs: [grant] }) }
}

const target = (): ReturnType<typeof multiaddr> => multiaddr(node.addresses()[0])

beforeAll(async () => {
  operator = await createIdentity()
  node = await createIoaNode({
    // many short-lived callers from one address: past libp2p's inbound connection rate
    transport: { transports: ['tcp'], allow: ['/ip4/127.0.0.1'] },
    layers: [createManagement({ operator: operator.did, minInterval: 50, pollInterval: 100, maxWatchesPerPeer: 2 })]
  })
  nodeDid = node.nodeIdentity.did
  await node.host({ key: 'echo', name: 'Echo', skills: [SKILL], handlers: { 'demo.echo': async (input) => input } })
})

afterAll(async () => {
  for (const p of peers.splice(0)) await p.stop()
  await node?.stop()
})

describe('management snapshot', () => {
  it('an authorized caller gets a snapshot signed by the node that matches its agents and connections', async () => {
    const caller = await peerOf(operator.privateKey)
    const creds = new ManagementCredentials({ identity: operator })
    const got = await requestSnapshot(caller.services.messaging, target(), nodeDid, creds)
    const p = got.snapshot.payload
    expect(p.node).toBe(nodeDid)
    expect(p.peer).toBe(node.transport.peerId.toString())
    expect(p.agents).toEqual(node.interconnect.agents().map(a => ({ did: a.did, name: 'Echo', skills: ['demo.echo'] })))
    expect(p.connections.map(c => c.peer)).toContain(caller.peerId.toString())
    expect(p.connections.find(c => c.peer === caller.peerId.toString())?.direction).toBe('inbound')
    expect(p.addresses).toEqual(expect.arrayContaining(node.addresses()))
    expect(Math.abs(got.now - Date.now())).toBeLessThan(60_000)
    // the signature verifies, and a changed payload does not
    await expect(verifySnapshot(got.snapshot, { node: nodeDid })).resolves.toBeDefined()
    await expectErrorCode(verifySnapshot({ ...got.snapshot, payload: { ...p, domain: 'elsewhere' } }), 'INVALID_NODE_SNAPSHOT')
    await expectErrorCode(verifySnapshot(got.snapshot, { node: operator.did }), 'INVALID_NODE_SNAPSHOT')
    // while nothing changes, the same signed snapshot (no new signature per request); the
    // routing table may still take the caller in meanwhile: compare content and seq
    const content = (s: typeof p): unknown => ({ ...s, seq: 0, time: 0 })
    let previous = got
    let same = 0
    for (let i = 0; i < 40 && same < 2; i++) {
      const again = await requestSnapshot(caller.services.messaging, target(), nodeDid, creds)
      if (JSON.stringify(content(again.snapshot.payload)) === JSON.stringify(content(previous.snapshot.payload))) {
        expect(again.snapshot.payload.seq).toBe(previous.snapshot.payload.seq)
        expect(again.snapshot.sig).toEqual(previous.snapshot.sig)
        same++
      } else {
        expect(again.snapshot.payload.seq).toBeGreaterThan(previous.snapshot.payload.seq)
      }
      previous = again
    }
    expect(same).toBe(2)
  })

  it('refuses callers without the operator\'s authority, each with its code', async () => {
    const ask = async (from: TransportNode, proofs: unknown[]): Promise<unknown> =>
      from.services.messaging.request(target(), MANAGEMENT_PROTOCOL, 'snapshot', { proofs })
    const asOperator = await peerOf(operator.privateKey)
    // no chain
    await expectErrorCode(ask(asOperator, []), 'UNAUTHORIZED')
    // a token addressed to another node
    const other = await createIdentity()
    await expectErrorCode(ask(asOperator, [await delegate(operator, { audience: other.did, capabilities: [{ skill: 'ioa.manage.*' }], expiresAt: Date.now() + HOUR })]), 'WRONG_AUDIENCE')
    // a chain rooted at someone else than the operator
    const stranger = await createIdentity()
    const asStranger = await peerOf(stranger.privateKey)
    // (refused before any signature is verified: a stranger costs the node no verification)
    const strangerToken = await delegate(stranger, { audience: nodeDid, capabilities: [{ skill: 'ioa.manage.*' }], expiresAt: Date.now() + HOUR })
    const verifications = vi.spyOn(defaultVerificationCache, 'verifySignature')
    await expectErrorCode(ask(asStranger, [strangerToken]), 'NOT_OPERATOR')
    expect(verifications).not.toHaveBeenCalled()
    verifications.mockRestore()
    // the operator's own token, presented by another peer
    const operatorToken = await delegate(operator, { audience: nodeDid, capabilities: [{ skill: 'ioa.manage.*' }], expiresAt: Date.now() + HOUR })
    await expectErrorCode(ask(asStranger, [operatorToken]), 'PRINCIPAL_MISMATCH')
    // an escalating chain: the operator grants watch only, the holder claims everything
    const watcher = await createIdentity()
    const asWatcher = await peerOf(watcher.privateKey)
    const expiresAt = Date.now() + HOUR
    const grant = await delegate(operator, { audience: watcher.did, capabilities: [{ skill: 'ioa.manage.watch' }], expiresAt })
    const escalating = await delegate(watcher, { audience: nodeDid, capabilities: [{ skill: 'ioa.manage.*' }], expiresAt, proofs: [grant] }, { verify: false })
    await expectErrorCode(ask(asWatcher, [escalating, grant]), 'ESCALATION')
    // a proper chain for watch only does not open snapshot
    const watchOnly = await delegate(watcher, { audience: nodeDid, capabilities: [{ skill: 'ioa.manage.watch' }], expiresAt, proofs: [grant] })
    await expectErrorCode(ask(asWatcher, [watchOnly, grant]), 'UNAUTHORIZED')
    // an expired token
    const expired = await delegate(operator, { audience: nodeDid, capabilities: [{ skill: 'ioa.manage.*' }], expiresAt: Date.now() - HOUR, notBefore: Date.now() - 2 * HOUR })
    await expectErrorCode(ask(asOperator, [expired]), 'TOKEN_EXPIRED')
    // malformed requests
    await expectErrorCode(asOperator.services.messaging.request(target(), MANAGEMENT_PROTOCOL, 'snapshot', { proofs: [operatorToken], extra: 1 }), 'BAD_REQUEST')
    await expectErrorCode(asOperator.services.messaging.request(target(), MANAGEMENT_PROTOCOL, 'snapshot', 'nope'), 'BAD_REQUEST')
    // and through a delegated chain the holder gets its snapshot
    const manager = await createIdentity()
    const asManager = await peerOf(manager.privateKey)
    const managerGrant = await delegate(operator, { audience: manager.did, capabilities: [{ skill: 'ioa.manage.*' }], expiresAt: Date.now() + HOUR })
    const got = await requestSnapshot(asManager.services.messaging, target(), nodeDid, new ManagementCredentials({ identity: manager, proofs: [managerGrant] }))
    expect(got.snapshot.payload.node).toBe(nodeDid)
  })
})

describe('management watch', () => {
  it('reports an agent hosted and a connection made, with heartbeats between', async () => {
    const { caller, creds } = await manager()
    const items: ReceivedWatchItem[] = []
    const controller = new AbortController()
    const watch = watchNode(caller.services.messaging, target(), nodeDid, creds, { heartbeat: 200, signal: controller.signal })
    const next = async (until: (i: ReceivedWatchItem) => boolean): Promise<ReceivedWatchItem> => {
      for (;;) {
        const r = await watch.next()
        if (r.done === true) throw new Error('the watch ended')
        items.push(r.value)
        if (until(r.value)) return r.value
      }
    }
    const first = await next(i => i.type === 'snapshot')
    expect(first.type === 'snapshot' && first.snapshot.payload.agents.length).toBe(1)
    await next(i => i.type === 'heartbeat')

    const added = await node.host({ key: 'second', name: 'Second', skills: [{ id: 'demo.second', name: 'Second' }] })
    const withAgent = await next(i => i.type === 'snapshot' && i.snapshot.payload.agents.some(a => a.did === added.did))
    expect(withAgent.type === 'snapshot' && withAgent.snapshot.payload.agents.find(a => a.did === added.did)?.skills).toEqual(['demo.second'])

    const newcomer = await peerOf((await createIdentity()).privateKey)
    await newcomer.dial(target())
    const withLink = await next(i => i.type === 'snapshot' && i.snapshot.payload.connections.some(c => c.peer === newcomer.peerId.toString()))
    expect(withLink.type).toBe('snapshot')
    // each snapshot of the stream has a higher seq than the one before
    const seqs = items.flatMap(i => i.type === 'snapshot' ? [i.snapshot.payload.seq] : [])
    expect([...seqs].sort((a, b) => a - b)).toEqual(seqs)
    expect(new Set(seqs).size).toBe(seqs.length)
    await watch.return(undefined)
  })

  it('refuses a third open watch from one peer (TOO_MANY_WATCHES) and frees the slot when one closes', async () => {
    const { caller, creds } = await manager()
    const open = async (): Promise<AsyncGenerator<ReceivedWatchItem>> => {
      const w = watchNode(caller.services.messaging, target(), nodeDid, creds, { heartbeat: 1_000 })
      const first = await w.next()
      expect(first.value?.type).toBe('snapshot')
      return w
    }
    const a = await open()
    const b = await open()
    await expectErrorCode(open(), 'TOO_MANY_WATCHES')
    await a.return(undefined)
    // the node sees the cancel and frees the slot
    const layer = node.layer<ReturnType<typeof createManagement>>('management')
    for (let i = 0; i < 100 && (layer?.protocol?.stats().watches ?? 0) > 1; i++) await new Promise(resolve => setTimeout(resolve, 50))
    const c = await open()
    await b.return(undefined)
    await c.return(undefined)
  })
})

describe('management watch and token lifetime', () => {
  it('ends a watch with TOKEN_EXPIRED once the chain expires', async () => {
    const strict = await createIoaNode({ transport: { transports: ['tcp'], allow: ['/ip4/127.0.0.1'] }, layers: [createManagement({ operator: operator.did, clockSkew: 0 })] })
    try {
      const id = await createIdentity()
      const caller = await peerOf(id.privateKey)
      const grant = await delegate(operator, { audience: id.did, capabilities: [{ skill: 'ioa.manage.watch' }], expiresAt: Date.now() + 5_000 })
      const items: ReceivedWatchItem[] = []
      const watch = watchNode(caller.services.messaging, multiaddr(strict.addresses()[0]), strict.nodeIdentity.did, new ManagementCredentials({ identity: id, proofs: [grant] }), { heartbeat: 200 })
      const err = await expectErrorCode((async () => { for await (const i of watch) items.push(i) })(), 'TOKEN_EXPIRED')
      expect(err.name).toBe('TokenExpiredError')
      expect(items[0]?.type).toBe('snapshot')
      expect(items.some(i => i.type === 'heartbeat')).toBe(true)
      expect(Date.now()).toBeGreaterThanOrEqual(grant.payload.exp)
    } finally {
      await strict.stop()
    }
  })
})
