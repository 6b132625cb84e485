/**
 * Frames written to one stream in the same event-loop turn leave as one
 * write: one Yamux data frame and one Noise message instead of one of each
 * per frame (`spec/transport.md` section 4, "coalescing"). The bytes wait
 * at most until the end of the turn (`turn-end.ts`) and at most `limit` bytes wait at once: a frame that
 * would take the batch over the limit sends what is queued first, and a
 * frame of at least `limit` bytes leaves on its own, at once. The order of
 * frames is kept.
 */

import { flushAtTurnEnd } from './turn-end.js'

/** Where a batch goes: one `Stream.send` (its return value is ignored here) */
export type FlushTarget = (data: Uint8Array) => void

/**
 * Largest batch by default: one Noise message carries at most 65,519
 * plaintext bytes (65,535 with its 16-byte tag), and a Yamux data frame's
 * header takes 12 of them
 */
export const DEFAULT_COALESCE_BYTES = 65_507

export class WriteCoalescer {
  private readonly limit: number
  private readonly target: FlushTarget
  private chunks: Uint8Array[] = []
  private bytes = 0
  private scheduled = false
  private readonly flushLater = (): void => {
    this.scheduled = false
    this.flush()
  }

  /** `limit` 1 sends every frame on its own, at once (no coalescing) */
  constructor (limit: number, target: FlushTarget) {
    this.limit = limit
    this.target = target
  }

  /** Bytes queued and not yet sent */
  get queued (): number {
    return this.bytes
  }

  /** Queue one encoded frame; it is sent by the end of this turn */
  add (frame: Uint8Array): void {
    if (this.bytes > 0 && this.bytes + frame.byteLength > this.limit) {
      this.flush()
    }
    this.chunks.push(frame)
    this.bytes += frame.byteLength
    if (this.bytes >= this.limit) {
      this.flush()
      return
    }
    if (!this.scheduled) {
      this.scheduled = true
      flushAtTurnEnd(this.flushLater)
    }
  }

  /** Send what is queued now, as one write (may throw what the target throws) */
  flush (): void {
    if (this.bytes === 0) {
      return
    }
    const chunks = this.chunks
    const size = this.bytes
    this.chunks = []
    this.bytes = 0
    if (chunks.length === 1) {
      this.target(chunks[0])
      return
    }
    const data = new Uint8Array(size)
    let at = 0
    for (const chunk of chunks) {
      data.set(chunk, at)
      at += chunk.byteLength
    }
    this.target(data)
  }

  /** Drop what is queued (the stream is gone) */
  clear (): void {
    this.chunks = []
    this.bytes = 0
  }
}
