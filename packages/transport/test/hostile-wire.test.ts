/**
 * The messaging wire against hostile peers over real TCP on 127.0.0.1
 * (issue 9 items 3, 4, 5 and 7): raw libp2p streams write bytes no
 * well-behaved peer would, and the node answers each attack with its
 * stream-level error promptly, holds no more than its budgets, and keeps
 * answering a bystander.
 */
import { lpStream } from '@libp2p/utils'
import { afterEach, describe, expect, it } from 'vitest'
import { createTransportNode, decodeFrame, encodeFramePrefixed, FrameType } from '../src/index.js'
import { readAll } from './raw-stream.js'
import { LOOPBACK, fromHex, until } from '../../../test/util.js'
import type { Frame, MessagingInit, TransportNode } from '../src/index.js'
import type { Stream } from '@libp2p/interface'

const PROTO = '/ioa/hostile/1.0.0'
const nodes: TransportNode[] = []

async function makeNode (messaging: MessagingInit = {}): Promise<TransportNode> {
  // up to 21 peers dial from 127.0.0.1 within a second: exempt loopback from
  // libp2p's per-host inbound rate limit (the messaging budgets still apply)
  const node = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'], allow: LOOPBACK, messaging })
  nodes.push(node)
  return node
}

afterEach(async () => {
  await Promise.all(nodes.splice(0).map(async n => n.stop()))
})

async function serve (init: MessagingInit = {}): Promise<TransportNode> {
  const server = await makeNode(init)
  await server.services.messaging.handle(PROTO, 'echo', (p) => p)
  await server.services.messaging.handle(PROTO, 'sink', () => null)
  return server
}

async function stillServes (server: TransportNode, other: TransportNode): Promise<void> {
  expect(await other.services.messaging.request(server.getMultiaddrs()[0], PROTO, 'echo', 'alive', { timeout: 20_000 })).toBe('alive')
}

/** Generous for a loaded machine, far below the 60 s idle timeout the attacks used to wait for */
const PROMPT = 15_000

describe('length prefixes that do not decode (TCP)', () => {
  const cases = [
    { name: 'a 9-byte prefix far above the limit', hex: 'ffffffffffffffff7f', code: 'PAYLOAD_TOO_LARGE' },
    { name: 'a 10-byte prefix', hex: '80808080808080808001', code: 'MALFORMED_LENGTH' },
    { name: 'an unterminated prefix (20 x 0x80)', hex: '8080808080808080808080808080808080808080', code: 'MALFORMED_LENGTH' },
    // 3 in two bytes, then what would be a valid 3-byte body
    { name: 'a prefix not in shortest form', hex: '8300a16161', code: 'MALFORMED_LENGTH' }
  ]

  it.each(cases)('answers $name with a stream-level $code and closes the stream', async ({ hex, code }) => {
    const server = await serve()
    const attacker = await makeNode()
    const bystander = await makeNode()
    const stream = await attacker.dialProtocol(server.getMultiaddrs()[0], PROTO)
    stream.send(fromHex(hex))
    const { frames, ended } = await readAll(stream, PROMPT)
    expect(frames).toEqual([expect.objectContaining({ type: FrameType.ERROR, id: 0, code })])
    expect(ended).toBe(true)
    await until(() => server.services.messaging.stats().inboundStreams === 0, { timeout: PROMPT })
    await stillServes(server, bystander)
  })
})

describe('non-canonical CBOR on the wire (TCP)', () => {
  it.each([
    { name: 'undefined', hex: '0aa36169016170f7617403' },
    { name: 'a float16', hex: '0ca36169016170f93e00617403' },
    { name: 'unsorted map keys', hex: '10a36169016170a2616201616102617403' }
  ])('refuses $name with MALFORMED_FRAME for that call, and the stream still serves', async ({ hex }) => {
    const server = await serve()
    const attacker = await makeNode()
    const stream = await attacker.dialProtocol(server.getMultiaddrs()[0], PROTO)
    const lp = lpStream(stream)
    stream.send(fromHex(hex))
    expect(decodeFrame(await lp.read({ signal: AbortSignal.timeout(PROMPT) }))).toMatchObject({ type: FrameType.ERROR, id: 1, code: 'MALFORMED_FRAME' })
    stream.send(encodeFramePrefixed({ type: FrameType.REQUEST, id: 2, method: 'echo', payload: 'fine' }))
    expect(decodeFrame(await lp.read({ signal: AbortSignal.timeout(PROMPT) }))).toEqual({ type: FrameType.RESPONSE, id: 2, payload: 'fine' })
  })

  it('refuses envelope keys out of order with a stream-level MALFORMED_FRAME', async () => {
    const server = await serve()
    const attacker = await makeNode()
    const stream = await attacker.dialProtocol(server.getMultiaddrs()[0], PROTO)
    stream.send(fromHex('07a2617405616901'))
    const { frames, ended } = await readAll(stream, PROMPT)
    expect(frames).toEqual([expect.objectContaining({ type: FrameType.ERROR, id: 0, code: 'MALFORMED_FRAME' })])
    expect(ended).toBe(true)
  })
})

