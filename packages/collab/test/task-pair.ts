/**
 * Fixtures of the task protocol suites: an executor node and a requester
 * node over TCP on 127.0.0.1 with their interconnects, and a minimal stand-in
 * interconnect for services that only start and stop (no network).
 */
import { createInterconnect } from '@ioa/interconnect'
import { createTransportNode } from '@ioa/transport'
import { defaultLogger } from '@libp2p/logger'
import { until } from '../../../test/util.js'
import type { Did, Interconnect } from '@ioa/interconnect'
import type { TransportNode } from '@ioa/transport'

export interface TaskPair {
  executor: TransportNode
  requester: TransportNode
  icE: Interconnect
  icR: Interconnect
}

/** Two connected TCP nodes with interconnects; `closers` gets what stops them (run it in reverse) */
export async function startTaskPair (closers: Array<() => Promise<unknown>>): Promise<TaskPair> {
  const executor = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'] })
  const requester = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'] })
  closers.push(async () => executor.stop(), async () => requester.stop())
  await requester.dial(executor.getMultiaddrs())
  const icE = await createInterconnect(executor, { requestTimeout: 3_000 })
  const icR = await createInterconnect(requester, { requestTimeout: 3_000 })
  closers.push(async () => icE.stop(), async () => icR.stop())
  return { executor, requester, icE, icR }
}

/** Wait until `ic` resolves `did` to a peer */
export async function resolvable (ic: Interconnect, did: Did): Promise<void> {
  await until(async () => ic.resolve(did, { cache: false, timeout: 3_000 }).then(r => r.peers.length > 0 ? r : undefined, () => undefined), { interval: 100, timeout: 30_000, what: `resolve ${did}` })
}

/** An interconnect with just what a task service needs to start and stop */
export function offlineInterconnect (): Interconnect {
  const noop = async (): Promise<void> => {}
  return { node: { peerId: { toString: () => 'self' }, logger: defaultLogger(), services: { messaging: { handle: noop, handleStream: noop, unhandle: noop } } }, agents: () => [] } as unknown as Interconnect
}

/** The body of a length-prefixed messaging frame (its unsigned varint length prefix removed) */
export function frameBody (frame: Uint8Array): Uint8Array {
  let i = 0
  while ((frame[i] & 0x80) !== 0) i++
  return frame.subarray(i + 1)
}

/** A messaging frame body with its unsigned varint length prefix */
export function prefixed (body: Uint8Array): Uint8Array {
  const prefix: number[] = []
  for (let n = body.length; ; n = Math.floor(n / 128)) {
    if (n < 128) {
      prefix.push(n)
      break
    }
    prefix.push((n % 128) | 0x80)
  }
  return new Uint8Array([...prefix, ...body])
}
