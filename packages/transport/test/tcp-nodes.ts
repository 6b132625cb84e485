/**
 * Transport nodes on TCP 127.0.0.1 for a test file, stopped after each test
 * (`stopAfterEach`, which also restores vitest's mocks)
 */
import { createTransportNode } from '../src/index.js'
import { stopAfterEach } from '../../../test/stop-after-each.js'
import type { MessagingInit, TransportNode } from '../src/index.js'

/** Register the `afterEach` and return a maker of nodes with the given messaging options */
export function tcpNodes (): (messaging?: MessagingInit) => Promise<TransportNode> {
  const started = stopAfterEach()
  return async (messaging = {}) => {
    const node = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'], messaging })
    started.push(node)
    return node
  }
}
