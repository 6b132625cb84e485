/**
 * The writes of one turn to a TCP connection leave in one syscall
 * (`corkEncrypted`): counted as the writes node:net hands to the kernel
 * (`Socket#_write` / `_writev`, one syscall each) for messaging calls
 * between separate libp2p nodes over TCP on 127.0.0.1
 */
import net from 'node:net'
import { describe, expect, it, vi } from 'vitest'
import { corkTurns } from '../src/cork-writes.js'
import { tcpNodes } from './tcp-nodes.js'
import type { MessageStream } from '@libp2p/interface'

const PROTO = '/ioa/test-cork/1.0.0'
const makeNode = tcpNodes()

/** Count the socket writes (syscalls) of both nodes while `fn` runs */
async function socketWrites (fn: () => Promise<void>): Promise<number> {
  const proto = net.Socket.prototype as unknown as Record<'_write' | '_writev', (...args: unknown[]) => unknown>
  const write = vi.spyOn(proto, '_write')
  const writev = vi.spyOn(proto, '_writev')
  await fn()
  const n = write.mock.calls.length + writev.mock.calls.length
  write.mockRestore()
  writev.mockRestore()
  return n
}

describe('corked TCP writes', () => {
  it('writes a request and its answer in one syscall at each end', async () => {
    const server = await makeNode()
    const client = await makeNode()
    await server.services.messaging.handle(PROTO, 'echo', (p) => p)
    const m = client.services.messaging
    for (let i = 0; i < 10; i++) expect(await m.request(server.getMultiaddrs()[0], PROTO, 'echo', i)).toBe(i)
    const calls = 100
    const writes = await socketWrites(async () => {
      for (let i = 0; i < calls; i++) expect(await m.request(server.peerId, PROTO, 'echo', new Uint8Array(100).fill(i))).toEqual(new Uint8Array(100).fill(i))
    })
    // uncorked: 8 (each end: a Noise message for the frame and one for Yamux's
    // window update, each written as its length and its ciphertext); corked: one
    // per end (the window update with the answer, or with the next request)
    expect(writes / calls).toBeLessThanOrEqual(2.5)
  })

  it('moves large payloads intact in both directions', async () => {
    const server = await makeNode()
    const client = await makeNode()
    await server.services.messaging.handle(PROTO, 'echo', (p) => p)
    const big = crypto.getRandomValues(new Uint8Array(60_000))
    const answers = await Promise.all(Array.from({ length: 8 }, async () => client.services.messaging.request(server.getMultiaddrs()[0], PROTO, 'echo', big)))
    for (const a of answers) expect(Buffer.from(a as Uint8Array).equals(Buffer.from(big))).toBe(true)
  })

  it('leaves a connection without a corkable socket as it is', () => {
    const connection = { send: () => true } as unknown as MessageStream
    const send = connection.send
    expect(corkTurns(connection).send).toBe(send)
  })
})