describe('memory held by partial frames (TCP)', () => {
  it('keeps the bytes held per peer, per address and in total under their budgets, and frees them when streams go', async () => {
    const KiB = 1024
    const limits = {
      maxFrameSize: 256 * KiB,
      maxBufferedPerPeer: 1024 * KiB,
      maxBufferedPerAddress: 2048 * KiB,
      maxBufferedTotal: 4096 * KiB
    }
    const server = await serve(limits)
    const attackers = await Promise.all([makeNode(), makeNode(), makeNode()])
    const bystander = await makeNode()

    // each attacker opens 8 streams (the per-connection limit) and leaves a
    // frame of 256 KiB 200 KiB short of complete on each: 4.8 MiB in all
    const prefix = fromHex('808010') // 256 KiB, shortest form
    const partial = new Uint8Array(200 * KiB)
    const streams: Stream[] = []
    for (const attacker of attackers) {
      for (let i = 0; i < 8; i++) {
        const stream = await attacker.dialProtocol(server.getMultiaddrs()[0], PROTO)
        stream.send(prefix)
        stream.send(partial)
        streams.push(stream)
      }
    }
    const finished: Array<{ frames: Frame[], ended: boolean }> = []
    const readers = streams.map(async s => readAll(s, 60_000).then(r => { finished.push(r); return r }))

    const messaging = server.services.messaging
    const peers = attackers.map(a => a.peerId.toString())
    const check = (): void => {
      const b = messaging.bufferStats()
      expect(b.total).toBeLessThanOrEqual(limits.maxBufferedTotal)
      expect(messaging.stats().bufferedBytes).toBe(b.total)
      for (const p of peers) expect(b.peers[p] ?? 0).toBeLessThanOrEqual(limits.maxBufferedPerPeer)
      expect(b.addresses['127.0.0.1'] ?? 0).toBeLessThanOrEqual(limits.maxBufferedPerAddress)
    }

    // the address budget fills up: 2 MiB held, the rest refused
    await until(() => { check(); return messaging.bufferStats().total > limits.maxBufferedPerAddress - 256 * KiB }, { timeout: 10_000 })
    check()
    // a bystander still gets answers meanwhile
    await stillServes(server, bystander)
    check()

    // the streams that went over a budget were told so and closed: 24
    // streams of 200 KiB against a 2 MiB address budget, at most 10 fit
    const isRefusal = (r: { frames: Frame[], ended: boolean }): boolean => r.ended &&
      r.frames.some(f => f.type === FrameType.ERROR && f.id === 0 && (f as { code: string }).code === 'RESOURCE_EXHAUSTED')
    await until(() => finished.filter(isRefusal).length >= 14, { timeout: 30_000 })
    check()
    for (const stream of streams) stream.abort(new Error('attacker done'))
    await Promise.all(readers)

    // and everything is given back once the streams are gone
    await until(() => messaging.stats().bufferedBytes === 0, { timeout: 30_000 })
    expect(messaging.bufferStats()).toEqual({ total: 0, peers: {}, addresses: {} })
    await stillServes(server, bystander)
  })
})

