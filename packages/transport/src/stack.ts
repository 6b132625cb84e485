/**
 * The libp2p modules a transport node is built from, loaded on first use
 * rather than when `@ioa/transport` is imported: together they are most of
 * the import time of every package above (libp2p itself, Noise, Yamux,
 * kad-dht, the transports), and a program that imports the stack to check a
 * config, sign a delegation or print help never starts a node. Optional
 * pieces (WebSockets, the in-memory transport, gossipsub, mDNS, LevelDB) load only when
 * a node uses them. Each module is imported once per process.
 *
 * **The stack bundle.** The build (`npm run build`, scripts/bundle-stack.js)
 * bundles the pieces of src/stack/ into dist/bundle/ with esbuild: one ESM
 * file per piece and shared chunks, holding every module that the stack's
 * packages do not already load at import (those stay external, so there is
 * one copy of each: @libp2p/interface, @libp2p/utils, multiformats, …).
 * Loading ~190 modules from one bundle instead of separate files takes about
 * 35 ms instead of ~130 ms here (Node 20 has no compile cache for ES modules;
 * resolving, reading and compiling module by module is what costs). When
 * dist/bundle/ is absent (a build with `tsc -b` alone) or the environment
 * sets `IOA_STACK_BUNDLE=0`, the pieces load module by module as before;
 * the log `ioa:transport:stack` says which. WebSockets, mDNS and LevelDB are
 * not bundled (CommonJS packages with optional native parts).
 *
 * The root package.json's `overrides` keep one copy of uint8arraylist,
 * uint8arrays and protons-runtime in the tree: Noise asks for older majors
 * (the same JavaScript, older TypeScript types), and with its own copies it
 * loaded about 50 more modules (multiformats 13 among them) when a node started.
 */
import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { logger } from '@libp2p/logger'
import type { TransportKind } from './node.js'

const log = logger('ioa:transport:stack')

/** The directory of the stack bundle, beside dist/src/ */
const BUNDLE_DIR = new URL('../bundle/', import.meta.url)

let useBundle: boolean | undefined

/** Whether the pieces come from the bundle: it exists, and IOA_STACK_BUNDLE is not `0` (decided once) */
function bundled (): boolean {
  if (useBundle == null) {
    const off = process.env.IOA_STACK_BUNDLE === '0'
    useBundle = !off && existsSync(fileURLToPath(new URL('core.js', BUNDLE_DIR)))
    log('loading the libp2p stack %s', useBundle ? `from the bundle in ${fileURLToPath(BUNDLE_DIR)}` : off ? 'module by module (IOA_STACK_BUNDLE=0)' : 'module by module (no bundle built)')
  }
  return useBundle
}

/** Piece `name` of src/stack/: from the bundle when there is one, else `plain()` */
async function piece<T> (name: string, plain: () => Promise<T>): Promise<T> {
  if (!bundled()) return plain()
  return await import(new URL(`${name}.js`, BUNDLE_DIR).href) as T
}

/** The modules every node needs */
const core = async () => piece('core', async () => import('./stack/core.js'))

let loading: ReturnType<typeof core> | undefined

/** The core modules (imported on the first call) */
export async function loadStack (): ReturnType<typeof core> {
  loading ??= core()
  return loading
}

/** The transport of one kind */
export async function loadTransport (kind: TransportKind) {
  if (kind === 'tcp') return (await piece('tcp', async () => import('./stack/tcp.js'))).tcp()
  if (kind === 'websockets') return (await import('@libp2p/websockets')).webSockets()
  return (await piece('memory', async () => import('./stack/memory.js'))).memory()
}

/**
 * The loader of a node's own key from its datastore (`@libp2p/config`, with
 * the keychain it brings: a third of the stack's load time), only for a
 * node that is not given its key
 */
export async function loadSelfKeyLoader () {
  return (await piece('config', async () => import('./stack/config.js'))).loadOrCreateSelfKey
}

/** The gossipsub router (the `pubsub` service) */
export async function loadGossipsub () {
  return (await piece('gossipsub', async () => import('./stack/gossipsub.js'))).gossipsub
}

/** Multicast DNS peer discovery */
export async function loadMdns () {
  return (await import('@libp2p/mdns')).mdns
}

/** The LevelDB datastore class */
export async function loadLevelDatastore () {
  return (await import('datastore-level')).LevelDatastore
}
