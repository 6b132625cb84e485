/**
 * The messaging service of the transport layer: one node serves a unary
 * method and a streamed one; another node calls both, by address and by
 * peer id. Run it with `npm run build && npx tsx examples/transport-messaging.ts`.
 */
import { createTransportNode } from '@ioa/transport'
import { setTimeout as sleep } from 'node:timers/promises'
import { pathToFileURL } from 'node:url'

export interface MessagingResult {
  /** The echo's answer */
  echoed: unknown
  /** The items of the stream, in order */
  counted: unknown[]
  /** The items read before the caller broke out of a second stream */
  partial: unknown[]
  /** Handlers still running at the server once the broken-off stream was canceled */
  activeHandlers: number
}

export async function main ({ signal = AbortSignal.timeout(30_000) } = {}): Promise<MessagingResult> {
  const node = await createTransportNode()
  const other = await createTransportNode()
  try {
    // #region messaging
    const m = node.services.messaging
    await m.handle('/ioa/echo/1.0.0', 'echo', (payload, ctx) => ({ echo: payload, from: ctx.peer.toString() }))
    await m.handleStream('/ioa/echo/1.0.0', 'count', async function * (payload, ctx) {
      const { to } = payload as { to: number }
      for (let i = 1; i <= to && !ctx.signal.aborted; i++) yield i // ctx.signal aborts on cancel/timeout
    })

    // on another node: the target is an address, or a peer id once connected
    const c = other.services.messaging
    const echoed = await c.request(node.getMultiaddrs()[0], '/ioa/echo/1.0.0', 'echo', { any: 'DAG-CBOR data' }, { timeout: 5_000, signal })
    const counted: unknown[] = []
    for await (const item of c.stream(node.peerId, '/ioa/echo/1.0.0', 'count', { to: 3 }, { signal })) counted.push(item)
    // #endregion

    // breaking out of the loop cancels the stream at the server
    const partial: unknown[] = []
    for await (const item of c.stream(node.peerId, '/ioa/echo/1.0.0', 'count', { to: 1_000_000 }, { signal })) {
      partial.push(item)
      if (partial.length === 2) break
    }
    const until = Date.now() + 5_000
    while (m.stats().activeHandlers > 0 && Date.now() < until) await sleep(20, undefined, { signal })
    return { echoed, counted, partial, activeHandlers: m.stats().activeHandlers }
  } finally {
    await other.stop()
    await node.stop()
  }
}

if (process.argv[1] != null && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().then(result => { console.log(result) }, (err: unknown) => { console.error(err); process.exitCode = 1 })
}
