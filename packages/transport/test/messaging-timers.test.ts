/**
 * The hot path makes no timer per call or per item (issue 15): a stream's
 * calls share one timer that moves only when it fires (`Deadlines`).
 * Between separate libp2p nodes over TCP on 127.0.0.1: timeouts still hold
 * for each call (a short one after a long one included), and warm calls
 * and streamed items do not call `setTimeout`.
 */
import { describe, expect, it, vi } from 'vitest'
import { Deadlines } from '../src/messaging/deadlines.js'
import { collect, delay, until } from '../../../test/util.js'
import { tcpNodes } from './tcp-nodes.js'
import type { TransportNode } from '../src/index.js'

const PROTO = '/ioa/test-timers/1.0.0'
const makeNode = tcpNodes()

async function pair (): Promise<{ server: TransportNode, client: TransportNode }> {
  const server = await makeNode()
  const client = await makeNode()
  await server.services.messaging.handle(PROTO, 'echo', (p) => p)
  await server.services.messaging.handle(PROTO, 'later', async (p) => { await delay(1); return p })
  await server.services.messaging.handle(PROTO, 'hang', async (_p, ctx) => {
    await new Promise(resolve => { ctx.signal.addEventListener('abort', resolve) })
  })
  await server.services.messaging.handleStream(PROTO, 'count', async function * (p) {
    for (let i = 0; i < (p as number); i++) yield i
  })
  expect(await client.services.messaging.request(server.getMultiaddrs()[0], PROTO, 'echo', 0)).toBe(0)
  return { server, client }
}

describe('messaging timers over tcp', () => {
  it('times out each call at its own deadline: a short call after a long one, while others are answered', async () => {
    const { server, client } = await pair()
    const m = client.services.messaging
    const long = m.request(server.peerId, PROTO, 'hang', null, { timeout: 4_000 }).catch((err: Error) => err)
    const short = m.request(server.peerId, PROTO, 'hang', null, { timeout: 300 }).catch((err: Error) => err)
    const order: string[] = []
    void long.then(() => order.push('long'))
    void short.then(() => order.push('short'))
    // answered calls meanwhile do not disturb the deadlines
    for (let i = 0; i < 20; i++) expect(await m.request(server.peerId, PROTO, 'echo', i)).toBe(i)
    expect(await short).toMatchObject({ name: 'TimeoutError', code: 'TIMEOUT' })
    expect(await long).toMatchObject({ name: 'TimeoutError', code: 'TIMEOUT' })
    expect(order).toEqual(['short', 'long'])
    // the server heard both CANCELs and stopped both handlers
    await until(() => server.services.messaging.stats().activeHandlers === 0, { timeout: 10_000 })
    expect(await m.request(server.peerId, PROTO, 'echo', 'after')).toBe('after')
  })

  it('makes no timer per warm call or per streamed item', async () => {
    const { server, client } = await pair()
    const m = client.services.messaging
    // warm: the channel's timer is set by the first calls
    for (let i = 0; i < 5; i++) await m.request(server.peerId, PROTO, 'later', i)
    await collect(m.stream(server.peerId, PROTO, 'count', 3))
    // timers set with the messaging code on the stack (libp2p's own, e.g.
    // identify's or a dial's, are not the messaging's and vary with load)
    const original = globalThis.setTimeout
    let counted = 0
    const spy = vi.spyOn(globalThis, 'setTimeout').mockImplementation(((fn: (...a: unknown[]) => void, ms?: number, ...args: unknown[]) => {
      if (/messaging|framed-stream|write-coalescer|turn-end/.test(new Error().stack ?? '')) counted++
      return original(fn, ms, ...args)
    }) as typeof setTimeout)
    for (let i = 0; i < 100; i++) await m.request(server.peerId, PROTO, 'later', i)
    // 100 calls with a pending handler each (`delay(1)` is one timer per call, in the handler)
    const unary = counted
    counted = 0
    expect(await collect(m.stream(server.peerId, PROTO, 'count', 200))).toHaveLength(200)
    const streamed = counted
    spy.mockRestore()
    // before: 2 timers per call (client, server) besides the handler's (300
    // in all), and one per item (200+); a stream's one timer is moved when it
    // fires, which a slow (loaded) machine makes happen more often
    expect(unary).toBeLessThan(100 + 100)
    expect(streamed).toBeLessThan(50)
  })

  it('makes no timer per warm stream, and a stream still times out waiting for its next item', async () => {
    const { server, client } = await pair()
    const m = client.services.messaging
    await collect(m.stream(server.peerId, PROTO, 'count', 1))
    const original = globalThis.setTimeout
    let counted = 0
    const spy = vi.spyOn(globalThis, 'setTimeout').mockImplementation(((fn: (...a: unknown[]) => void, ms?: number, ...args: unknown[]) => {
      // (the frames below this mock: its own file's name would match)
      if (/src\/(messaging|framed-stream|write-coalescer|turn-end)/.test((new Error().stack ?? '').split('\n').slice(2).join('\n'))) counted++
      return original(fn, ms, ...args)
    }) as typeof setTimeout)
    for (let i = 0; i < 100; i++) expect(await collect(m.stream(server.peerId, PROTO, 'count', 2))).toEqual([0, 1])
    spy.mockRestore()
    // before: one timer per stream (its guard's), 100 in all
    expect(counted).toBeLessThan(20)
    await server.services.messaging.handleStream(PROTO, 'stall', async function * () {
      yield 'first'
      await new Promise(() => {})
    })
    const seen: unknown[] = []
    const err = await (async () => {
      for await (const item of m.stream(server.peerId, PROTO, 'stall', null, { timeout: 300 })) seen.push(item)
    })().catch((e: Error) => e)
    expect(seen).toEqual(['first'])
    expect(err).toMatchObject({ name: 'TimeoutError', code: 'TIMEOUT' })
    // the server heard the CANCEL and stopped the handler
    await until(() => server.services.messaging.stats().activeHandlers === 0, { timeout: 10_000 })
  })
})

describe('Deadlines', () => {
  it('expires entries in the order of their deadlines, moved later or added earlier', async () => {
    const expired: string[] = []
    const entries = new Map<string, { deadline: number, expire: () => void }>()
    const deadlines = new Deadlines(() => entries.values())
    const add = (name: string, ms: number): { deadline: number } => {
      const entry = { deadline: Date.now() + ms, expire: () => { entries.delete(name); expired.push(name) } }
      entries.set(name, entry)
      deadlines.watch(entry.deadline)
      return entry
    }
    add('b', 200)
    const moved = add('c', 100)
    add('a', 50)
    // 'c' moves after 'b' without touching the timer
    moved.deadline = Date.now() + 400
    await until(() => entries.size === 0, { timeout: 10_000 })
    expect(expired).toEqual(['a', 'b', 'c'])
    deadlines.stop()
  })
})
