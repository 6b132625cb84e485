/**
 * The grants of the management plane over TCP (spec/management.md 1.2,
 * 1.3, 1.6): a node lists the expiry of the tokens it holds in its signed
 * snapshot (`proofs`: CID, expiry, audience, issuer; no token) and
 * `ioa doctor`'s checks warn about one about to expire; a caller and a
 * management agent whose `ioa.manage.*` grant expired are refused with
 * `TOKEN_EXPIRED`, the node logs it, and the agent does not try again.
 */
import { delegate, tokenCid } from '@ioa/collab'
import { createIdentity } from '@ioa/interconnect'
import { ManagementCredentials, createManagement, requestSnapshot, runDoctor } from '@ioa/management'
import { createIoaNode } from '../src/index.js'
import { createTransportNode } from '@ioa/transport'
import { enable } from '@libp2p/logger'
import { multiaddr } from '@multiformats/multiaddr'
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest'
import { expectErrorCode } from '../../../test/util.js'
import type { Identity } from '@ioa/interconnect'
import type { ManagementLayer, Topology, TopologyEvent } from '@ioa/management'
import type { IoaNode } from '../src/index.js'
import type { TransportNode } from '@ioa/transport'
import type { PrivateKey } from '@libp2p/interface'

const TCP = { transports: ['tcp' as const], allow: ['/ip4/127.0.0.1'] }
const FAST = { minInterval: 50, pollInterval: 100 }
const DAY = 86_400_000

let operator: Identity & { privateKey: PrivateKey }
const started: Array<IoaNode | TransportNode> = []

async function until (what: string, check: () => boolean, ms = 30_000): Promise<void> {
  const end = Date.now() + ms
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise(resolve => setTimeout(resolve, 50))
  }
}

/** The node's log lines on `ioa:management:protocol` (weald writes them to stderr) */
const lines: string[] = []
beforeAll(async () => {
  operator = await createIdentity()
  enable('ioa:management:protocol')
  const write = process.stderr.write.bind(process.stderr)
  vi.spyOn(process.stderr, 'write').mockImplementation((chunk: any, ...rest: any[]) => {
    const text = String(chunk)
    if (text.includes('ioa:management:protocol')) {
      lines.push(text)
      return true
    }
    return write(chunk, ...rest)
  })
})

afterEach(() => { lines.length = 0 })

afterAll(async () => {
  vi.restoreAllMocks()
  for (const n of started.splice(0).reverse()) await n.stop()
})

