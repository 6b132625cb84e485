/**
 * One task event stream read by several callers: concurrent `submit`s of a
 * requester with one idempotency key follow the same task over one stream
 * (spec/collab-tasks.md section 8) instead of one stream each, which the
 * executor's per-task stream limit would refuse past `maxSubscribers`.
 */
import { pushable } from 'it-pushable'
import type { Pushable } from 'it-pushable'

type Item<E> = { value: E } | { error: unknown }

/** Events queued for one reader before it is treated as lagging (it then gets the newest snapshot when it catches up) */
const MAX_BACKLOG = 64

interface Reader<E> {
  queue: Pushable<Item<E>>
  /** items pushed and not yet read */
  backlog: number
  /** events were skipped: deliver the newest snapshot once the backlog is read */
  lagging: boolean
}

/**
 * A source iterated once, fanned out to readers. A reader that joins late
 * starts from the newest event `isSnapshot` accepted (a status event carries
 * the whole task), then gets every later event. The source stops when its
 * last reader leaves; `onEnd` runs once when the source is done.
 */
export class SharedStream<E> {
  private readonly readers = new Set<Reader<E>>()
  private readonly controller = new AbortController()
  private latest?: E
  private done = false
  private started = false

  constructor (
    private readonly open: (signal: AbortSignal) => AsyncIterable<E>,
    private readonly isSnapshot: (event: E) => boolean,
    private readonly onEnd: () => void
  ) {}

  private end (final: Item<E> | undefined): void {
    if (this.done) return
    this.done = true
    this.onEnd()
    for (const r of this.readers) {
      if (r.lagging && this.latest != null) r.queue.push({ value: this.latest })
      if (final != null) r.queue.push(final)
      r.queue.end()
    }
  }

  private pump (): void {
    this.started = true
    void (async () => {
      try {
        for await (const value of this.open(this.controller.signal)) {
          if (this.isSnapshot(value)) this.latest = value
          for (const r of this.readers) this.deliver(r, value)
        }
        this.end(undefined)
      } catch (error) {
        this.end({ error })
      }
    })()
  }

  private deliver (r: Reader<E>, value: E): void {
    if (r.backlog >= MAX_BACKLOG) {
      r.lagging = true
      return
    }
    r.backlog++
    r.queue.push({ value })
    // a snapshot is newer than anything skipped before it
    if (this.isSnapshot(value)) r.lagging = false
  }

  /** Read the stream (from its newest snapshot on); `signal` ends this reader only */
  async * join (signal?: AbortSignal): AsyncGenerator<E, void, undefined> {
    signal?.throwIfAborted()
    const queue = pushable<Item<E>>({ objectMode: true })
    const reader: Reader<E> = { queue, backlog: 0, lagging: false }
    if (this.latest != null) this.deliver(reader, this.latest)
    this.readers.add(reader)
    const onAbort = (): void => { queue.push({ error: signal?.reason }); queue.end() }
    signal?.addEventListener('abort', onAbort, { once: true })
    if (!this.started) this.pump()
    try {
      for await (const item of queue) {
        if ('error' in item) throw item.error
        reader.backlog = Math.max(0, reader.backlog - 1)
        yield item.value
        if (reader.lagging && reader.backlog === 0 && this.latest != null && !this.done) {
          reader.lagging = false
          this.deliver(reader, this.latest)
        }
      }
    } finally {
      signal?.removeEventListener('abort', onAbort)
      this.readers.delete(reader)
      if (this.readers.size === 0 && !this.done) {
        // nobody listens any more: stop listening (the task itself goes on)
        this.controller.abort(new Error('No reader left'))
        this.end(undefined)
      }
    }
  }
}
