/**
 * The `pubsub` service of a transport node (gossipsub, StrictSign) over TCP
 * on 127.0.0.1 between separate nodes, and its options
 */
import { describe, expect, it } from 'vitest'
import { createTransportNode } from '../src/index.js'
import { startNetwork } from '../../../test/harness/index.js'
import { stopAfterEach } from '../../../test/stop-after-each.js'
import { expectErrorName, until } from '../../../test/util.js'
import type { TransportNode, TransportNodeInit } from '../src/index.js'

const nodes = stopAfterEach()

async function makeNode (init: TransportNodeInit = {}): Promise<TransportNode> {
  const node = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'], ...init })
  nodes.push(node)
  return node
}


describe('pubsub service', () => {
  it('delivers messages signed by their sender over TCP', async () => {
    const a = await makeNode()
    const b = await makeNode()
    const topic = '/ioa/test-topic/1'
    const got: Array<{ type: string, from?: string, data: number[] }> = []
    b.services.pubsub?.addEventListener('message', (evt) => {
      const m = evt.detail
      got.push({ type: m.type, from: m.type === 'signed' ? m.from.toString() : undefined, data: [...m.data] })
    })
    a.services.pubsub?.subscribe(topic)
    b.services.pubsub?.subscribe(topic)
    await a.dial(b.getMultiaddrs()[0])
    await until(() => a.services.pubsub?.getSubscribers(topic).some(p => p.equals(b.peerId)), { timeout: 20_000, what: 'subscription' })
    expect(a.services.pubsub?.globalSignaturePolicy).toBe('StrictSign')
    expect(a.getProtocols()).toContain('/meshsub/1.1.0')
    expect(a.getProtocols()).not.toContain('/floodsub/1.0.0')
    await a.services.pubsub?.publish(topic, new Uint8Array([1, 2, 3]))
    await until(() => got.length === 1, { timeout: 20_000, what: 'delivery' })
    expect(got[0]).toEqual({ type: 'signed', from: a.peerId.toString(), data: [1, 2, 3] })
  })

  it('is left out with pubsub: false, and refuses bad options', async () => {
    const off = await makeNode({ pubsub: false })
    expect(off.services.pubsub).toBeUndefined()
    expect(off.getProtocols().some(p => p.startsWith('/meshsub/'))).toBe(false)
    await expectErrorName(createTransportNode({ pubsub: { maxRpcBytes: 10 } }), 'InvalidArgumentError')
    await expectErrorName(createTransportNode({ pubsub: { heartbeatInterval: 0.5 } }), 'InvalidArgumentError')
  })
})

describe('pubsub between many nodes on one address', () => {
  it('a node with more than 14 gossip peers on 127.0.0.1 still hears them (allow exempts the address from IP-colocation scoring)', async () => {
    const net = await startNetwork({ size: 17, transport: 'tcp', topology: 'star' })
    try {
      const topic = '/ioa/test-crowd/1'
      const hub = net.nodes[0]
      for (const n of net.nodes) n.services.pubsub?.subscribe(topic)
      // the hub learns the 16 leaves' subscriptions only if it does not graylist them
      await until(() => hub.services.pubsub?.getSubscribers(topic).length === 16, { timeout: 30_000, interval: 100, what: 'subscriptions of 16 peers on one address' })
      const heard: string[] = []
      hub.services.pubsub?.addEventListener('message', (evt) => { if (evt.detail.type === 'signed') heard.push(evt.detail.from.toString()) })
      const leaf = net.nodes[16]
      await until(() => leaf.services.pubsub?.getSubscribers(topic).some(p => p.equals(hub.peerId)), { timeout: 30_000, what: 'hub subscription' })
      await leaf.services.pubsub?.publish(topic, new Uint8Array([7]))
      await until(() => heard.includes(leaf.peerId.toString()), { timeout: 30_000, interval: 100, what: 'message of a leaf' })
    } finally {
      await net.stop()
    }
  })
})