describe('tokens a node holds', () => {
  it('are listed in its signed snapshot, and the doctor warns about one that expires soon', async () => {
    const agentKey = await createIdentity()
    const grant = await delegate(operator, { audience: agentKey.did, capabilities: [{ skill: 'ioa.manage.*' }], expiresAt: Date.now() + 2 * DAY })
    const agent = await createIoaNode({
      transport: { ...TCP, privateKey: agentKey.privateKey },
      layers: [createManagement({ operator: operator.did, role: 'agent', ...FAST, topology: { proofs: [grant] } })]
    })
    started.push(agent)
    const cid = (await tokenCid(grant)).toString()

    const caller = await createTransportNode({ transports: ['tcp'], privateKey: operator.privateKey })
    started.push(caller)
    const got = await requestSnapshot(caller.services.messaging, multiaddr(agent.addresses()[0]), agent.nodeIdentity.did, new ManagementCredentials({ identity: operator }))
    expect(got.snapshot.payload.proofs).toEqual([{ cid, expiresAt: grant.payload.exp, audience: agentKey.did, issuer: operator.did }])

    // the doctor, from a fresh peer of the operator's key, is given no token: it reads the node's
    const client = await createIoaNode({ bootstrap: [agent.addresses()[0]], transport: { ...TCP, privateKey: operator.privateKey, dhtClientMode: true }, interconnect: { publish: false } })
    started.push(client)
    const report = await runDoctor({ client, credentials: new ManagementCredentials({ identity: operator }), target: agent.addresses()[0], timeout: 5_000 })
    const finding = report.findings.find(f => f.check === 'tokens' && f.subject === cid)
    expect(finding).toMatchObject({ severity: 'warn', subject: cid })
    expect(finding?.message).toMatch(/^the node's token .* expires in 4[78] h/)
    expect(finding?.fix).toContain(operator.did)
  })
})

describe('an expired grant', () => {
  it('is refused with TOKEN_EXPIRED to a caller and to a management agent, logged by the node; the agent does not try again', async () => {
    // a small clock-skew tolerance, so that the test need not wait 30 s past the expiry
    const node = await createIoaNode({ transport: TCP, layers: [createManagement({ operator: operator.did, ...FAST, clockSkew: 1 })] })
    started.push(node)
    const nodeDid = node.nodeIdentity.did

    // a caller whose grant expires
    const callerKey = await createIdentity()
    const shortGrant = await delegate(operator, { audience: callerKey.did, capabilities: [{ skill: 'ioa.manage.*' }], expiresAt: Date.now() + 1_500 })
    const caller = await createTransportNode({ transports: ['tcp'], privateKey: callerKey.privateKey })
    started.push(caller)
    const creds = new ManagementCredentials({ identity: callerKey, proofs: [shortGrant] })
    const target = multiaddr(node.addresses()[0])
    await requestSnapshot(caller.services.messaging, target, nodeDid, creds)
    await until('the grant to expire', () => Date.now() > shortGrant.payload.exp + 50)
    const err = await expectErrorCode(requestSnapshot(caller.services.messaging, target, nodeDid, creds), 'TOKEN_EXPIRED')
    expect(err.name).toBe('TokenExpiredError')
    await until('the node to log the refusal', () => lines.some(l => l.includes('refused snapshot from') && l.includes('TOKEN_EXPIRED')))

    // a management agent whose grant expires while it watches the node
    const agentKey = await createIdentity()
    const grant = await delegate(operator, { audience: agentKey.did, capabilities: [{ skill: 'ioa.manage.*' }], expiresAt: Date.now() + 3_000 })
    const agent = await createIoaNode({
      bootstrap: [node.addresses()[0]],
      transport: { ...TCP, privateKey: agentKey.privateKey },
      layers: [createManagement({ operator: operator.did, role: 'agent', ...FAST, topology: { proofs: [grant], heartbeat: 200, retryDelay: 100, rescanInterval: 200 } })]
    })
    started.push(agent)
    const topology = agent.layer<ManagementLayer>('management')?.topology as Topology
    const events: TopologyEvent[] = []
    const controller = new AbortController()
    const reading = (async () => {
      for await (const e of topology.events({ signal: controller.signal })) {
        events.push(e)
        if (e.type === 'node-gone' && e.did === nodeDid) break
      }
    })()
    await until('the agent to watch the node', () => topology.snapshot().nodes.some(n => n.did === nodeDid))
    await reading
    controller.abort()
    const gone = events.find(e => e.type === 'node-gone')
    expect(gone).toMatchObject({ type: 'node-gone', did: nodeDid })
    expect(gone?.type === 'node-gone' ? gone.reason : '').toContain('TOKEN_EXPIRED')
    await until('the node to log the end of the watch', () => lines.some(l => l.includes('ended the watch of') && l.includes('TOKEN_EXPIRED')))

    // the agent gives up: over 15 retry delays and rescans, the node sees no new watch from it
    const agentPeer = agent.transport.peerId.toString()
    lines.length = 0
    await new Promise(resolve => setTimeout(resolve, 1_500))
    expect(lines.filter(l => l.includes(agentPeer.slice(-8)) || l.includes('refused watch'))).toEqual([])
    expect(topology.snapshot().nodes.map(n => n.did)).not.toContain(nodeDid)
  })
})
