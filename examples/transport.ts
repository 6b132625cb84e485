/**
 * The transport layer alone: two libp2p nodes, a request/response protocol
 * of your own. Run it with `npm run build && npx tsx examples/transport.ts`.
 */
import { createTransportNode } from '@ioa/transport'
import { pathToFileURL } from 'node:url'

export async function main (): Promise<unknown> {
  // #region greeter
  const server = await createTransportNode()              // TCP + WebSockets on 127.0.0.1
  const client = await createTransportNode()

  await server.services.messaging.handle('/ioa/greeter/1.0.0', 'greet', (payload, ctx) => {
    return { hello: (payload as { name: string }).name, from: ctx.peer.toString() }
  })

  const reply = await client.services.messaging.request(
    server.getMultiaddrs()[0], '/ioa/greeter/1.0.0', 'greet', { name: 'car' }, { timeout: 5_000 })

  await client.stop()
  await server.stop()
  // #endregion
  return reply
}

if (process.argv[1] != null && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().then(reply => { console.log(reply) }, (err: unknown) => { console.error(err); process.exitCode = 1 })
}
