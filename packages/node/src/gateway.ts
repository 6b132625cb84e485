/**
 * The gateway role of a node: a second libp2p node joins the domain's own
 * network, and the skills its export rules name are offered (and their tasks
 * relayed) on the outer network. Logs on `ioa:node:gateway`.
 */
import { createTaskGateway } from '@ioa/collab'
import { createGateway, createInterconnect } from '@ioa/interconnect'
import { createTransportNode } from '@ioa/transport'
import { openNodeStore } from './data-dir.js'
import { nodeKeyOption, openKeyStore } from './keystore.js'
import { attempt } from './logging.js'
import type { IoaGateway, IoaGatewayInit, IoaNodeInit } from './ioa-node.js'
import type { IoaTracer, RelayEvent } from '@ioa/collab'
import type { GatewayExportedEvent, Interconnect } from '@ioa/interconnect'
import type { TransportNode } from '@ioa/transport'
import type { Logger } from '@libp2p/interface'
import type { Datastore } from 'interface-datastore'

/** A started gateway and how to stop it */
export interface NodeGateway {
  readonly gateway: IoaGateway
  /** Stop the relay, the gateway, the inner node and its datastore; never throws (failures are logged) */
  stop(): Promise<void>
}

/** Close a datastore the node opened (LevelDB); a caller's is left open */
export async function closeOwned (datastore: Datastore, owned: boolean): Promise<void> {
  if (owned) await (datastore as unknown as { close(): Promise<void> }).close()
}

/** Start the domain gateway: an inner node in the domain network, bridged to `outer` */
export async function startGateway (
  g: IoaGatewayInit, init: IoaNodeInit, outer: Interconnect,
  { onRelay, onExported, tracer }: { onRelay: (event: RelayEvent) => void, onExported: (event: GatewayExportedEvent) => void, tracer?: IoaTracer },
  log: Logger
): Promise<NodeGateway> {
  const { listen, bootstrap, domain, privateNetwork, keepTrace, ...rest } = g
  const dir = init.dataDir != null ? `${init.dataDir}/gateway` : undefined
  const { datastore, owned } = await openNodeStore({ dataDir: dir, newIdentity: init.newIdentity, keyGiven: init.transport?.privateKey != null })
  let innerNode: TransportNode | undefined
  let inner: Interconnect | undefined
  try {
    const keys = await openKeyStore(datastore, { ...init.keyStore, persistent: owned, where: dir ?? 'memory' })
    innerNode = await createTransportNode({
      ...init.transport,
      // the domain network's key, never the outer node's own
      privateNetwork,
      ...(privateNetwork != null ? { dhtProtocol: undefined } : {}),
      ...nodeKeyOption(keys, init.transport?.privateKey),
      listen: listen ?? ['/ip4/127.0.0.1/tcp/0'],
      bootstrap: bootstrap ?? [],
      datastore,
      messaging: init.messaging
    })
    const d = domain ?? outer.domain
    inner = await createInterconnect(innerNode, { ...init.interconnect, datastore, keys, domain: d })
    const gateway = await createGateway({
      // errors name the rules as the node config does
      field: 'gateway.exports',
      ...rest,
      domain: d,
      inner,
      outer,
      onExported: (e) => {
        log('exported %d agents (%d added, %d withdrawn)', e.agents.length, e.added.length, e.removed.length)
        rest.onExported?.(e)
        onExported(e)
      }
    })
    // tasks for exported agents are relayed too (this node then serves no tasks itself)
    const relay = await createTaskGateway({ gateway, inner, outer, onRelay, keepTrace: keepTrace === true, ...(tracer != null ? { tracer } : {}) }).catch(async (err) => {
      await attempt(log, 'stopping the gateway after the task relay failed', async () => { await gateway.stop() })
      throw err
    })
    const i = inner
    const n = innerNode
    log('gateway of %s started, inner node at %s', d, n.getMultiaddrs().map(a => a.toString()).join(', '))
    return {
      gateway: { inner: i, gateway, addresses: () => n.getMultiaddrs().map(a => a.toString()) },
      stop: async () => {
        await attempt(log, 'stopping the task relay', async () => { await relay.stop() })
        await attempt(log, 'stopping the gateway', async () => { await gateway.stop() })
        await attempt(log, 'stopping the inner interconnect', async () => { await i.stop() })
        await attempt(log, 'stopping the inner node', async () => { await n.stop() })
        await attempt(log, 'closing the gateway datastore', async () => { await closeOwned(datastore, owned) })
        log('gateway of %s stopped', d)
      }
    }
  } catch (err) {
    log.error('gateway failed to start: %e', err)
    await attempt(log, 'stopping the inner interconnect', async () => { await inner?.stop() })
    await attempt(log, 'stopping the inner node', async () => { await innerNode?.stop() })
    await attempt(log, 'closing the gateway datastore', async () => { await closeOwned(datastore, owned) })
    throw err
  }
}
