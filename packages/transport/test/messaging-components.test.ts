/**
 * The messaging service against stubbed components: no libp2p node, only a
 * fake registrar and connection manager that join two services with
 * `streamPair` from @libp2p/utils, a logger that records its component
 * names, and a metrics stub that counts requests.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { defaultLogger } from '@libp2p/logger'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { streamPair } from '@libp2p/utils'
import { multiaddr } from '@multiformats/multiaddr'
import { afterEach, describe, expect, it } from 'vitest'
import { InvalidArgumentError, messaging, UnknownMethodError } from '../src/index.js'
import { collect, errorOf, rejectionOf } from '../../../test/util.js'
import type { Messaging, MessagingComponents, MessagingInit } from '../src/index.js'
import type { ComponentLogger, Connection, CounterGroup, Metrics, PeerId, Startable, StreamHandler } from '@libp2p/interface'
import type { ConnectionManager, Registrar } from '@libp2p/interface-internal'

const PROTO = '/ioa/stub/1.0.0'

type Service = Messaging & Startable

interface Peer {
  id: PeerId
  handlers: Map<string, StreamHandler>
  components: MessagingComponents
  names: string[]
  counts: Record<string, number>
}

const peers = new Map<string, Peer>()
const services: Service[] = []

afterEach(async () => {
  await Promise.all(services.splice(0).map(async s => s.stop()))
  peers.clear()
})

/** A connection from `local` to `remote`, whose streams land in `remote`'s registrar */
function connection (local: Peer, remote: Peer): Connection {
  return {
    remotePeer: remote.id,
    remoteAddr: multiaddr(`/ip4/127.0.0.1/tcp/4001/p2p/${remote.id.toString()}`),
    newStream: async (protocol: string) => {
      const handler = remote.handlers.get(protocol)
      if (handler == null) {
        throw Object.assign(new Error(`no handler for ${protocol}`), { name: 'UnsupportedProtocolError' })
      }
      const [outbound, inbound] = await streamPair({ protocol })
      void handler(inbound, connection(remote, local))
      return outbound
    }
  } as unknown as Connection
}

async function peer (): Promise<Peer> {
  const id = peerIdFromPrivateKey(await generateKeyPair('Ed25519'))
  const handlers = new Map<string, StreamHandler>()
  const names: string[] = []
  const counts: Record<string, number> = {}
  const base = defaultLogger()
  const logger: ComponentLogger = {
    forComponent: (name: string) => { names.push(name); return base.forComponent(name) }
  }
  const registrar = {
    handle: async (protocol: string, handler: StreamHandler) => { handlers.set(protocol, handler) },
    unhandle: async (protocol: string) => { handlers.delete(protocol) }
  } as unknown as Registrar
  const connectionManager = {
    openConnection: async (target: PeerId) => {
      const remote = peers.get(target.toString())
      if (remote == null) throw new Error('no route')
      return connection(self, remote)
    }
  } as unknown as ConnectionManager
  const metrics = {
    registerCounterGroup: (name: string): CounterGroup => ({
      increment: (values: Record<string, number | true>) => {
        for (const [k, v] of Object.entries(values)) counts[`${name}{${k}}`] = (counts[`${name}{${k}}`] ?? 0) + (v === true ? 1 : v)
      },
      reset: () => {}
    })
  } as unknown as Metrics
  const self: Peer = { id, handlers, names, counts, components: { registrar, connectionManager, logger, metrics } }
  peers.set(id.toString(), self)
  return self
}

async function start (p: Peer, init?: MessagingInit): Promise<Service> {
  const service = messaging(init)(p.components) as Service
  await service.start()
  services.push(service)
  return service
}

describe('messaging on stubbed components', () => {
  it('serves unary and streamed calls between two services joined by stream pairs', async () => {
    const a = await peer()
    const b = await peer()
    const client = await start(a)
    const server = await start(b)
    await server.handle(PROTO, 'echo', (payload) => payload)
    await server.handleStream(PROTO, 'count', function * (n) { for (let i = 0; i < (n as number); i++) yield i })

    expect(await client.request(b.id, PROTO, 'echo', { hello: 'world' })).toEqual({ hello: 'world' })
    expect(await collect(client.stream(b.id, PROTO, 'count', 40))).toEqual([...Array(40).keys()])

    const err = await rejectionOf(client.request(b.id, PROTO, 'nope'))
    expect(err.name).toBe(UnknownMethodError.name)
    expect((err as { code?: string }).code).toBe(UnknownMethodError.code)

    expect(client.stats().outboundStreams).toBe(1)
    expect(server.stats().inboundStreams).toBe(1)
    expect(a.counts['ioa_transport_messaging_requests_total{sent}']).toBe(3)
    expect(b.counts['ioa_transport_messaging_requests_total{served}']).toBe(2)
    expect(b.counts['ioa_transport_messaging_requests_total{refused}']).toBe(1)
  })

  it('logs under its logPrefix, and under ioa:transport:messaging by default', async () => {
    const a = await peer()
    await start(a)
    expect(a.names).toEqual(expect.arrayContaining([
      'ioa:transport:messaging', 'ioa:transport:messaging:outbound', 'ioa:transport:messaging:inbound',
      'ioa:transport:messaging:framing', 'ioa:transport:messaging:budgets'
    ]))
    const b = await peer()
    await start(b, { logPrefix: 'test:msg' })
    expect(b.names.every(n => n.startsWith('test:msg'))).toBe(true)
    expect(b.names).toContain('test:msg:inbound')
  })

  it('refuses an empty logPrefix', async () => {
    const a = await peer()
    const err = errorOf(() => messaging({ logPrefix: '' })(a.components))
    expect(err.name).toBe(InvalidArgumentError.name)
  })
})
