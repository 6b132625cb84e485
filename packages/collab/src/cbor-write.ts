/**
 * A small writer of canonical DAG-CBOR for records whose layout is known
 * (an envelope payload, a submit request, a stored task): the caller writes map keys in
 * DAG-CBOR order (length first, then bytewise) and splices in bytes it
 * already has (a token, a result) instead of encoding them again. Heads are
 * in their shortest form (RFC 8949 4.2.1), text is UTF-8. Each user has a
 * test that compares its output with `dagCbor.encode`.
 */

const utf8 = new TextEncoder()

/** Bytes of the CBOR head of argument `n` (a non-negative safe integer) */
export function headLength (n: number): number {
  return n < 24 ? 1 : n <= 0xff ? 2 : n <= 0xffff ? 3 : n <= 0xffffffff ? 5 : 9
}

function writeUint32 (out: Uint8Array, at: number, n: number): void {
  out[at] = n >>> 24
  out[at + 1] = (n >>> 16) & 0xff
  out[at + 2] = (n >>> 8) & 0xff
  out[at + 3] = n & 0xff
}

/** Write the CBOR head of major type `major` with argument `n` at `at`; returns the offset after it */
export function writeHead (out: Uint8Array, at: number, major: number, n: number): number {
  const m = major << 5
  if (n < 24) {
    out[at] = m | n
    return at + 1
  }
  if (n <= 0xff) {
    out[at] = m | 24
    out[at + 1] = n
    return at + 2
  }
  if (n <= 0xffff) {
    out[at] = m | 25
    out[at + 1] = n >> 8
    out[at + 2] = n & 0xff
    return at + 3
  }
  if (n <= 0xffffffff) {
    out[at] = m | 26
    writeUint32(out, at + 1, n)
    return at + 5
  }
  out[at] = m | 27
  writeUint32(out, at + 1, Math.floor(n / 0x1_0000_0000))
  writeUint32(out, at + 5, n >>> 0)
  return at + 9
}

/** A text value ready to write: the string itself when it is ASCII (one byte a character), else its UTF-8 bytes */
export type Text = string | Uint8Array

export function textOf (s: string): Text {
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) > 0x7f) return utf8.encode(s)
  return s
}

/** Bytes of a text string, head included */
export function textLength (t: Text): number {
  return headLength(t.length) + t.length
}

/** Write a text string (head and bytes) at `at`; returns the offset after it */
export function writeText (out: Uint8Array, at: number, t: Text): number {
  at = writeHead(out, at, 3, t.length)
  if (typeof t === 'string') {
    for (let i = 0; i < t.length; i++) out[at + i] = t.charCodeAt(i)
  } else {
    out.set(t, at)
  }
  return at + t.length
}

/** Is `n` written as a CBOR unsigned integer by DAG-CBOR (a non-negative safe integer, not -0)? */
export function isUint (n: unknown): n is number {
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0 && !Object.is(n, -0)
}

/**
 * One encoding written front to back into a growing buffer: heads, text,
 * integers, and byte strings already encoded copied in as they are
 */
export class CborWriter {
  private buf: Uint8Array
  private at = 0

  constructor (size = 1024) {
    this.buf = new Uint8Array(size)
  }

  private room (n: number): void {
    if (this.at + n <= this.buf.length) return
    const next = new Uint8Array(Math.max(this.buf.length * 2, this.at + n))
    next.set(this.buf.subarray(0, this.at))
    this.buf = next
  }

  /** Bytes written so far */
  get length (): number {
    return this.at
  }

  get capacity (): number {
    return this.buf.length
  }

  reset (): this {
    this.at = 0
    return this
  }

  head (major: number, n: number): this {
    this.room(9)
    this.at = writeHead(this.buf, this.at, major, n)
    return this
  }

  text (s: string): this {
    const t = textOf(s)
    this.room(textLength(t))
    this.at = writeText(this.buf, this.at, t)
    return this
  }

  /** Bytes that are already DAG-CBOR data items */
  raw (bytes: Uint8Array): this {
    const n = bytes.length
    this.room(n)
    if (n <= 16) {
      // (a short copy is cheaper by hand than through set)
      for (let i = 0; i < n; i++) this.buf[this.at + i] = bytes[i]
    } else {
      this.buf.set(bytes, this.at)
    }
    this.at += n
    return this
  }

  /** A copy of what was written */
  bytes (): Uint8Array {
    return this.buf.slice(0, this.at)
  }
}

/** The writer `encodeWith` lends (undefined while lent: a nested call gets one of its own) */
let spare: CborWriter | undefined = new CborWriter(4096)

/** Largest buffer kept for the next encoding; a larger one made for a big value is dropped after it */
const MAX_SPARE = 1_048_576

/** The bytes `write` writes (synchronously) into a writer lent for the call */
export function encodeWith (write: (w: CborWriter) => void): Uint8Array {
  const w = spare ?? new CborWriter()
  spare = undefined
  try {
    write(w.reset())
    return w.bytes()
  } finally {
    if (w.capacity <= MAX_SPARE) spare = w
  }
}
