/**
 * The index query (`/ioa/caps-index/1.0.0` `who`, spec `interconnect.md`
 * 12.6): a newcomer's gossip index is empty until the hellos are answered
 * (0-1 s); its first lookup asks its connected peers of the topic (its
 * bootstrap peers) for their index entries of one capability instead, in
 * one round trip on a connection it already has. Each entry is the
 * announcer's own signed snapshot, checked by the asker as a gossip
 * receiver checks it; an answer with one entry that fails is refused whole.
 *
 * The server answers from its index, at most `queryMaxEntries` entries and
 * `queryMaxBytes` bytes, and at most `queriesPerMinute` queries per asking peer.
 */
import { TokenBuckets } from '@ioa/transport/internal'
import { assertCapability, capabilityPrefixes } from '../capability.js'
import { BadRequestError, RateLimitedError, SnapshotTooLargeError, UnrequestedSnapshotError, fromRemote } from '../errors.js'
import { CAPS_INDEX_PROTOCOL } from '../protocols.js'
import { parseEntry, verifyEntry } from './signed-entry.js'
import { decodeSnapshot } from './snapshot.js'
import type { CapabilityIndex } from './cap-index.js'
import type { GossipDefaults } from './options.js'
import type { SignedEntry } from './signed-entry.js'
import type { CapabilitySnapshot } from './snapshot.js'
import type { InterconnectComponents } from '../components.js'
import type { RequestContext } from '@ioa/transport'
import type { AbortOptions, Logger, PeerId } from '@libp2p/interface'

/** A verified answer: the announcers' snapshots, and whether the answering peer announces the capability itself */
export interface IndexAnswer {
  entries: Array<{ peer: PeerId, snapshot: CapabilitySnapshot, entry: SignedEntry }>
  self: boolean
}

export interface IndexQueryInit {
  messaging: Pick<InterconnectComponents['messaging'], 'handle' | 'unhandle' | 'request'>
  index: CapabilityIndex
  topic: string
  opts: GossipDefaults
  log: Logger
  /** The capabilities this node announces now */
  caps(): string[]
  /** Time a query may take, in ms */
  timeout: number
}

/** Does a snapshot list `capability` or a name below it? */
function announces (caps: string[], capability: string): boolean {
  return caps.some(c => capabilityPrefixes(c).includes(capability))
}

export class IndexQuery {
  private readonly init: IndexQueryInit
  private readonly budgets: TokenBuckets
  /** Queries answered, and answers this node refused */
  served = 0
  refused = 0

  constructor (init: IndexQueryInit) {
    this.init = init
    this.budgets = new TokenBuckets(init.opts.queriesPerMinute, 60_000, init.opts.maxAnnouncers)
  }

  async start (): Promise<void> {
    await this.init.messaging.handle(CAPS_INDEX_PROTOCOL, 'who', async (payload, ctx) => this.answer(payload, ctx))
  }

  async stop (): Promise<void> {
    await this.init.messaging.unhandle(CAPS_INDEX_PROTOCOL)
  }

  // ---- server -------------------------------------------------------------

  private answer (payload: unknown, ctx: RequestContext): { entries: SignedEntry[], self?: true } {
    const asker = ctx.peer.toString()
    const { opts, log } = this.init
    if (!this.budgets.take(asker)) {
      log('refused an index query of %s: more than %d a minute', asker, opts.queriesPerMinute)
      throw new RateLimitedError(`More than ${opts.queriesPerMinute} index queries a minute`)
    }
    let cap: string
    let limit: number
    try {
      ({ cap, limit } = parseQuery(payload, opts.queryMaxEntries))
    } catch (err: any) {
      log('refused an index query of %s: %s', asker, err?.message ?? err)
      throw err
    }
    const entries: SignedEntry[] = []
    let bytes = 0
    for (const { peer, entry } of this.init.index.signed(cap)) {
      // the asker knows its own snapshot
      if (peer === asker) continue
      if (entries.length >= limit || bytes + entry.data.byteLength > opts.queryMaxBytes) break
      bytes += entry.data.byteLength
      entries.push(entry)
    }
    const self = announces(this.init.caps(), cap)
    this.served++
    log.trace('index query of %s for %s: %d entries, %d bytes%s', asker, cap, entries.length, bytes, self ? ', and this node' : '')
    return { entries, ...(self ? { self: true as const } : {}) }
  }

