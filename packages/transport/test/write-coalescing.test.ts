/**
 * Frames written to a stream in one event-loop turn leave as one write
 * (spec/transport.md section 4, "coalescing"): checked by counting the Yamux
 * data frames the other end receives (one `message` event each) between
 * separate libp2p nodes over TCP on 127.0.0.1, and on `WriteCoalescer` alone
 */
import { describe, expect, it } from 'vitest'
import { WriteCoalescer } from '../src/write-coalescer.js'
import { collect, until } from '../../../test/util.js'
import { tcpNodes } from './tcp-nodes.js'
import type { MessagingInit, TransportNode } from '../src/index.js'
import type { PeerId, Stream } from '@libp2p/interface'

const PROTO = '/ioa/test-coalesce/1.0.0'
const makeNode = tcpNodes()

/** The messaging stream of `node` to or from `peer`, and a count of the data frames it receives from now on */
async function watch (node: TransportNode, peer: PeerId): Promise<{ stream: Stream, received: () => number, sizes: number[] }> {
  const stream = await until(() => node.getConnections(peer).flatMap(c => c.streams).find(s => s.protocol === PROTO), { timeout: 10_000 })
  const sizes: number[] = []
  stream.addEventListener('message', (evt) => { sizes.push(evt.data.byteLength) })
  return { stream, received: () => sizes.length, sizes }
}

/** A server with a unary echo and streaming handlers that write all their items in one turn */
async function pair (server: MessagingInit = {}, client: MessagingInit = {}): Promise<{ server: TransportNode, client: TransportNode }> {
  const s = await makeNode(server)
  const c = await makeNode(client)
  await s.services.messaging.handle(PROTO, 'echo', (p) => p)
  await s.services.messaging.handleStream(PROTO, 'three', function * () { yield 1; yield 2; yield 3 })
  await s.services.messaging.handleStream(PROTO, 'big', function * () {
    for (let i = 0; i < 6; i++) yield new Uint8Array(20_000).fill(i)
  })
  // the first call opens the client's stream
  expect(await c.services.messaging.request(s.getMultiaddrs()[0], PROTO, 'echo', 'hello')).toBe('hello')
  return { server: s, client: c }
}

describe('write coalescing over tcp', () => {
  it('sends the items and the END a handler writes in one turn as one data frame', async () => {
    const { server, client } = await pair()
    const { received } = await watch(client, server.peerId)
    const items = await collect(client.services.messaging.stream(server.peerId, PROTO, 'three'))
    expect(items).toEqual([1, 2, 3])
    // three ITEMs and END: one write, one Yamux data frame
    expect(received()).toBe(1)
  })

  it('sends requests made in one turn as one data frame, and answers them in one', async () => {
    const { server, client } = await pair()
    const atServer = await watch(server, client.peerId)
    const atClient = await watch(client, server.peerId)
    const answers = await Promise.all(Array.from({ length: 16 }, async (_, i) => client.services.messaging.request(server.peerId, PROTO, 'echo', i)))
    expect(answers).toEqual(Array.from({ length: 16 }, (_, i) => i))
    expect(atServer.received()).toBe(1)
    expect(atClient.received()).toBe(1)
  })

  it('keeps a batch within coalesceBytes and the frames in order', async () => {
    const { server, client } = await pair()
    const { sizes } = await watch(client, server.peerId)
    const items = await collect(client.services.messaging.stream<Uint8Array>(server.peerId, PROTO, 'big'))
    expect(items.map(b => [b.byteLength, b[0], b[b.byteLength - 1]])).toEqual(Array.from({ length: 6 }, (_, i) => [20_000, i, i]))
    // 65,507 bytes hold three 20,000-byte ITEMs: items 1-3, then 4-6 with END
    // (a third write when the stream asked the handler to wait for a drain)
    expect(Math.max(...sizes)).toBeLessThanOrEqual(65_507)
    expect(Math.max(...sizes)).toBeGreaterThan(40_000)
    expect(sizes.length).toBeGreaterThanOrEqual(2)
    expect(sizes.length).toBeLessThanOrEqual(3)
  })

  it('with coalesceBytes 1 sends every frame on its own, and interoperates with a coalescing peer', async () => {
    const { server, client } = await pair({ coalesceBytes: 1 }, {})
    const atClient = await watch(client, server.peerId)
    expect(await collect(client.services.messaging.stream(server.peerId, PROTO, 'three'))).toEqual([1, 2, 3])
    expect(atClient.received()).toBe(4)

    const atServer = await watch(server, client.peerId)
    const answers = await Promise.all(Array.from({ length: 8 }, async (_, i) => client.services.messaging.request(server.peerId, PROTO, 'echo', i)))
    expect(answers).toEqual(Array.from({ length: 8 }, (_, i) => i))
    // the coalescing client sent its 8 requests as one write
    expect(atServer.received()).toBe(1)
  })

  it('refuses a coalesceBytes that is not a positive integer', async () => {
    await expect(makeNode({ coalesceBytes: 0 })).rejects.toMatchObject({ name: 'InvalidArgumentError' })
  })
})

describe('WriteCoalescer', () => {
  function sink (limit: number): { out: number[][], c: WriteCoalescer } {
    const out: number[][] = []
    return { out, c: new WriteCoalescer(limit, (data) => { out.push([...data]) }) }
  }

  it('sends what is written in one turn as one write at the end of the turn', async () => {
    const { out, c } = sink(100)
    c.add(Uint8Array.of(1, 2))
    c.add(Uint8Array.of(3))
    expect(out).toEqual([])
    expect(c.queued).toBe(3)
    await new Promise(resolve => setImmediate(resolve))
    expect(out).toEqual([[1, 2, 3]])
    expect(c.queued).toBe(0)
  })

  it('writes the batch before a frame that would take it over the limit, and a large frame at once', () => {
    const { out, c } = sink(4)
    c.add(Uint8Array.of(1, 2, 3))
    c.add(Uint8Array.of(4, 5))
    expect(out).toEqual([[1, 2, 3]])
    c.add(Uint8Array.of(6, 7, 8, 9, 10))
    expect(out).toEqual([[1, 2, 3], [4, 5], [6, 7, 8, 9, 10]])
    expect(c.queued).toBe(0)
  })

  it('flushes on demand and drops what is queued when cleared', async () => {
    const { out, c } = sink(100)
    c.add(Uint8Array.of(1))
    c.flush()
    c.add(Uint8Array.of(2))
    c.clear()
    await new Promise(resolve => setImmediate(resolve))
    expect(out).toEqual([[1]])
  })
})
