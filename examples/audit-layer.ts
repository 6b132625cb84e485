/**
 * An audit layer for `@ioa/node`, built only on the public API of the
 * packages (no package is edited): every task the node's agents serve is
 * appended to a hash-chained log in the node's datastore, and peers allowed by
 * the `readers` option read the newest entries over `/ioa/audit/1.0.0`
 * (`spec/audit-example.md`). `fetchAudit` is the client; it verifies the hash
 * chain of what it receives.
 *
 * ```ts
 * const node = await createIoaNode({ layers: [auditLayer({ readers: [auditor] })] })
 * const { entries } = await fetchAudit(auditorNode, node.transport.peerId, { limit: 20 })
 * ```
 */
import { TASK_ID_PATTERN } from '@ioa/collab/wire'
import { isDid } from '@ioa/interconnect'
import { CodedError, ErrorFamily, ERROR_CODE_PATTERN, InvalidArgumentError, withCode } from '@ioa/transport'
import * as dagCbor from '@ipld/dag-cbor'
import { peerIdFromString } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { Key } from 'interface-datastore'
import { sha256 } from 'multiformats/hashes/sha2'
import { z } from 'zod'
import type { IoaLayer, IoaNode, NodeTaskEvent } from '@ioa/node'
import type { MessageTarget, RequestContext } from '@ioa/transport'
import type { PeerId } from '@libp2p/interface'

/** The protocol id of the audit service */
export const AUDIT_PROTOCOL = '/ioa/audit/1.0.0'

/** `prev` of the first entry: 32 zero bytes in hex */
export const GENESIS_HASH = '0'.repeat(64)

/** Limits fixed by the protocol (`spec/audit-example.md`, "Limits") */
export const AUDIT_LIMITS = Object.freeze({
  /** Most entries a `tail` request may ask for, and a responder may send */
  maxEntries: 1000,
  /** Longest text field of an entry (skill, ids), in characters */
  maxText: 256
})

// ---------------------------------------------------------------------------
// errors

/** Base class of the audit errors; `code` is also the wire code */
export class AuditError extends CodedError {
  static override name = 'AuditError'
}

/** The requesting peer is not one of the node's `readers` (sent on the wire) */
export class AuditForbiddenError extends withCode(AuditError, 'FORBIDDEN', 'Not allowed to read the audit log') {
  static override name = 'AuditForbiddenError'
}

/** The received entries do not form a valid hash chain (raised by the reader) */
export class AuditChainError extends withCode(AuditError, 'AUDIT_CHAIN_BROKEN', 'The audit hash chain is broken') {
  static override name = 'AuditChainError'
}

/** The response is not a `tail` answer within the limits (raised by the reader) */
export class InvalidAuditResponseError extends withCode(AuditError, 'INVALID_AUDIT_RESPONSE', 'Invalid audit response') {
  static override name = 'InvalidAuditResponseError'
}

/** The audit errors by code: a remote one comes back as its class */
const family = new ErrorFamily<AuditError>(AuditError).register(AuditForbiddenError, AuditChainError, InvalidAuditResponseError)

// ---------------------------------------------------------------------------
// entries

/** One served task, as logged */
export interface AuditEntry {
  /** 1, 2, 3 … with no gap */
  seq: number
  /** When the task ended, ms since the epoch */
  at: number
  /** The hosted agent that served the task */
  agent: string
  skill: string
  task: string
  /** The agent that asked */
  caller: string
  /** The root principal of the delegation chain */
  root: string
  outcome: 'completed' | 'failed'
  /** How long the handler ran, ms */
  duration: number
  /** The failure's code; only when `outcome` is `failed` */
  error?: string
  /** `hash` of the previous entry ({@link GENESIS_HASH} for seq 1) */
  prev: string
  /** Lower-case hex of sha2-256 over the DAG-CBOR encoding of the entry without `hash` */
  hash: string
}

const Hex32 = z.string().regex(/^[0-9a-f]{64}$/)
const Text = z.string().min(1).max(AUDIT_LIMITS.maxText)
const Time = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER)