  // ---- client -------------------------------------------------------------

  /**
   * Ask `peer` for its index entries of `capability`, verify them; throws a
   * typed error for an answer that is malformed, too large, or holds an entry
   * that is badly signed, of another topic or capability, or expired
   */
  async ask (peer: PeerId, capability: string, options: AbortOptions = {}): Promise<IndexAnswer> {
    assertCapability(capability)
    const { opts, log } = this.init
    const raw = await this.init.messaging.request<unknown>(peer, CAPS_INDEX_PROTOCOL, 'who', { cap: capability, limit: opts.queryMaxEntries }, {
      signal: options.signal,
      timeout: this.init.timeout
    }).catch((err: unknown) => { throw fromRemote(err) })
    try {
      return await this.check(capability, raw)
    } catch (err: any) {
      this.refused++
      log('refused the index answer of %p for %s (%s): %s', peer, capability, err?.code, err?.message ?? err)
      throw err
    }
  }

  private async check (capability: string, raw: unknown): Promise<IndexAnswer> {
    const { opts, topic } = this.init
    if (raw == null || typeof raw !== 'object' || Array.isArray(raw)) throw new BadRequestError('an index answer must be a map')
    const { entries, self } = raw as Record<string, unknown>
    if (!Array.isArray(entries)) throw new BadRequestError('an index answer needs entries')
    if (self !== undefined && self !== true) throw new BadRequestError('self must be true when present')
    if (entries.length > opts.queryMaxEntries) throw new SnapshotTooLargeError(`an index answer of ${entries.length} entries exceeds ${opts.queryMaxEntries}`)
    const parsed = entries.map(e => parseEntry(e))
    const bytes = parsed.reduce((n, e) => n + e.data.byteLength, 0)
    if (bytes > opts.queryMaxBytes) throw new SnapshotTooLargeError(`an index answer of ${bytes} bytes of snapshots exceeds ${opts.queryMaxBytes}`)
    const now = Date.now()
    const out: IndexAnswer['entries'] = []
    const seen = new Set<string>()
    for (const entry of parsed) {
      // the size bound first: nothing larger is parsed or verified
      const snapshot = decodeSnapshot(entry.data, { maxBytes: opts.maxMessageBytes, maxCapabilities: opts.maxCapabilities })
      if (!announces(snapshot.caps, capability)) throw new UnrequestedSnapshotError(`an entry does not announce ${capability}`)
      if (snapshot.seq + Math.min(snapshot.ttl, opts.maxTtl) + opts.clockSkew < now) throw new UnrequestedSnapshotError(`an entry expired (seq ${snapshot.seq}, ttl ${snapshot.ttl})`)
      const peer = await verifyEntry(entry, topic)
      const id = peer.toString()
      if (seen.has(id)) throw new BadRequestError(`an index answer lists ${id} twice`)
      seen.add(id)
      out.push({ peer, snapshot, entry })
    }
    return { entries: out, self: self === true }
  }
}

/** Check the payload of a `who` query */
export function parseQuery (payload: unknown, maxEntries: number): { cap: string, limit: number } {
  if (payload == null || typeof payload !== 'object' || Array.isArray(payload)) throw new BadRequestError('who needs { cap, limit? }')
  const { cap, limit, ...rest } = payload as Record<string, unknown>
  if (Object.keys(rest).length > 0) throw new BadRequestError(`Unknown fields: ${Object.keys(rest).join(', ')}`)
  try { assertCapability(cap) } catch { throw new BadRequestError('who.cap is not a capability name') }
  if (limit !== undefined && (typeof limit !== 'number' || !Number.isInteger(limit) || limit < 1)) throw new BadRequestError('who.limit must be a positive integer')
  return { cap: cap as string, limit: Math.min(limit ?? maxEntries, maxEntries) }
}
