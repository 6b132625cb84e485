/**
 * DHT announcements of capabilities and agent ids, reference-counted.
 *
 * Announcing walks the DHT, so a node hosting thousands of agents announces
 * through a small pool of workers (an `@libp2p/utils` `Queue`); a failed
 * announcement (for example while the routing table is still empty) is
 * retried with backoff (`p-retry`: 250 ms doubling up to 10 s, 20 retries),
 * outside the pool, so waiting retries do not hold workers.
 */
import { Queue } from '@libp2p/utils'
import pRetry from 'p-retry'
import { raceSignal } from 'race-signal'
import type { InterconnectComponents } from './components.js'
import type { AbortOptions, Logger } from '@libp2p/interface'
import type { CID } from 'multiformats/cid'

/** Timeout of one DHT provide walk, in ms */
const PROVIDE_TIMEOUT = 30_000

/** Retries of a failed announcement */
const RETRIES = 20

export class Announcer {
  private readonly components: Pick<InterconnectComponents, 'contentRouting' | 'reprovider'>
  private readonly log: Logger
  private readonly provided = new Map<string, { cid: CID, refs: number }>()
  private readonly queue: Queue<void>
  /** Announcements not yet done (queued, running or waiting to retry) */
  private readonly pending = new Set<Promise<void>>()
  private shutdown = new AbortController()

  constructor (components: Pick<InterconnectComponents, 'contentRouting' | 'reprovider'>, log: Logger, concurrency: number) {
    this.components = components
    this.log = log
    this.queue = new Queue({ concurrency })
  }

  start (): void {
    if (this.shutdown.signal.aborted) this.shutdown = new AbortController()
  }

  /** Drop queued announcements and retries (what is provided stays counted) */
  stop (): void {
    this.shutdown.abort()
    this.queue.abort()
  }

  /** Announce `cid` under `key`, or count one more reference to it */
  provide (key: string, cid: CID): void {
    const entry = this.provided.get(key)
    if (entry != null) {
      entry.refs++
      return
    }
    this.provided.set(key, { cid, refs: 1 })
    const job = this.announce(key, cid).finally(() => this.pending.delete(job))
    this.pending.add(job)
  }

  /** Drop one reference to `key`; the last one stops re-providing it */
  async unprovide (key: string): Promise<void> {
    const entry = this.provided.get(key)
    if (entry == null) return
    entry.refs--
    if (entry.refs > 0) return
    this.provided.delete(key)
    try {
      await this.components.reprovider.cancelReprovide(entry.cid)
    } catch (err: any) {
      // nothing to cancel (never provided, or already expired)
      this.log.trace('nothing to cancel for %s: %s', key, err?.message ?? err)
    }
  }

  /** Resolve once no announcement is queued, running or waiting to retry */
  async announced (options: AbortOptions = {}): Promise<void> {
    while (this.pending.size > 0) {
      options.signal?.throwIfAborted()
      await raceSignal(Promise.all([...this.pending]), options.signal)
    }
  }

  private wanted (key: string, cid: CID): boolean {
    return !this.shutdown.signal.aborted && this.provided.get(key)?.cid === cid
  }

  /** Never rejects: a failure is logged */
  private async announce (key: string, cid: CID): Promise<void> {
    const signal = this.shutdown.signal
    try {
      await pRetry(async () => {
        // withdrawn (or the service stopped) while it waited
        if (!this.wanted(key, cid)) return
        await this.queue.add(async () => {
          // withdrawn while it was queued
          if (!this.wanted(key, cid)) return
          await this.components.contentRouting.provide(cid, { signal: AbortSignal.timeout(PROVIDE_TIMEOUT) })
        }, { signal })
      }, {
        retries: RETRIES,
        factor: 2,
        minTimeout: 250,
        maxTimeout: 10_000,
        randomize: false,
        signal,
        shouldRetry: () => this.wanted(key, cid),
        onFailedAttempt: ({ error, attemptNumber, retriesLeft, retryDelay }) => {
          this.log('announcing %s failed (attempt %d, %d retries left, next in %d ms): %s', key, attemptNumber, retriesLeft, retryDelay, error.message)
        }
      })
      if (this.log.enabled && this.wanted(key, cid)) this.log('announced %s', key)
    } catch (err: any) {
      if (signal.aborted) {
        // stopped: queued announcements and retries are dropped on purpose
        this.log.trace('announcement of %s dropped: stopped', key)
        return
      }
      this.log.error('gave up announcing %s: %s', key, err?.message ?? err)
    }
  }
}
