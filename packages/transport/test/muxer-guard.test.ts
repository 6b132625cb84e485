/**
 * The Yamux guard (src/muxer-guard.ts), over TCP between two nodes: a
 * stream opened on a connection that closes in the same tick used to throw
 * from the muxer's microtask, an uncaught exception that ends the process.
 */
import { describe, expect, it } from 'vitest'
import { createTransportNode } from '../src/index.js'
import { stopAfterEach } from '../../../test/stop-after-each.js'
import { LOOPBACK, until } from '../../../test/util.js'

const nodes = stopAfterEach()

describe('stream muxer guard', () => {
  it('drops the opening window update of a stream whose connection closed in the same tick, instead of throwing it uncaught', async () => {
    const init = { transports: ['tcp' as const], listen: ['/ip4/127.0.0.1/tcp/0'], allow: LOOPBACK, pubsub: false }
    const [a, b] = await Promise.all([createTransportNode(init), createTransportNode(init)])
    nodes.push(a, b)
    const uncaught: Error[] = []
    const onUncaught = (err: Error): void => { uncaught.push(err) }
    process.on('uncaughtException', onUncaught)
    try {
      for (let i = 0; i < 5; i++) {
        const conn = await a.dial(b.getMultiaddrs()[0])
        const muxer = (conn as unknown as { muxer: { createStream(): Promise<unknown> } }).muxer
        const opening = muxer.createStream().catch((err: Error) => err)
        // the transport closes before the muxer's microtask sends the window update
        ;(conn as unknown as { maConn: { abort(err: Error): void } }).maConn.abort(new Error('gone'))
        await opening
        await until(() => a.getConnections(b.peerId).length === 0, { timeout: 5_000, interval: 20 })
        await new Promise(resolve => setTimeout(resolve, 20))
      }
    } finally {
      process.off('uncaughtException', onUncaught)
    }
    expect(uncaught.map(e => `${e.name}: ${e.message}`)).toEqual([])

    // the frame that threw: a window update written after the transport closed
    const conn = await a.dial(b.getMultiaddrs()[0])
    const muxer = (conn as unknown as { muxer: { sendFrame(h: object): boolean } }).muxer
    ;(conn as unknown as { maConn: { abort(err: Error): void } }).maConn.abort(new Error('gone'))
    expect(muxer.sendFrame({ type: 1, flag: 0, streamID: 1, length: 1 })).toBe(false)
    // data frames are the writer's to handle: still thrown
    expect(() => muxer.sendFrame({ type: 0, flag: 0, streamID: 1, length: 1 })).toThrow()
    await until(() => a.getConnections(b.peerId).length === 0, { timeout: 5_000, interval: 20 })
    // the node still works
    expect((await a.dial(b.getMultiaddrs()[0])).status).toBe('open')
  })
})
