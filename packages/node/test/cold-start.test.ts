/**
 * A newcomer's first steps over TCP on 127.0.0.1 (issue 11 item 15): what
 * a node can do right after `createIoaNode({ bootstrap })` returns.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { createIoaNode } from '../src/index.js'
import type { IoaNode } from '../src/index.js'

const nodes: IoaNode[] = []
afterEach(async () => {
  for (const n of nodes.splice(0).reverse()) await n.stop()
})

const TRANSPORT = { transports: ['tcp' as const] }
const PROTOCOL = '/ioa/test-cold/1.0.0'

describe('cold start over TCP', () => {
  it('a request to the bootstrap peer by its peer id, right after start, is answered (it hung in peer routing until its timeout)', async () => {
    const first = await createIoaNode({ transport: TRANSPORT })
    nodes.push(first)
    await first.transport.services.messaging.handle(PROTOCOL, 'echo', (payload) => payload)

    const newcomer = await createIoaNode({ transport: TRANSPORT, bootstrap: [first.addresses()[0]] })
    nodes.push(newcomer)
    // no wait for the bootstrap connection: the peer id alone
    const answer = await newcomer.transport.services.messaging.request(first.transport.peerId, PROTOCOL, 'echo', { hello: 'cold' }, { timeout: 20_000 })
    expect(answer).toEqual({ hello: 'cold' })
  })
})
