/**
 * What an opener sees when a responder refuses a messaging stream beyond its
 * per-connection limit (spec/transport.md section 3), between two nodes over
 * TCP on 127.0.0.1: the protocol negotiation succeeds, then the stream is
 * reset without a frame, and the request written on it is never handled.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { createTransportNode, encodeFramePrefixed, FrameType } from '../src/index.js'
import { readAll } from './raw-stream.js'
import { until } from '../../../test/util.js'
import type { TransportNode } from '../src/index.js'
import type { Stream } from '@libp2p/interface'

const PROTO = '/ioa/limit/1.0.0'
const LIMIT = 2
const nodes: TransportNode[] = []

afterEach(async () => {
  await Promise.all(nodes.splice(0).map(async n => n.stop()))
})

describe('inbound messaging streams beyond maxInboundStreams (TCP)', () => {
  it('are reset after negotiation, without a frame, and their requests are not handled', async () => {
    const server = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'], messaging: { maxInboundStreams: LIMIT } })
    const opener = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'] })
    nodes.push(server, opener)
    let handled = 0
    await server.services.messaging.handle(PROTO, 'echo', (p) => { handled++; return p })
    const connection = await opener.dial(server.getMultiaddrs()[0])

    const open: Stream[] = []
    for (let i = 0; i < LIMIT; i++) open.push(await connection.newStream(PROTO))
    // the one stream too many: negotiation succeeds (newStream resolves with the protocol) ...
    const refused = await connection.newStream(PROTO)
    expect(refused.protocol).toBe(PROTO)
    // ... then the responder resets it
    await until(() => refused.status === 'reset' ? true : undefined, { interval: 20, timeout: 15_000, what: 'the refused stream is reset' })
    expect(() => refused.send(encodeFramePrefixed({ type: FrameType.REQUEST, id: 1, method: 'echo', payload: 'x' }))).toThrow()
    const { frames } = await readAll(refused, 1_000)
    expect(frames).toEqual([])

    // the streams within the limit still answer, and only their request was handled
    open[0].send(encodeFramePrefixed({ type: FrameType.REQUEST, id: 1, method: 'echo', payload: 'ok' }))
    const answer = await readAll(open[0], 2_000)
    expect(answer.frames[0]).toMatchObject({ type: FrameType.RESPONSE, id: 1, payload: 'ok' })
    expect(handled).toBe(1)
  }, 60_000)
})
