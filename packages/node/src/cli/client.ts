/**
 * The short-lived client node of the commands that talk to the network: its
 * state (peer key) in a data directory, joined through bootstrap peers,
 * stopped before the command exits.
 */
import { anySignal } from 'any-signal'
import { defaultLogger } from '@libp2p/logger'
import { multiaddr } from '@multiformats/multiaddr'
import delay from 'delay'
import { createIoaNode } from '../ioa-node.js'
import { attempt } from '../logging.js'
import { passphraseFromEnv } from '../passphrase.js'
import { peerOf } from './args.js'
import { CliError, oneLine } from './errors.js'
import type { IoaNode } from '../ioa-node.js'
import type { LevelDatastore } from 'datastore-level'
import type { Output } from './output.js'

export interface ClientInit {
  /** Multiaddrs (with /p2p/) to join through; at least one */
  bootstrap: string[]
  /** LevelDB directory of the client's state */
  dataDir: string
  /** Longest wait for a bootstrap connection and DHT peers, ms */
  timeout: number
  /** Also wait until the DHT routing table has a peer @default true */
  dht?: boolean
  signal: AbortSignal
  out: Output
}

export interface Client {
  readonly node: IoaNode
  /** Bootstrap peers connected to */
  readonly connected: string[]
  /** Stop the node and close its data directory; idempotent */
  close(): Promise<void>
}

/**
 * Start a client node and wait (at most `timeout`) until it is connected to
 * a bootstrap peer and, unless `dht: false`, its DHT routing table is not
 * empty. Throws `BOOTSTRAP_UNREACHABLE` (exit 1) when that does not happen
 * and `DataDirError`s (`DATA_DIR_LOCKED`, `DATA_DIR_CORRUPT`, …) when the
 * data directory cannot be opened.
 */
export async function openClient (init: ClientInit): Promise<Client> {
  const datastore = await openDataDir(init.dataDir)
  let node: IoaNode | undefined
  let closing: Promise<void> | undefined
  const close = async (): Promise<void> => {
    closing ??= (async () => {
      const log = (node?.logger ?? defaultLogger()).forComponent('ioa:node:cli')
      await attempt(log, 'stopping the client node', async () => { await node?.stop() })
      await attempt(log, 'closing the client data directory', async () => { await datastore.close() })
    })()
    await closing
  }
  try {
    node = await createIoaNode({
      listen: ['/ip4/127.0.0.1/tcp/0'],
      bootstrap: [],
      datastore,
      // a client asks the DHT but does not serve it: other peers keep it out of their tables
      transport: { dhtClientMode: true },
      interconnect: { publish: false },
      // the client's peer key is encrypted when a passphrase is set (docs/cli.md)
      keyStore: await passphraseFromEnv(process.env)
    })
    const connected = await joinNetwork(node, init)
    return { node, connected, close }
  } catch (err) {
    await close()
    throw err
  }
}

/** Run `fn` with a client node that is closed afterwards, whatever happens */
export async function withClient<T> (init: ClientInit, fn: (client: Client) => Promise<T>): Promise<T> {
  const client = await openClient(init)
  try {
    return await fn(client)
  } finally {
    await client.close()
  }
}

async function openDataDir (dir: string): Promise<LevelDatastore> {
  const { openDataDir } = await import('../data-dir.js')
  return openDataDir(dir, { field: '--data-dir' })
}

/** Dial the bootstrap peers, then wait for a DHT peer; returns the peers connected to */
async function joinNetwork (node: IoaNode, init: ClientInit): Promise<string[]> {
  const started = Date.now()
  const signal = anySignal([init.signal, AbortSignal.timeout(init.timeout)])
  try {
    return await joinWithin(node, init, signal, started)
  } finally {
    signal.clear()
  }
}

/** `joinNetwork` within `signal` */
async function joinWithin (node: IoaNode, init: ClientInit, signal: AbortSignal, started: number): Promise<string[]> {
  const n = init.bootstrap.length
  init.out.progress(`connecting to ${n} bootstrap peer${n === 1 ? '' : 's'}…`)
  const failures: string[] = []
  const connected: string[] = []
  await Promise.all(init.bootstrap.map(async addr => {
    try {
      await node.transport.dial(multiaddr(addr), { signal })
      connected.push(peerOf(addr))
    } catch (err: any) {
      failures.push(`${addr}: ${oneLine(String(err?.message ?? err), 200)}`)
    }
  }))
  init.signal.throwIfAborted()
  if (connected.length === 0) {
    const why = signal.aborted ? `no answer within ${init.timeout} ms` : failures[0]
    throw new CliError('BOOTSTRAP_UNREACHABLE', `No bootstrap peer reachable (${why})`, { field: '--bootstrap' })
  }
  if (init.dht !== false) {
    while (routingTableSize(node) === 0) {
      init.signal.throwIfAborted()
      if (signal.aborted) {
        throw new CliError('BOOTSTRAP_UNREACHABLE', `Connected to ${connected.length} bootstrap peer(s) but found no DHT peer within ${init.timeout} ms (do they run an ioa node?)`, { field: '--bootstrap' })
      }
      await delay(25)
    }
  }
  init.out.progress(`connected to ${connected.length} of ${n} (${Date.now() - started} ms)`)
  return connected
}

/** Entries of the node's DHT routing table */
export function routingTableSize (node: IoaNode): number {
  // `routingTable` is on kad-dht's implementation, not on the KadDHT interface
  const size = (node.transport.services.dht as unknown as { routingTable?: { size?: unknown } }).routingTable?.size
  return typeof size === 'number' ? size : node.transport.getPeers().length
}
