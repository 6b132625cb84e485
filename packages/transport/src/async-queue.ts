/**
 * A FIFO with one reader: producers `push`, the reader iterates until the
 * queue is closed and drained. Used wherever results arrive from concurrent
 * work (lookups, orchestration events) and stream out as they come.
 */
export class AsyncQueue<T> implements AsyncIterable<T> {
  private readonly items: T[] = []
  private wake?: () => void
  private closed = false

  /** Add an item (ignored once the queue is closed) */
  push (item: T): void {
    if (this.closed) return
    this.items.push(item)
    this.wake?.()
  }

  /** No more items will come; the reader ends after draining */
  close (): void {
    this.closed = true
    this.wake?.()
  }

  async * [Symbol.asyncIterator] (): AsyncGenerator<T> {
    while (true) {
      if (this.items.length > 0) {
        yield this.items.shift() as T
        continue
      }
      if (this.closed) return
      await new Promise<void>(resolve => { this.wake = resolve })
      this.wake = undefined
    }
  }
}