describe('decode floods (TCP)', () => {
  /** A REQUEST whose payload is `count` one-byte integers */
  function intFrame (id: number, count: number): Uint8Array {
    return encodeFramePrefixed({ type: FrameType.REQUEST, id, method: 'sink', payload: new Array(count).fill(1) })
  }

  it('refuses a frame of a million one-byte integers before decoding it', async () => {
    const server = await serve()
    const attacker = await makeNode()
    const stream = await attacker.dialProtocol(server.getMultiaddrs()[0], PROTO)
    const lp = lpStream(stream)
    stream.send(intFrame(1, 1_000_000))
    const reply = decodeFrame(await lp.read({ signal: AbortSignal.timeout(PROMPT) }))
    expect(reply).toMatchObject({ type: FrameType.ERROR, id: 1, code: 'MALFORMED_FRAME' })
    expect((reply as { message: string }).message).toMatch(/more than 131072 items/)
    expect(server.services.messaging.stats().activeHandlers).toBe(0)
  })

  it('charges frames the scan refuses too: a flood of them ends in TOO_MANY_REQUESTS', async () => {
    const server = await serve({ maxFrameSize: 256 * 1024, maxFrameItems: 1000, decodeBytesPerPeer: 256 * 1024 + 16 * 1000 })
    const flooder = await makeNode()
    const stream = await flooder.dialProtocol(server.getMultiaddrs()[0], PROTO)
    const reading = readAll(stream, 30_000)
    // ~200 KB each, refused for that call (more than 1000 items) but charged
    for (let id = 1; id <= 10; id++) {
      if (stream.status !== 'open') break
      // the server closing the stream mid-flood is the expected end: the next round sees its status
      if (!stream.send(intFrame(id, 200_000))) await stream.onDrain().catch(() => undefined)
    }
    const { frames, ended } = await reading
    expect(ended).toBe(true)
    const refused = frames.filter(f => f.type === FrameType.ERROR && f.id > 0)
    expect(refused.length).toBeGreaterThanOrEqual(1)
    expect(refused.length).toBeLessThanOrEqual(2)
    expect(frames.at(-1)).toMatchObject({ type: FrameType.ERROR, id: 0, code: 'TOO_MANY_REQUESTS' })
  })

  it('charges decoding to the flooding peer: it gets TOO_MANY_REQUESTS, a bystander keeps its answers', async () => {
    // the smallest budget allowed: one largest frame (64 KiB + 16 x 131072)
    const server = await serve({ decodeBytesPerPeer: 64 * 1024 + 16 * 131_072, maxFrameSize: 64 * 1024 })
    const flooder = await makeNode()
    const bystander = await makeNode()
    const addr = server.getMultiaddrs()[0]
    await stillServes(server, bystander)

    // 60,000 one-byte integers cost ~1 MB of decoding each: the burst covers two
    const stream = await flooder.dialProtocol(addr, PROTO)
    const reading = readAll(stream, 30_000)
    for (let id = 1; id <= 50; id++) {
      if (stream.status !== 'open') break
      // the server closing the stream mid-flood is the expected end: the next round sees its status
      if (!stream.send(intFrame(id, 60_000))) await stream.onDrain().catch(() => undefined)
    }
    const answers = await Promise.all(Array.from({ length: 10 }, async () =>
      bystander.services.messaging.request(addr, PROTO, 'echo', 'still here', { timeout: 20_000 })))
    expect(answers).toEqual(new Array(10).fill('still here'))

    const { frames, ended } = await reading
    expect(ended).toBe(true)
    const last = frames.at(-1) as Frame & { code?: string }
    expect(last).toMatchObject({ type: FrameType.ERROR, id: 0, code: 'TOO_MANY_REQUESTS' })
    // only what fitted the budget was decoded and answered
    expect(frames.filter(f => f.type === FrameType.RESPONSE).length).toBeLessThanOrEqual(3)
    await stillServes(server, bystander)
  })
})

describe('per-peer tables (item 7)', () => {
  it('go back to their baseline after many peers connect, call and leave', async () => {
    const server = await serve()
    const messaging = server.services.messaging
    const baseline = messaging.stats().peerEntries
    for (let round = 0; round < 4; round++) {
      const clients = await Promise.all(Array.from({ length: 5 }, async () => makeNode()))
      await Promise.all(clients.map(async c => {
        await stillServes(server, c)
        // a partial frame too, so the buffer accounts hold entries
        const stream = await c.dialProtocol(server.getMultiaddrs()[0], PROTO)
        stream.send(encodeFramePrefixed({ type: FrameType.REQUEST, id: 1, method: 'echo', payload: 'x'.repeat(5000) }).subarray(0, 3000))
      }))
      await until(() => messaging.bufferStats().total >= 5 * 2990, { timeout: PROMPT })
      expect(messaging.stats().peerEntries).toBeGreaterThan(baseline)
      await Promise.all(clients.map(async c => {
        nodes.splice(nodes.indexOf(c), 1)
        await c.stop()
      }))
    }
    await until(() => {
      const s = messaging.stats()
      return s.inboundStreams === 0 && s.activeHandlers === 0 && s.bufferedBytes === 0 && s.peerEntries === baseline
    }, { timeout: 30_000, interval: 200 })
    expect(messaging.stats()).toMatchObject({ inboundStreams: 0, outboundStreams: 0, bufferedBytes: 0, peerEntries: baseline })
  })
})