const EntrySchema = z.object({
  seq: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER),
  at: Time,
  agent: Text.refine(isDid, 'a did:key'),
  skill: Text,
  task: Text.regex(TASK_ID_PATTERN),
  caller: Text.refine(isDid, 'a did:key'),
  root: Text.refine(isDid, 'a did:key'),
  outcome: z.enum(['completed', 'failed']),
  duration: Time,
  error: z.string().regex(ERROR_CODE_PATTERN).optional(),
  prev: Hex32,
  hash: Hex32
}).strict().refine(e => (e.outcome === 'failed') === (e.error != null), { message: 'error is present exactly when the task failed', path: ['error'] })

const TailRequestSchema = z.object({
  limit: z.number().int().min(1).max(AUDIT_LIMITS.maxEntries),
  before: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER).optional()
}).strict()

const TailResponseSchema = z.object({
  entries: z.array(z.unknown()).max(AUDIT_LIMITS.maxEntries),
  head: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER)
}).strict()

/** The hash of an entry: hex of sha2-256 over the DAG-CBOR encoding of every field but `hash` */
export async function entryHash (entry: Omit<AuditEntry, 'hash'> & { hash?: string }): Promise<string> {
  const { hash: _hash, ...body } = entry
  const digest = await sha256.digest(dagCbor.encode(body))
  return Buffer.from(digest.digest).toString('hex')
}

/**
 * Check that `entries` (oldest first) form an unbroken chain: consecutive
 * `seq`, each `prev` the hash of the entry before (the genesis hash for seq
 * 1), each `hash` the hash of its own entry. Throws `AuditChainError`.
 */
export async function verifyAuditChain (entries: readonly AuditEntry[]): Promise<void> {
  for (const [i, e] of entries.entries()) {
    const before = entries[i - 1]
    if (before != null && e.seq !== before.seq + 1) {
      throw new AuditChainError(`Entry ${e.seq} follows entry ${before.seq}`)
    }
    if (before != null ? e.prev !== before.hash : e.seq === 1 && e.prev !== GENESIS_HASH) {
      throw new AuditChainError(`Entry ${e.seq} does not link to the entry before it`)
    }
    if (await entryHash(e) !== e.hash) {
      throw new AuditChainError(`Entry ${e.seq} does not match its hash`)
    }
  }
}

function toEntry (value: unknown): AuditEntry | undefined {
  const parsed = EntrySchema.safeParse(value)
  return parsed.success ? parsed.data : undefined
}

/** An error's code as logged: a wire-style code, or HANDLER_ERROR */
function errorCode (code: string): string {
  return ERROR_CODE_PATTERN.test(code) ? code : 'HANDLER_ERROR'
}

// ---------------------------------------------------------------------------
// the layer

export interface AuditLayerInit {
  /**
   * Layer name, unique per node (`node.layer(name)`)
   *
   * @default 'audit'
   */
  name?: string

  /**
   * Peer ids allowed to call `tail`; everyone else gets `FORBIDDEN`
   *
   * @default [] (nobody but the node itself)
   */
  readers?: Array<string | PeerId>

  /**
   * Datastore key prefix of the log
   *
   * @default '/ioa/audit'
   */
  prefix?: string

  /**
   * Most entries in one `tail` response (at most 1000)
   *
   * @default 100
   */
  maxEntries?: number

  /**
   * Largest encoded `tail` response, in bytes: the oldest entries of a
   * response are left out until it fits
   *
   * @default 65_536
   */
  maxResponseBytes?: number

  /**
   * Entries kept in the datastore; the oldest are deleted beyond this
   *
   * @default 100_000
   */
  retain?: number

  /**
   * Finished tasks waiting to be written; further ones are counted in
   * `stats().dropped` instead of queued
   *
   * @default 1_000
   */
  maxPending?: number
}

export interface AuditHead {
  /** seq of the newest entry, 0 when the log is empty */
  seq: number
  /** hash of the newest entry, {@link GENESIS_HASH} when the log is empty */
  hash: string
}

export interface TailOptions {
  /** @default 100 */
  limit?: number
  /** Only entries with a smaller seq (paging backwards) */
  before?: number
  signal?: AbortSignal
}

export interface AuditStats {
  appended: number
  /** Finished tasks not logged because `maxPending` writes were waiting */
  dropped: number
  /** Writes the datastore refused */
  failed: number
  pending: number
}

export interface AuditLayer extends IoaLayer {
  /** Stop serving and logging, once the pending writes are done; idempotent */
  stop(): Promise<void>
  /** The newest entry's seq and hash */
  head(): AuditHead
  /** The newest entries, oldest first, read locally (no access check, no size bound but `limit`) */
  tail(options?: TailOptions): Promise<AuditEntry[]>
  /** Resolves once every task finished so far is written */
  flush(): Promise<void>
  stats(): AuditStats
}

