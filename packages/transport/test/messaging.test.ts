import * as dagCbor from '@ipld/dag-cbor'
import { lpStream } from '@libp2p/utils'
import * as varint from 'uint8-varint'
import { afterEach, describe, expect, it } from 'vitest'
import { createTransportNode, decodeFrame, encodeFrame, FrameType, RemoteError } from '../src/index.js'
import { delay, expectErrorName, until } from '../../../test/util.js'
import { readAll } from './raw-stream.js'
import type { Frame, MessagingInit, TransportNode } from '../src/index.js'

const PROTO = '/ioa/test/1.0.0'

let counter = 0
const nodes: TransportNode[] = []

async function makeNode (kind: 'tcp' | 'memory', messaging: MessagingInit = {}): Promise<TransportNode> {
  const node = await createTransportNode(kind === 'memory'
    ? { transports: ['memory'], listen: [`/memory/msg-test-${process.pid}-${counter++}`], messaging }
    : { transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'], messaging })
  nodes.push(node)
  return node
}

afterEach(async () => {
  await Promise.all(nodes.splice(0).map(async n => n.stop()))
})

/** How `until` polls the in-process conditions of these tests */
const POLL = { timeout: 5_000, interval: 10 }

/** Encode a frame with its varint length prefix */
function wire (frame: Frame): Uint8Array {
  const body = encodeFrame(frame)
  const out = new Uint8Array(varint.encodingLength(body.byteLength) + body.byteLength)
  varint.encode(body.byteLength, out)
  out.set(body, varint.encodingLength(body.byteLength))
  return out
}

for (const kind of ['memory', 'tcp'] as const) {
  describe(`messaging over ${kind}`, () => {
    it('answers requests and reuses one long-lived stream', async () => {
      const server = await makeNode(kind)
      const client = await makeNode(kind)
      await server.services.messaging.handle(PROTO, 'echo', (p) => p)
      const addr = server.getMultiaddrs()[0]

      expect(await client.services.messaging.request(addr, PROTO, 'echo', { hello: 'world', n: 1 })).toEqual({ hello: 'world', n: 1 })
      for (let i = 0; i < 20; i++) {
        expect(await client.services.messaging.request(server.peerId, PROTO, 'echo', i)).toBe(i)
      }
      const conns = client.getConnections(server.peerId)
      expect(conns).toHaveLength(1)
      expect(conns[0].streams.filter(s => s.protocol === PROTO)).toHaveLength(1)
      expect(client.services.messaging.stats().outboundStreams).toBe(1)
    })

    it('multiplexes concurrent requests and matches answers to requests', async () => {
      const server = await makeNode(kind)
      const client = await makeNode(kind)
      await server.services.messaging.handle(PROTO, 'slow-echo', async (p) => {
        await delay(Math.random() * 20)
        return p
      })
      const results = await Promise.all(Array.from({ length: 100 }, async (_, i) =>
        client.services.messaging.request(server.getMultiaddrs(), PROTO, 'slow-echo', { i })))
      expect(results).toEqual(Array.from({ length: 100 }, (_, i) => ({ i })))
    })

    it('carries bytes and nested structures', async () => {
      const server = await makeNode(kind)
      const client = await makeNode(kind)
      await server.services.messaging.handle(PROTO, 'echo', (p) => p)
      const payload = { bytes: new Uint8Array([0, 1, 2, 255]), list: [1, 'two', null, true, { deep: [3.5] }] }
      expect(await client.services.messaging.request(server.getMultiaddrs()[0], PROTO, 'echo', payload)).toEqual(payload)
    })

    it('rejects an unknown method with UnknownMethodError and keeps the stream', async () => {
      const server = await makeNode(kind)
      const client = await makeNode(kind)
      await server.services.messaging.handle(PROTO, 'echo', (p) => p)
      const addr = server.getMultiaddrs()[0]
      const err = await expectErrorName(client.services.messaging.request(addr, PROTO, 'nope'), 'UnknownMethodError')
      expect(err.code).toBe('UNKNOWN_METHOD')
      expect(await client.services.messaging.request(addr, PROTO, 'echo', 'still here')).toBe('still here')
    })

    it('carries handler failures and application codes', async () => {
      const server = await makeNode(kind)
      const client = await makeNode(kind)
      await server.services.messaging.handle(PROTO, 'boom', () => { throw new Error('kaput') })
      await server.services.messaging.handle(PROTO, 'missing', () => { throw new RemoteError('NOT_FOUND', 'no such thing') })
      const addr = server.getMultiaddrs()[0]
      const err = await expectErrorName(client.services.messaging.request(addr, PROTO, 'boom'), 'HandlerError')
      expect(err.message).toBe('kaput')
      const app = await expectErrorName(client.services.messaging.request(addr, PROTO, 'missing'), 'RemoteError')
      expect(app.code).toBe('NOT_FOUND')
      expect((app as any).remote).toBe(true)
    })

    it('times out a slow handler, aborts it on the server and keeps serving', async () => {
      const server = await makeNode(kind)
      const client = await makeNode(kind)
      let serverSawAbort = false
      await server.services.messaging.handle(PROTO, 'hang', async (_p, ctx) => {
        await new Promise<void>(resolve => ctx.signal.addEventListener('abort', () => { serverSawAbort = true; resolve() }))
      })
      await server.services.messaging.handle(PROTO, 'echo', (p) => p)
      const addr = server.getMultiaddrs()[0]
      // dial first: on a loaded machine the dial alone can take the 300 ms
      expect(await client.services.messaging.request(addr, PROTO, 'echo', 0)).toBe(0)
      const started = Date.now()
      await expectErrorName(client.services.messaging.request(addr, PROTO, 'hang', null, { timeout: 300 }), 'TimeoutError')
      expect(Date.now() - started).toBeLessThan(2_000)
      await until(() => serverSawAbort, POLL)
      expect(await client.services.messaging.request(addr, PROTO, 'echo', 1)).toBe(1)
      await until(() => server.services.messaging.stats().activeHandlers === 0, POLL)
    })

    it('cancels a request with an AbortSignal and tells the handler', async () => {
      const server = await makeNode(kind)
      const client = await makeNode(kind)
      let aborted: unknown
      let started = false
      await server.services.messaging.handle(PROTO, 'hang', async (_p, ctx) => {
        started = true
        await new Promise<void>(resolve => ctx.signal.addEventListener('abort', () => { aborted = ctx.signal.reason; resolve() }))
      })
      const controller = new AbortController()
      const p = client.services.messaging.request(server.getMultiaddrs()[0], PROTO, 'hang', null, { signal: controller.signal })
      // abort once the handler runs (a loaded machine can take longer than a fixed delay to dial)
      await until(() => started, POLL)
      controller.abort()
      await expectErrorName(p, 'CanceledError')
      await until(() => aborted != null, POLL)
      expect((aborted as Error).name).toBe('CanceledError')
      expect(client.services.messaging.stats().pendingRequests).toBe(0)
    })

    it('refuses an oversized request locally and an oversized response remotely', async () => {
      const server = await makeNode(kind, { maxFrameSize: 4096 })
      const client = await makeNode(kind, { maxFrameSize: 4096 })
      await server.services.messaging.handle(PROTO, 'echo', (p) => p)
      await server.services.messaging.handle(PROTO, 'big', () => new Uint8Array(10_000))
      const addr = server.getMultiaddrs()[0]
      const local = await expectErrorName(client.services.messaging.request(addr, PROTO, 'echo', new Uint8Array(5000)), 'PayloadTooLargeError')
      expect((local as any).remote).toBe(false)
      const remote = await expectErrorName(client.services.messaging.request(addr, PROTO, 'big'), 'PayloadTooLargeError')
      expect((remote as any).remote).toBe(true)
      expect(await client.services.messaging.request(addr, PROTO, 'echo', 'ok')).toBe('ok')
    })

    it('limits requests in flight per peer', async () => {
      const server = await makeNode(kind, { maxInFlightPerPeer: 2 })
      const client = await makeNode(kind, { maxInFlightPerPeer: 10 })
      await server.services.messaging.handle(PROTO, 'slow', async () => { await delay(200); return 'done' })
      const addr = server.getMultiaddrs()[0]
      const outcomes = await Promise.allSettled(Array.from({ length: 6 }, async () => client.services.messaging.request(addr, PROTO, 'slow')))
      const ok = outcomes.filter(o => o.status === 'fulfilled')
      const rejected = outcomes.filter((o): o is PromiseRejectedResult => o.status === 'rejected')
      expect(ok).toHaveLength(2)
      expect(rejected).toHaveLength(4)
      for (const r of rejected) expect(r.reason.name).toBe('TooManyRequestsError')
    })

    it('queues on the requesting side instead of exceeding its own limit', async () => {
      const server = await makeNode(kind, { maxInFlightPerPeer: 2 })
      const client = await makeNode(kind, { maxInFlightPerPeer: 2 })
      let running = 0
      let peak = 0
      await server.services.messaging.handle(PROTO, 'slow', async () => {
        running++
        peak = Math.max(peak, running)
        await delay(50)
        running--
        return 'done'
      })
      const addr = server.getMultiaddrs()[0]
      const results = await Promise.all(Array.from({ length: 8 }, async () => client.services.messaging.request(addr, PROTO, 'slow')))
      expect(results).toEqual(Array(8).fill('done'))
      expect(peak).toBe(2)
    })

    it('streams items in order with bounded credit, and cancels on early exit', async () => {
      const server = await makeNode(kind, { streamWindow: 4 })
      const client = await makeNode(kind, { streamWindow: 4 })
      let produced = 0
      let cleanedUp = false
      await server.services.messaging.handleStream(PROTO, 'count', async function * (p) {
        try {
          for (let i = 0; i < (p as { n: number }).n; i++) {
            produced++
            yield i
          }
        } finally {
          cleanedUp = true
        }
      })
      const addr = server.getMultiaddrs()[0]
      const all: number[] = []
      for await (const x of client.services.messaging.stream<number>(addr, PROTO, 'count', { n: 50 })) all.push(x)
      expect(all).toEqual(Array.from({ length: 50 }, (_, i) => i))

      // a consumer that stops reading holds the producer to the window
      produced = 0
      cleanedUp = false
      const it = client.services.messaging.stream<number>(addr, PROTO, 'count', { n: 1000 })[Symbol.asyncIterator]()
      expect((await it.next()).value).toBe(0)
      await delay(300)
      // window of 4 plus the one being written when credit ran out
      expect(produced).toBeLessThanOrEqual(6)
      await it.return?.()
      await until(() => cleanedUp, POLL)
      expect(produced).toBeLessThan(20)
      await until(() => server.services.messaging.stats().activeHandlers === 0, POLL)
    })

    it('bounds a stream per item: items within the timeout run past it in total, a longer gap times out', async () => {
      const server = await makeNode(kind)
      const client = await makeNode(kind)
      await server.services.messaging.handleStream(PROTO, 'paced', async function * (p) {
        const { n, gap, last } = p as { n: number, gap: number, last: number }
        for (let i = 0; i < n; i++) {
          await delay(i === n - 1 ? last : gap)
          yield i
        }
      })
      const addr = server.getMultiaddrs()[0]
      const all: number[] = []
      // 12 items 100 ms apart under a 1 s item timeout: 1.2 s in all (a
      // margin of 900 ms per item for a loaded machine)
      for await (const x of client.services.messaging.stream<number>(addr, PROTO, 'paced', { n: 12, gap: 100, last: 100 }, { timeout: 1_000 })) all.push(x)
      expect(all).toHaveLength(12)
      // then a gap of 3 s before the last item
      const got: number[] = []
      await expectErrorName((async () => {
        for await (const x of client.services.messaging.stream<number>(addr, PROTO, 'paced', { n: 3, gap: 50, last: 3_000 }, { timeout: 1_000 })) got.push(x)
      })(), 'TimeoutError')
      expect(got).toEqual([0, 1])
    })

    it('streams an error raised mid-stream', async () => {
      const server = await makeNode(kind)
      const client = await makeNode(kind)
      await server.services.messaging.handleStream(PROTO, 'fail', async function * () {
        yield 1
        throw new RemoteError('OUT_OF_STOCK', 'gone')
      })
      const seen: unknown[] = []
      const err = await expectErrorName((async () => {
        for await (const x of client.services.messaging.stream(server.getMultiaddrs()[0], PROTO, 'fail')) seen.push(x)
      })(), 'RemoteError')
      expect(err.code).toBe('OUT_OF_STOCK')
      expect(seen).toEqual([1])
    })

    it('fails pending requests with StreamClosedError when the peer goes away', async () => {
      const server = await makeNode(kind)
      const client = await makeNode(kind)
      await server.services.messaging.handle(PROTO, 'hang', async () => new Promise(() => {}))
      const p = client.services.messaging.request(server.getMultiaddrs()[0], PROTO, 'hang', null, { timeout: 20_000 })
      const settled = p.then(() => undefined, (err: Error) => err)
      // the request is in the handler (a fixed delay may end before a loaded machine has dialled)
      await until(() => server.services.messaging.stats().activeHandlers === 1, POLL)
      const started = Date.now()
      await server.stop()
      expect((await settled)?.name).toBe('StreamClosedError')
      expect(Date.now() - started).toBeLessThan(5_000)
    })
  })
}

describe('messaging against bad input (TCP)', () => {
  async function pair (serverInit: MessagingInit = {}): Promise<{ server: TransportNode, attacker: TransportNode, bystander: TransportNode }> {
    const server = await makeNode('tcp', serverInit)
    const attacker = await makeNode('tcp')
    const bystander = await makeNode('tcp')
    await server.services.messaging.handle(PROTO, 'echo', (p) => p)
    return { server, attacker, bystander }
  }

  async function stillServes (server: TransportNode, other: TransportNode): Promise<void> {
    expect(await other.services.messaging.request(server.getMultiaddrs()[0], PROTO, 'echo', 'alive')).toBe('alive')
  }

  it('answers an oversized frame with PAYLOAD_TOO_LARGE and closes that stream only', async () => {
    const { server, attacker, bystander } = await pair({ maxFrameSize: 1024 })
    const stream = await attacker.dialProtocol(server.getMultiaddrs()[0], PROTO)
    stream.send(varint.encode(10_000_000))
    stream.send(new Uint8Array(2048))
    const { frames, ended } = await readAll(stream)
    expect(ended).toBe(true)
    expect(frames).toEqual([expect.objectContaining({ type: FrameType.ERROR, id: 0, code: 'PAYLOAD_TOO_LARGE' })])
    await stillServes(server, bystander)
    await stillServes(server, attacker)
  })

  it('answers garbage with a stream-level error and keeps serving', async () => {
    const { server, attacker, bystander } = await pair()
    const stream = await attacker.dialProtocol(server.getMultiaddrs()[0], PROTO)
    // a valid length prefix around bytes that are not CBOR
    stream.send(new Uint8Array([4, 0xff, 0xfe, 0xfd, 0xfc]))
    const { frames, ended } = await readAll(stream)
    expect(ended).toBe(true)
    expect(frames[0]).toMatchObject({ type: FrameType.ERROR, id: 0, code: 'MALFORMED_FRAME' })
    await stillServes(server, bystander)
  })

  it('answers a well-framed but invalid request with an error for that id', async () => {
    const { server, attacker } = await pair()
    const stream = await attacker.dialProtocol(server.getMultiaddrs()[0], PROTO)
    const lp = lpStream(stream)
    // unknown field "x" in a REQUEST
    await lp.write(dagCbor.encode({ t: 1, i: 7, m: 'echo', p: null, x: 1 }))
    const reply = decodeFrame(await lp.read({ signal: AbortSignal.timeout(5_000) }))
    expect(reply).toMatchObject({ type: FrameType.ERROR, id: 7, code: 'MALFORMED_FRAME' })
    // the same stream still answers a good request
    await lp.write(encodeFrame({ type: FrameType.REQUEST, id: 8, method: 'echo', payload: 'fine' }))
    expect(decodeFrame(await lp.read({ signal: AbortSignal.timeout(5_000) }))).toEqual({ type: FrameType.RESPONSE, id: 8, payload: 'fine' })
    // unknown method on the raw stream
    stream.send(wire({ type: FrameType.REQUEST, id: 9, method: 'missing', payload: null }))
    expect(decodeFrame(await lp.read({ signal: AbortSignal.timeout(5_000) }))).toMatchObject({ type: FrameType.ERROR, id: 9, code: 'UNKNOWN_METHOD' })
  })

  it('closes a stream whose peer sends a truncated frame and goes quiet', async () => {
    const { server, attacker, bystander } = await pair({ idleTimeout: 500 })
    const stream = await attacker.dialProtocol(server.getMultiaddrs()[0], PROTO)
    const full = wire({ type: FrameType.REQUEST, id: 1, method: 'echo', payload: 'x'.repeat(100) })
    stream.send(full.subarray(0, 20))
    const started = Date.now()
    const { ended } = await readAll(stream, 5_000)
    expect(ended).toBe(true)
    expect(Date.now() - started).toBeLessThan(4_000)
    await stillServes(server, bystander)
  })

  it('closes a stream that is opened and never written to (slowloris)', async () => {
    const { server, attacker, bystander } = await pair({ idleTimeout: 500 })
    const streams = await Promise.all(Array.from({ length: 5 }, async () => attacker.dialProtocol(server.getMultiaddrs()[0], PROTO)))
    const started = Date.now()
    // while the silent streams are open the node keeps answering others
    await stillServes(server, bystander)
    const results = await Promise.all(streams.map(async s => readAll(s, 5_000)))
    for (const r of results) {
      expect(r.ended).toBe(true)
      expect(r.frames[0]).toMatchObject({ type: FrameType.ERROR, id: 0, code: 'TIMEOUT' })
    }
    expect(Date.now() - started).toBeLessThan(4_000)
    await until(() => server.services.messaging.stats().inboundStreams <= 1, POLL)
    await stillServes(server, bystander)
  })

  it('rejects a second request reusing an id in flight', async () => {
    const server = await makeNode('tcp')
    const attacker = await makeNode('tcp')
    await server.services.messaging.handle(PROTO, 'slow', async () => { await delay(300); return 'done' })
    const stream = await attacker.dialProtocol(server.getMultiaddrs()[0], PROTO)
    const lp = lpStream(stream)
    stream.send(wire({ type: FrameType.REQUEST, id: 5, method: 'slow', payload: null }))
    stream.send(wire({ type: FrameType.REQUEST, id: 5, method: 'slow', payload: null }))
    const first = decodeFrame(await lp.read({ signal: AbortSignal.timeout(5_000) }))
    expect(first).toMatchObject({ type: FrameType.ERROR, id: 5, code: 'MALFORMED_FRAME' })
    const second = decodeFrame(await lp.read({ signal: AbortSignal.timeout(5_000) }))
    expect(second).toEqual({ type: FrameType.RESPONSE, id: 5, payload: 'done' })
  })
})

describe('messaging lifecycle', () => {
  it('reports a peer without the protocol as ProtocolNotSupportedError', async () => {
    const server = await makeNode('tcp')
    const client = await makeNode('tcp')
    await expectErrorName(client.services.messaging.request(server.getMultiaddrs()[0], '/ioa/absent/1.0.0', 'echo'), 'ProtocolNotSupportedError')
  })

  it('leaves no streams or handlers behind after stop, and refuses calls when stopped', async () => {
    const server = await makeNode('tcp')
    const client = await makeNode('tcp')
    await server.services.messaging.handle(PROTO, 'echo', (p) => p)
    await server.services.messaging.handleStream(PROTO, 'tick', async function * () { yield 1; yield 2 })
    await client.services.messaging.request(server.getMultiaddrs()[0], PROTO, 'echo', 1)
    for await (const _ of client.services.messaging.stream(server.getMultiaddrs()[0], PROTO, 'tick')) { /* drain */ }
    await client.stop()
    await server.stop()
    expect(client.services.messaging.stats()).toEqual({ outboundStreams: 0, inboundStreams: 0, pendingRequests: 0, activeHandlers: 0, bufferedBytes: 0, peerEntries: 0 })
    expect(server.services.messaging.stats()).toEqual({ outboundStreams: 0, inboundStreams: 0, pendingRequests: 0, activeHandlers: 0, bufferedBytes: 0, peerEntries: 0 })
    await expectErrorName(client.services.messaging.request(server.getMultiaddrs()[0] ?? server.peerId, PROTO, 'echo', 1), 'NotStartedError')
  })

  it('validates arguments with InvalidArgumentError', async () => {
    const node = await makeNode('memory')
    await expectErrorName(node.services.messaging.handle('no-slash', 'echo', () => 1), 'InvalidArgumentError')
    await expectErrorName(node.services.messaging.handle(PROTO, 'bad method!', () => 1), 'InvalidArgumentError')
    await expectErrorName(node.services.messaging.request(node.peerId, PROTO, 'echo', 1, { timeout: -1 }), 'InvalidArgumentError')
    await expect(createTransportNode({ transports: ['memory'], messaging: { maxFrameSize: -5 } })).rejects.toHaveProperty('name', 'InvalidArgumentError')
  })

  it('accepts fractional timeouts and reports unencodable results as HandlerError', async () => {
    const server = await makeNode('memory')
    const client = await makeNode('memory')
    await server.services.messaging.handle(PROTO, 'echo', (p) => p)
    await server.services.messaging.handle(PROTO, 'bad-result', () => ({ nope: undefined }))
    const addr = server.getMultiaddrs()[0]
    expect(await client.services.messaging.request(addr, PROTO, 'echo', 1, { timeout: 1500.5 })).toBe(1)
    const err = await expectErrorName(client.services.messaging.request(addr, PROTO, 'bad-result'), 'HandlerError')
    expect((err as any).remote).toBe(true)
  })

  it('stops serving a method after unhandle', async () => {
    const server = await makeNode('memory')
    const client = await makeNode('memory')
    await server.services.messaging.handle(PROTO, 'a', () => 'a')
    await server.services.messaging.handle(PROTO, 'b', () => 'b')
    const addr = server.getMultiaddrs()[0]
    expect(await client.services.messaging.request(addr, PROTO, 'a')).toBe('a')
    await server.services.messaging.unhandle(PROTO, 'a')
    await expectErrorName(client.services.messaging.request(addr, PROTO, 'a'), 'UnknownMethodError')
    expect(await client.services.messaging.request(addr, PROTO, 'b')).toBe('b')
  })
})
