/**
 * The interconnect on stubbed components, with no libp2p node: a fake DHT (a
 * provider table) and a fake messaging that passes DAG-CBOR encoded requests
 * between interconnects in this process.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { afterEach, describe, expect, it } from 'vitest'
import { CARD_PROTOCOL, ForbiddenError, interconnectFromComponents } from '../src/index.js'
import type { InterconnectComponents, InterconnectService } from '../src/index.js'
import type { RequestContext } from '@ioa/transport'
import type { ComponentLogger, Logger, PeerId, Provider } from '@libp2p/interface'
import type { CID } from 'multiformats/cid'

type Handler = (payload: unknown, ctx: RequestContext) => unknown

/** A provider table and the handlers of every stubbed peer */
class StubNet {
  readonly providers = new Map<string, Set<PeerId>>()
  readonly handlers = new Map<string, Map<string, Handler>>()
  readonly cancelled: string[] = []
  readonly lines: string[] = []
  /** provide() calls that fail before one succeeds */
  failingProvides = 0
  provides = 0

  logger (): ComponentLogger {
    const lines = this.lines
    return {
      forComponent (name: string): Logger {
        const line = (component: string, fmt: string, args: unknown[]): void => { lines.push([component, fmt, ...args.map(String)].join(' ')) }
        const log = ((fmt: string, ...args: unknown[]) => { line(name, fmt, args) }) as Logger
        log.error = (fmt: string, ...args: unknown[]) => { line(`${name}:error`, fmt, args) }
        log.trace = (fmt: string, ...args: unknown[]) => { line(`${name}:trace`, fmt, args) }
        log.enabled = true
        return log
      }
    }
  }
}

/** The components of one stubbed peer on `net` */
function stubComponents (net: StubNet, peerId: PeerId): InterconnectComponents {
  const own = new Map<string, Handler>()
  net.handlers.set(peerId.toString(), own)
  return {
    peerId,
    contentRouting: {
      async provide (cid: CID) {
        net.provides++
        if (net.failingProvides > 0) {
          net.failingProvides--
          throw new Error('routing table empty')
        }
        const set = net.providers.get(cid.toString()) ?? new Set()
        set.add(peerId)
        net.providers.set(cid.toString(), set)
      },
      async * findProviders (cid: CID): AsyncGenerator<Provider> {
        for (const id of net.providers.get(cid.toString()) ?? []) yield { id, multiaddrs: [], routing: 'stub' }
      }
    },
    reprovider: { async cancelReprovide (cid: CID) { net.cancelled.push(cid.toString()) } },
    messaging: {
      async handle (protocol: string, method: string, handler: Handler) { own.set(`${protocol} ${method}`, handler) },
      async unhandle (protocol: string) {
        for (const key of [...own.keys()]) if (key.startsWith(`${protocol} `)) own.delete(key)
      },
      async request<T> (target: unknown, protocol: string, method: string, payload?: unknown): Promise<T> {
        const handler = net.handlers.get(String(target))?.get(`${protocol} ${method}`)
        if (handler == null) throw Object.assign(new Error('no such peer'), { code: 'DIAL_FAILED' })
        const ctx = { peer: peerId, protocol, method, signal: new AbortController().signal } as unknown as RequestContext
        try {
          const answer = await handler(dagCbor.decode(dagCbor.encode(payload ?? null)), ctx)
          return dagCbor.decode(dagCbor.encode(answer)) as T
        } catch (err: any) {
          // as the transport rebuilds a remote error
          throw Object.assign(new Error(err.message), { code: err.code ?? 'HANDLER_ERROR', remote: true })
        }
      }
    } as unknown as InterconnectComponents['messaging'],
    peerStore: { merge: async () => { throw new Error('not used') } } as unknown as InterconnectComponents['peerStore'],
    addresses: { getMultiaddrs: () => [] },
    events: new EventTarget(),
    ping: { ping: async () => 1 },
    logger: net.logger()
  }
}

async function peer (): Promise<PeerId> {
  return peerIdFromPrivateKey(await generateKeyPair('Ed25519'))
}

const started: InterconnectService[] = []

afterEach(async () => {
  await Promise.all(started.splice(0).map(async ic => ic.stop()))
})

async function start (net: StubNet, init: Parameters<typeof interconnectFromComponents>[1] = {}): Promise<InterconnectService> {
  const ic = await interconnectFromComponents(stubComponents(net, await peer()), { logPrefix: 'test', ...init })
  started.push(ic)
  return ic
}

describe('interconnect on stubbed components', () => {
  it('hosts, announces, lists cards, discovers and routes without a libp2p node', async () => {
    const net = new StubNet()
    const a = await start(net)
    const b = await start(net)
    const agent = await b.host({ key: 'hotel', name: 'Hotel', skills: [{ id: 'travel.hotel.booking' }], inbox: ({ body }) => ({ echo: body }) })
    await b.announced()
    expect(b.agents().map(x => x.did)).toEqual([agent.did])
    // travel, travel.hotel, travel.hotel.booking and the agent id
    expect(net.providers.size).toBe(4)

    const cards = await a.fetchCards(b.peerId, {})
    expect(cards.map(c => c.card.id)).toEqual([agent.did])

    const found = await a.discoverAll({ capability: 'travel.hotel' })
    expect(found.map(r => [r.card.id, r.source, r.peer])).toEqual([[agent.did, 'dht', b.peerId.toString()]])

    expect(await a.send(agent.did, 'hi', { skill: 'travel.hotel.booking' })).toEqual({ echo: 'hi' })
    expect(a.historyOf(agent.did)?.successes).toBe(1)

    await b.unhost(agent.did)
    expect(net.cancelled).toHaveLength(4)
    expect(net.lines.some(l => l.startsWith('test:directory ') && l.includes('stopped hosting'))).toBe(true)
  })

  it('retries a failed announcement with backoff, and announced() waits for it', async () => {
    const net = new StubNet()
    const ic = await start(net, { announceAgentIds: false })
    net.failingProvides = 2
    await ic.announce('robot.patrol')
    await ic.announced({ signal: AbortSignal.timeout(5_000) })
    expect(net.provides).toBe(3)
    expect(net.providers.size).toBe(1)
    expect(net.lines.filter(l => l.startsWith('test:announce ') && l.includes('failed'))).toHaveLength(2)
  })

  it('refuses an export card to a peer that is not a trusted gateway, with a debug line saying why', async () => {
    const net = new StubNet()
    const a = await start(net)
    const b = await start(net)
    const agent = await b.host({ key: 'k', name: 'K', skills: [{ id: 'x.y' }] })
    const m = stubComponents(net, a.peerId).messaging
    await expect(m.request(b.peerId, CARD_PROTOCOL, 'export', { agent: agent.did, skills: ['x.y'], gateways: [a.peerId.toString()] }))
      .rejects.toMatchObject({ code: ForbiddenError.code })
    expect(net.lines.some(l => l.startsWith('test:cards refused') && l.includes(' export ') && l.includes('FORBIDDEN'))).toBe(true)
  })
})
