/**
 * A small writer of canonical DAG-CBOR for records whose layout is known
 * (an envelope payload, a stored task): the caller writes map keys in
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
 * Pieces of one encoding, joined once at the end: heads, text and integers
 * written into a scratch buffer, and byte strings already encoded kept as
 * they are
 */
export class CborParts {
  private readonly parts: Uint8Array[] = []
  private scratch = new Uint8Array(256)
  private used = 0
  private length = 0

  private room (n: number): void {
    if (this.used + n <= this.scratch.length) return
    this.flush()
    if (n > this.scratch.length) this.scratch = new Uint8Array(n)
  }

  private flush (): void {
    if (this.used === 0) return
    this.parts.push(this.scratch.subarray(0, this.used))
    this.scratch = new Uint8Array(this.scratch.length)
    this.used = 0
  }

  head (major: number, n: number): this {
    this.room(9)
    const at = writeHead(this.scratch, this.used, major, n)
    this.length += at - this.used
    this.used = at
    return this
  }

  text (s: string): this {
    const t = textOf(s)
    const n = textLength(t)
    this.room(n)
    writeText(this.scratch, this.used, t)
    this.used += n
    this.length += n
    return this
  }

  /** Bytes that are already a DAG-CBOR data item (or several) */
  raw (bytes: Uint8Array): this {
    if (bytes.length <= 64) {
      this.room(bytes.length)
      this.scratch.set(bytes, this.used)
      this.used += bytes.length
    } else {
      this.flush()
      this.parts.push(bytes)
    }
    this.length += bytes.length
    return this
  }

  bytes (): Uint8Array {
    this.flush()
    if (this.parts.length === 1) return this.parts[0]
    const out = new Uint8Array(this.length)
    let at = 0
    for (const p of this.parts) {
      out.set(p, at)
      at += p.length
    }
    return out
  }
}
