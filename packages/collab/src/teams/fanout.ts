/**
 * Events to any number of `for await` readers: each reader has its own
 * queue, bounded (a reader that falls `maxBuffered` events behind is ended
 * with `EventsOverflowError`, so a forgotten iterator cannot grow memory).
 */
import { pushable } from 'it-pushable'
import { EventsOverflowError } from './errors.js'
import type { AbortOptions } from '@libp2p/interface'
import type { Pushable } from 'it-pushable'

export class EventFanout<T> {
  private readonly readers = new Set<Pushable<T>>()
  private readonly maxBuffered: number

  constructor (maxBuffered: number) {
    this.maxBuffered = maxBuffered
  }

  emit (event: T): void {
    for (const r of this.readers) {
      if (r.readableLength >= this.maxBuffered) {
        r.end(new EventsOverflowError(`An events() reader fell ${this.maxBuffered} events behind`))
        this.readers.delete(r)
        continue
      }
      r.push(event)
    }
  }

  /** End every reader */
  close (): void {
    for (const r of this.readers) r.end()
    this.readers.clear()
  }

  /** The events from now on, after `first`, until `close()` or the signal aborts */
  async * listen (options: AbortOptions = {}, first: Iterable<T> = []): AsyncGenerator<T, void, undefined> {
    const queue = pushable<T>({ objectMode: true })
    for (const e of first) queue.push(e)
    this.readers.add(queue)
    const onAbort = (): void => { queue.end() }
    options.signal?.addEventListener('abort', onAbort, { once: true })
    try {
      yield * queue
    } finally {
      options.signal?.removeEventListener('abort', onAbort)
      this.readers.delete(queue)
    }
  }
}
