// One node of the demo, in its own OS process.
// argv: <name> [bootstrap multiaddr]
// Prints a JSON line {"peerId","addrs"} once it listens, answers
// /ioa/demo/1.0.0 "hello", and provides the DHT key of its name.
import '@ioa/transport/polyfill'
import { createTransportNode } from '@ioa/transport'
import { CID } from 'multiformats/cid'
import { sha256 } from 'multiformats/hashes/sha2'

const [name, bootstrapAddr] = process.argv.slice(2)
const node = await createTransportNode({
  transports: ['tcp'],
  listen: ['/ip4/127.0.0.1/tcp/0'],
  bootstrap: bootstrapAddr != null ? [bootstrapAddr] : []
})

await node.services.messaging.handle('/ioa/demo/1.0.0', 'hello', (payload, ctx) => ({
  from: name,
  pid: process.pid,
  to: ctx.peer.toString(),
  echo: payload
}))

process.stdout.write(JSON.stringify({ peerId: node.peerId.toString(), addrs: node.getMultiaddrs().map(String) }) + '\n')

// announce "demo.<name>" in the DHT once we have someone to tell
const key = CID.createV1(0x55, await sha256.digest(new TextEncoder().encode(`demo.${name}`)))
const announce = async () => {
  for (let attempt = 0; attempt < 50; attempt++) {
    if (node.getPeers().length > 0) {
      try {
        await node.contentRouting.provide(key, { signal: AbortSignal.timeout(5_000) })
        process.stdout.write(JSON.stringify({ provided: `demo.${name}` }) + '\n')
        return
      } catch { // retry until the routing table has room
      }
    }
    await new Promise(resolve => setTimeout(resolve, 200))
  }
}
void announce()

const stop = async () => { await node.stop(); process.exit(0) }
process.on('SIGTERM', () => { void stop() })
process.stdin.on('end', () => { void stop() })
process.stdin.resume()
