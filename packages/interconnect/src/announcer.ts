/**
 * DHT announcements of capabilities and agent ids, reference-counted.
 *
 * Announcing walks the DHT, so a node hosting thousands of agents announces
 * through a small pool of workers (an `@libp2p/utils` `Queue`). Announcements
 * waiting for a worker are kept as plain `key -> CID` records and handed to
 * the queue only when a worker is free: a queued job (with its promise chain
 * and abort listener) costs about 5 KB, a waiting record a few bytes, and a
 * node may host thousands of agents. A failed announcement (for example
 * while the routing table is still empty) is tried again after a backoff
 * (250 ms doubling up to 10 s, 20 retries), outside the pool, so waiting
 * retries hold no worker.
 */
import { Queue } from '@libp2p/utils'
import pDefer from 'p-defer'
import { raceSignal } from 'race-signal'
import type { InterconnectComponents } from './components.js'
import type { AbortOptions, Logger } from '@libp2p/interface'
import type { CID } from 'multiformats/cid'
import type { DeferredPromise } from 'p-defer'

/** Timeout of one DHT provide walk, in ms */
const PROVIDE_TIMEOUT = 30_000

/** Retries of a failed announcement */
const RETRIES = 20

/** Backoff of the retries: the first wait, doubling up to the last */
const MIN_BACKOFF = 250
const MAX_BACKOFF = 10_000

export class Announcer {
  private readonly components: Pick<InterconnectComponents, 'contentRouting' | 'reprovider'>
  private readonly log: Logger
  private readonly provided = new Map<string, { cid: CID, refs: number }>()
  private readonly queue: Queue<void>
  private readonly concurrency: number
  /** Announcements waiting for a worker, oldest first */
  private readonly waiting = new Map<string, CID>()
  /** Failed attempts so far, of the announcements not done yet */
  private readonly attempts = new Map<string, number>()
  /** Retries waiting for their backoff */
  private readonly retries = new Map<string, ReturnType<typeof setTimeout>>()
  /** Announcements not done (waiting, running or waiting to retry) */
  private readonly pending = new Set<string>()
  private idle?: DeferredPromise<void>
  private stopped = false

  constructor (components: Pick<InterconnectComponents, 'contentRouting' | 'reprovider'>, log: Logger, concurrency: number) {
    this.components = components
    this.log = log
    this.concurrency = concurrency
    this.queue = new Queue({ concurrency })
  }

  start (): void {
    this.stopped = false
  }

  /** Drop waiting announcements and retries (what is provided stays counted) */
  stop (): void {
    this.stopped = true
    this.queue.abort()
    for (const t of this.retries.values()) clearTimeout(t)
    if (this.waiting.size + this.retries.size > 0) this.log.trace('%d announcements dropped: stopped', this.waiting.size + this.retries.size)
    this.waiting.clear()
    this.retries.clear()
    this.attempts.clear()
    this.pending.clear()
    this.settle()
  }

  /** Announce `cid` under `key`, or count one more reference to it */
  provide (key: string, cid: CID): void {
    const entry = this.provided.get(key)
    if (entry != null) {
      entry.refs++
      return
    }
    this.provided.set(key, { cid, refs: 1 })
    this.pending.add(key)
    this.waiting.set(key, cid)
    this.pump()
  }

  /** Drop one reference to `key`; the last one stops re-providing it */
  async unprovide (key: string): Promise<void> {
    const entry = this.provided.get(key)
    if (entry == null) return
    entry.refs--
    if (entry.refs > 0) return
    this.provided.delete(key)
    // not announced yet: it is not wanted any more
    if (this.waiting.delete(key) || this.retries.has(key)) {
      clearTimeout(this.retries.get(key))
      this.retries.delete(key)
      this.done(key)
    }
    try {
      await this.components.reprovider.cancelReprovide(entry.cid)
    } catch (err: any) {
      // nothing to cancel (never provided, or already expired)
      this.log.trace('nothing to cancel for %s: %s', key, err?.message ?? err)
    }
  }

  /** Resolve once no announcement is waiting, running or waiting to retry */
  async announced (options: AbortOptions = {}): Promise<void> {
    while (this.pending.size > 0) {
      options.signal?.throwIfAborted()
      this.idle ??= pDefer()
      await raceSignal(this.idle.promise, options.signal)
    }
  }

  private wanted (key: string, cid: CID): boolean {
    return !this.stopped && this.provided.get(key)?.cid === cid
  }

  /** Hand waiting announcements to free workers */
  private pump (): void {
    while (!this.stopped && this.waiting.size > 0 && this.queue.size < this.concurrency) {
      const [key, cid] = this.waiting.entries().next().value as [string, CID]
      this.waiting.delete(key)
      this.queue.add(async () => { await this.attempt(key, cid) })
        .catch((err: Error) => {
          // the queue was aborted (stop): the announcement is dropped on purpose
          this.log.trace('announcement of %s dropped: %s', key, err.message)
        })
        .finally(() => { this.pump() })
    }
  }

  /** One provide walk; a failure schedules a retry. Never rejects */
  private async attempt (key: string, cid: CID): Promise<void> {
    if (!this.wanted(key, cid)) {
      this.done(key)
      return
    }
    try {
      await this.components.contentRouting.provide(cid, { signal: AbortSignal.timeout(PROVIDE_TIMEOUT) })
      if (this.log.enabled && this.wanted(key, cid)) this.log('announced %s', key)
      this.done(key)
    } catch (err: any) {
      const attempt = (this.attempts.get(key) ?? 0) + 1
      if (attempt > RETRIES || !this.wanted(key, cid)) {
        if (this.wanted(key, cid)) this.log.error('gave up announcing %s: %s', key, err?.message ?? err)
        this.done(key)
        return
      }
      this.attempts.set(key, attempt)
      const wait = Math.min(MAX_BACKOFF, MIN_BACKOFF * 2 ** (attempt - 1))
      this.log('announcing %s failed (attempt %d, %d retries left, next in %d ms): %s', key, attempt, RETRIES - attempt + 1, wait, err?.message ?? err)
      const timer = setTimeout(() => {
        this.retries.delete(key)
        if (!this.wanted(key, cid)) {
          this.done(key)
          return
        }
        this.waiting.set(key, cid)
        this.pump()
      }, wait)
      timer.unref?.()
      this.retries.set(key, timer)
    }
  }

  private done (key: string): void {
    // provided again (after a withdrawal) while this attempt ran: that one is still to come
    if (this.waiting.has(key) || this.retries.has(key)) return
    this.attempts.delete(key)
    this.pending.delete(key)
    this.settle()
  }

  private settle (): void {
    if (this.pending.size === 0 && this.idle != null) {
      const idle = this.idle
      this.idle = undefined
      idle.resolve()
    }
  }
}
