/**
 * Splitting a byte stream into length-prefixed frames (`spec/transport.md`
 * section 4), strictly: the prefix is an unsigned varint of at most 9 bytes
 * in shortest form. A prefix that cannot be read is reported as soon as its
 * bytes are in, never by waiting for more data.
 */
import { Uint8ArrayList } from 'uint8arraylist'
import { MalformedLengthError, PayloadTooLargeError } from './errors.js'

/** Longest length prefix, in bytes (multiformats unsigned-varint) */
export const MAX_PREFIX_BYTES = 9

/** What reading a length prefix found */
type Prefix = { kind: 'more' } | { kind: 'length', length: number, bytes: number }

const MORE: Prefix = { kind: 'more' }

/**
 * Read the length prefix at the start of `buf`. Throws `MalformedLengthError`
 * for a prefix of more than 9 bytes or one not in shortest form, and
 * `PayloadTooLargeError` for a length above `max`.
 */
export function readPrefix (buf: Uint8ArrayList, max: number): Prefix {
  let value = 0
  let scale = 1
  const available = Math.min(buf.byteLength, MAX_PREFIX_BYTES)
  for (let i = 0; i < available; i++) {
    const b = buf.get(i)
    value += (b & 0x7f) * scale
    if ((b & 0x80) === 0) {
      if (b === 0 && i > 0) {
        throw new MalformedLengthError(`Length prefix of ${i + 1} bytes is not in shortest form`)
      }
      if (value > max) {
        throw new PayloadTooLargeError(`Frame of ${value} bytes is larger than ${max} bytes`)
      }
      return { kind: 'length', length: value, bytes: i + 1 }
    }
    scale *= 128
  }
  if (available === MAX_PREFIX_BYTES) {
    throw new MalformedLengthError(`Length prefix longer than ${MAX_PREFIX_BYTES} bytes`)
  }
  return MORE
}

/**
 * Buffers the bytes of one stream and hands out complete frame bodies.
 * Between two chunks it holds at most one partial frame (its prefix and up to
 * `maxFrameSize` bytes of body); `buffered` says how many bytes that is.
 */
export class FrameReader {
  private readonly buffer = new Uint8ArrayList()
  private readonly maxFrameSize: number
  /** body length of the frame being read, once its prefix is known */
  private body = -1
  private prefixBytes = 0

  constructor (maxFrameSize: number) {
    this.maxFrameSize = maxFrameSize
  }

  /** Bytes held that do not form a complete frame yet */
  get buffered (): number {
    return this.buffer.byteLength
  }

  /** Add a chunk; it is read by the next calls to `next()` */
  push (chunk: Uint8Array | Uint8ArrayList): void {
    this.buffer.append(chunk)
  }

  /**
   * The next complete frame body, or `undefined` when more bytes are needed.
   * Empty frames (length 0) are skipped. Throws on a prefix that does not
   * decode or announces a frame above the limit.
   */
  next (): Uint8ArrayList | undefined {
    while (true) {
      if (this.body < 0) {
        const prefix = readPrefix(this.buffer, this.maxFrameSize)
        if (prefix.kind === 'more') {
          return undefined
        }
        this.body = prefix.length
        this.prefixBytes = prefix.bytes
      }
      const end = this.prefixBytes + this.body
      if (this.buffer.byteLength < end) {
        return undefined
      }
      const frame = this.buffer.sublist(this.prefixBytes, end)
      this.buffer.consume(end)
      this.body = -1
      if (frame.byteLength > 0) {
        return frame
      }
    }
  }

  /** Drop everything held */
  clear (): void {
    this.buffer.consume(this.buffer.byteLength)
    this.body = -1
  }
}
