/**
 * One task event stream read by several callers: concurrent `submit`s of a
 * requester with one idempotency key follow the same task over one stream
 * (spec/collab-tasks.md section 8) instead of one stream each, which the
 * executor's per-task stream limit would refuse past `maxSubscribers`.
 */
import { AsyncQueue } from '@ioa/transport'

type Item<E> = { value: E } | { error: unknown }

/**
 * A source iterated once, fanned out to readers. A reader that joins late
 * starts from the newest event `isSnapshot` accepted (a status event carries
 * the whole task), then gets every later event. The source stops when its
 * last reader leaves; `onEnd` runs once when the source is done.
 */
export class SharedStream<E> {
  private readonly readers = new Set<AsyncQueue<Item<E>>>()
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
      if (final != null) r.push(final)
      r.close()
    }
  }

  private pump (): void {
    this.started = true
    void (async () => {
      try {
        for await (const value of this.open(this.controller.signal)) {
          if (this.isSnapshot(value)) this.latest = value
          for (const r of this.readers) r.push({ value })
        }
        this.end(undefined)
      } catch (error) {
        this.end({ error })
      }
    })()
  }

  /** Read the stream (from its newest snapshot on); `signal` ends this reader only */
  async * join (signal?: AbortSignal): AsyncGenerator<E, void, undefined> {
    signal?.throwIfAborted()
    const queue = new AsyncQueue<Item<E>>()
    if (this.latest != null) queue.push({ value: this.latest })
    this.readers.add(queue)
    const onAbort = (): void => { queue.push({ error: signal?.reason }); queue.close() }
    signal?.addEventListener('abort', onAbort, { once: true })
    if (!this.started) this.pump()
    try {
      for await (const item of queue) {
        if ('error' in item) throw item.error
        yield item.value
      }
    } finally {
      signal?.removeEventListener('abort', onAbort)
      this.readers.delete(queue)
      if (this.readers.size === 0 && !this.done) {
        // nobody listens any more: stop listening (the task itself goes on)
        this.controller.abort(new Error('No reader left'))
        this.end(undefined)
      }
    }
  }
}
