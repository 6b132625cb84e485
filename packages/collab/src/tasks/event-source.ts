/**
 * What the requester's lease watch reads a task's events from: one flat
 * reader per stream instead of async generators stacked on the messaging
 * stream (the 2.0.0 decoding, the fallback of a refused session-mode
 * request), each of which cost a few promises per event and per layer.
 */
import { V2EventDecoder } from './delta-stream.js'

/** A task's event stream as the lease watch reads it (an async generator is one) */
export interface EventSource {
  next(): Promise<IteratorResult<unknown>>
  return(value?: undefined): Promise<IteratorResult<unknown>>
}

/** A messaging stream opened, with its first result (which tells whether the peer serves the protocol) */
export interface OpenedStream {
  stream: AsyncGenerator<unknown>
  first: IteratorResult<unknown>
  /** On /ioa/task/2.0.0: deltas are rebuilt into full events */
  v2: boolean
}

const DONE: IteratorResult<unknown> = { done: true, value: undefined }

/**
 * A remote executor's task stream, opened at the first `next()` (`open`),
 * its 2.0.0 items rebuilt into full events (`V2EventDecoder`)
 */
export class RemoteEvents implements EventSource {
  private opening: (() => Promise<OpenedStream>) | undefined
  private stream: AsyncGenerator<unknown> | undefined
  private first: IteratorResult<unknown> | undefined
  private decoder: V2EventDecoder | undefined
  /** events an item stood for beyond its first, not yet read */
  private readonly queued: unknown[] = []
  private readonly announceArtifacts: boolean

  constructor (open: () => Promise<OpenedStream>, announceArtifacts: boolean) {
    this.opening = open
    this.announceArtifacts = announceArtifacts
  }

  async next (): Promise<IteratorResult<unknown>> {
    if (this.queued.length > 0) return { done: false, value: this.queued.shift() }
    if (this.opening != null) {
      const open = this.opening
      this.opening = undefined
      const opened = await open()
      this.stream = opened.stream
      this.first = opened.first
      if (opened.v2) this.decoder = new V2EventDecoder(this.announceArtifacts)
    }
    const stream = this.stream
    if (stream == null) return DONE
    while (true) {
      let step = this.first
      if (step != null) this.first = undefined
      else step = await stream.next()
      if (step.done === true) return DONE
      if (this.decoder == null) return step
      let events: unknown[]
      try {
        events = this.decoder.decode(step.value)
      } catch (err) {
        await stream.return(undefined)
        throw err
      }
      if (events.length === 0) continue
      for (let i = 1; i < events.length; i++) this.queued.push(events[i])
      return { done: false, value: events[0] }
    }
  }

  async return (): Promise<IteratorResult<unknown>> {
    this.opening = undefined
    this.queued.length = 0
    await this.stream?.return(undefined)
    return DONE
  }
}

/**
 * `source`, and when it fails before its first result, the stream
 * `fallback` makes for that error (undefined: the error stands), read in its
 * place; used to send a refused session-mode request again, once
 */
export class FallbackEvents implements EventSource {
  private source: EventSource
  private readonly fallback: (err: unknown) => Promise<EventSource | undefined>
  private settled = false

  constructor (source: EventSource, fallback: (err: unknown) => Promise<EventSource | undefined>) {
    this.source = source
    this.fallback = fallback
  }

  async next (): Promise<IteratorResult<unknown>> {
    if (this.settled) return await this.source.next()
    let step: IteratorResult<unknown>
    try {
      step = await this.source.next()
    } catch (err) {
      this.settled = true
      const next = await this.fallback(err)
      if (next == null) throw err
      this.source = next
      return await next.next()
    }
    this.settled = true
    return step
  }

  async return (): Promise<IteratorResult<unknown>> {
    return await this.source.return(undefined)
  }
}