type FinishedTask = Exclude<NodeTaskEvent, { type: 'task-started' | 'task-refused' }>

function positiveInt (value: number | undefined, fallback: number, max: number, what: string): number {
  const v = value ?? fallback
  if (!Number.isSafeInteger(v) || v < 1 || v > max) throw new InvalidArgumentError(`${what} must be an integer in 1…${max}`)
  return v
}

// #region layer
/** A layer that logs every task served by the node's agents to a hash chain and serves it to `readers` */
export function auditLayer (init: AuditLayerInit = {}): AuditLayer {
  const prefix = init.prefix ?? '/ioa/audit'
  const maxEntries = positiveInt(init.maxEntries, 100, AUDIT_LIMITS.maxEntries, 'maxEntries')
  const maxResponseBytes = positiveInt(init.maxResponseBytes, 65_536, 16 * 1024 * 1024, 'maxResponseBytes')
  const retain = positiveInt(init.retain, 100_000, Number.MAX_SAFE_INTEGER, 'retain')
  const maxPending = positiveInt(init.maxPending, 1_000, 1_000_000, 'maxPending')
  const headKey = new Key(`${prefix}/head`)
  const entryKey = (seq: number): Key => new Key(`${prefix}/entries/${String(seq).padStart(16, '0')}`)

  let node: IoaNode | undefined
  let head: AuditHead = { seq: 0, hash: GENESIS_HASH }
  let writes: Promise<void> = Promise.resolve() // appends run one after the other
  let stopping: Promise<void> | undefined
  let off: (() => void) | undefined
  const stats: AuditStats = { appended: 0, dropped: 0, failed: 0, pending: 0 }
  const readers = new Set((init.readers ?? []).map(p => p.toString()))

  async function append (event: FinishedTask): Promise<void> {
    const ds = node!.datastore
    const body: Omit<AuditEntry, 'hash'> = {
      seq: head.seq + 1,
      at: event.at,
      agent: event.agent,
      skill: event.skill,
      task: event.taskId,
      caller: event.caller,
      root: event.root,
      outcome: event.type === 'task-completed' ? 'completed' : 'failed',
      duration: Math.max(0, Math.round(event.duration)),
      ...(event.type === 'task-failed' ? { error: errorCode(event.error.code) } : {}),
      prev: head.hash
    }
    const entry: AuditEntry = { ...body, hash: await entryHash(body) }
    const batch = ds.batch()
    batch.put(entryKey(entry.seq), dagCbor.encode(entry))
    batch.put(headKey, dagCbor.encode({ seq: entry.seq, hash: entry.hash }))
    if (entry.seq > retain) batch.delete(entryKey(entry.seq - retain))
    await batch.commit()
    head = { seq: entry.seq, hash: entry.hash }
    stats.appended++
  }

  function onTask (event: NodeTaskEvent): void {
    if (event.type === 'task-started' || event.type === 'task-refused' || stopping != null) return
    if (stats.pending >= maxPending) {
      stats.dropped++
      return
    }
    stats.pending++
    writes = writes
      .then(async () => { await append(event) })
      .catch(() => { stats.failed++ })
      .finally(() => { stats.pending-- })
  }

  async function tail (options: TailOptions = {}): Promise<AuditEntry[]> {
    const limit = positiveInt(options.limit, 100, AUDIT_LIMITS.maxEntries, 'limit')
    if (node == null) throw new Error('The audit layer is not started')
    const last = Math.min(head.seq, options.before != null ? options.before - 1 : head.seq)
    const first = Math.max(1, last - limit + 1, head.seq - retain + 1)
    const out: AuditEntry[] = []
    for (let seq = first; seq <= last; seq++) {
      const bytes = await node.datastore.get(entryKey(seq), { signal: options.signal })
      out.push(dagCbor.decode<AuditEntry>(bytes))
    }
    return out
  }

  /** `tail` over the wire: readers only, bounded in entries and bytes */
  async function serveTail (payload: unknown, ctx: RequestContext): Promise<{ entries: AuditEntry[], head: number }> {
    if (!readers.has(ctx.peer.toString())) throw new AuditForbiddenError(`Peer ${ctx.peer.toString()} may not read the audit log`)
    const request = TailRequestSchema.safeParse(payload)
    if (!request.success) throw new InvalidArgumentError(`Invalid tail request: ${request.error.issues[0].message}`)
    const { limit, before } = request.data
    const entries = await tail({ limit: Math.min(limit, maxEntries), before, signal: ctx.signal })
    // keep the newest entries that fit; 32 bytes cover the response map around them
    let size = 32
    let keep = entries.length
    while (keep > 0) {
      const bytes = dagCbor.encode(entries[keep - 1]).length
      if (size + bytes > maxResponseBytes) break
      size += bytes
      keep--
    }
    return { entries: entries.slice(keep), head: head.seq }
  }

  return {
    name: init.name ?? 'audit',
    async start (n: IoaNode): Promise<void> {
      if (node != null) throw new Error('The audit layer is already started')
      node = n
      readers.add(n.transport.peerId.toString())
      if (await n.datastore.has(headKey)) {
        const stored = dagCbor.decode<AuditHead>(await n.datastore.get(headKey))
        if (!Number.isSafeInteger(stored?.seq) || !Hex32.safeParse(stored?.hash).success) throw new Error(`Corrupt audit head at ${headKey.toString()}`)
        head = { seq: stored.seq, hash: stored.hash }
      }
      off = n.events.onTask(onTask)
      await n.transport.services.messaging.handle(AUDIT_PROTOCOL, 'tail', serveTail).catch((err: unknown) => {
        off?.()
        throw err
      })
    },
    async stop (): Promise<void> {
      stopping ??= (async () => {
        off?.()
        await node?.transport.services.messaging.unhandle(AUDIT_PROTOCOL, 'tail').catch(() => {})
        await writes
      })()
      await stopping
    },
    head: () => ({ ...head }),
    tail,
    flush: async () => { await writes },
    stats: () => ({ ...stats })
  }
}
// #endregion

