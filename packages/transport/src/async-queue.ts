/**
 * A FIFO with one reader: producers `push`, the reader iterates until the
 * queue is closed and drained. Kept (deprecated) as a thin wrapper over
 * `it-pushable` for the upper layers, which switch to `pushable({ objectMode: true })`
 * in their own step.
 */
import { pushable } from 'it-pushable'
import type { Pushable } from 'it-pushable'

/**
 * @deprecated use `pushable<T>({ objectMode: true })` from `it-pushable`:
 * `push` is the same, `close()` is `end()`
 */
export class AsyncQueue<T> implements AsyncIterable<T> {
  private readonly source: Pushable<T> = pushable<T>({ objectMode: true })

  /** Add an item (ignored once the queue is closed) */
  push (item: T): void {
    this.source.push(item)
  }

  /** No more items will come; the reader ends after draining */
  close (): void {
    this.source.end()
  }

  [Symbol.asyncIterator] (): AsyncGenerator<T> {
    return this.source
  }
}