// ---------------------------------------------------------------------------
// the client

export interface FetchAuditOptions {
  /** @default 100 */
  limit?: number
  /** Only entries with a smaller seq (paging backwards) */
  before?: number
  /** ms @default the node's messaging requestTimeout */
  timeout?: number
  signal?: AbortSignal
}

export interface AuditPage {
  /** Verified entries, oldest first */
  entries: AuditEntry[]
  /** seq of the newest entry of the remote log */
  head: number
}

function toTarget (peer: MessageTarget | string): MessageTarget {
  if (typeof peer !== 'string') return peer
  return peer.startsWith('/') ? multiaddr(peer) : peerIdFromString(peer)
}

// #region client
/**
 * Read the newest entries of a peer's audit log (`before` pages backwards)
 * and verify their hash chain. Throws `AuditForbiddenError` when the peer
 * does not list this node as a reader, `AuditChainError` when the chain is
 * broken, `InvalidAuditResponseError` for anything else out of spec.
 */
export async function fetchAudit (node: IoaNode, peer: MessageTarget | string, options: FetchAuditOptions = {}): Promise<AuditPage> {
  const limit = positiveInt(options.limit, 100, AUDIT_LIMITS.maxEntries, 'limit')
  const request = options.before != null ? { limit, before: options.before } : { limit }
  let response: unknown
  try {
    response = await node.transport.services.messaging.request(toTarget(peer), AUDIT_PROTOCOL, 'tail', request, {
      timeout: options.timeout,
      signal: options.signal
    })
  } catch (err) {
    throw family.fromRemote(err)
  }
  const page = TailResponseSchema.safeParse(response)
  if (!page.success) throw new InvalidAuditResponseError('The response is not a tail answer')
  if (page.data.entries.length > limit) throw new InvalidAuditResponseError(`${page.data.entries.length} entries for a limit of ${limit}`)
  const entries: AuditEntry[] = []
  for (const value of page.data.entries) {
    const entry = toEntry(value)
    if (entry == null) throw new InvalidAuditResponseError('The response holds a malformed entry')
    if (entry.seq > page.data.head || (options.before != null && entry.seq >= options.before)) {
      throw new InvalidAuditResponseError(`Entry ${entry.seq} is outside the requested range`)
    }
    entries.push(entry)
  }
  await verifyAuditChain(entries)
  return { entries, head: page.data.head }
}
// #endregion
