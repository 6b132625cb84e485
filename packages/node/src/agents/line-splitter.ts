/**
 * A bounded line splitter for the local agent protocol's stdio.
 *
 * Kept hand-written on purpose: `node:readline`, `split2` and `it-split`
 * buffer a whole line before handing it over, so a program that writes one
 * endless line makes the node hold all of it. This one never holds more than
 * `max` bytes of an unfinished line and still reports the oversized line (with
 * its first bytes, where the task id usually is), as `spec/node-agents.md`
 * ("Limits") requires.
 */

/** Bytes of an oversized line kept for its report (its `"task"` is looked for there) */
export const HEAD_BYTES = 4_096

/**
 * Splits a byte stream into lines of at most `max` bytes (without the `\n`,
 * and a `\r` before it) without ever holding more than `max` bytes of an
 * unfinished line: the rest of a longer line is dropped, its first bytes kept.
 */
export class LineSplitter {
  private parts: Buffer[] = []
  private size = 0
  private head?: Buffer

  constructor (
    private readonly max: number,
    private readonly onLine: (line: Buffer) => void,
    private readonly onOversized: (head: Buffer, size: number) => void
  ) {}

  push (chunk: Buffer): void {
    let start = 0
    while (start <= chunk.length) {
      const nl = chunk.indexOf(0x0a, start)
      const piece = chunk.subarray(start, nl === -1 ? chunk.length : nl)
      if (this.head != null) {
        this.size += piece.length
      } else if (this.size + piece.length > this.max) {
        this.head = Buffer.concat([...this.parts, piece.subarray(0, HEAD_BYTES)]).subarray(0, HEAD_BYTES)
        this.parts = []
        this.size += piece.length
      } else if (piece.length > 0) {
        this.parts.push(piece)
        this.size += piece.length
      }
      if (nl === -1) return
      this.flush()
      start = nl + 1
    }
  }

  /** End of input: an unfinished last line counts as a line */
  end (): void {
    if (this.size > 0) this.flush()
  }

  private flush (): void {
    const head = this.head
    const size = this.size
    const parts = this.parts
    this.parts = []
    this.size = 0
    this.head = undefined
    if (head != null) {
      this.onOversized(head, size)
      return
    }
    let line = parts.length === 1 ? parts[0] : Buffer.concat(parts)
    if (line.length > 0 && line[line.length - 1] === 0x0d) line = line.subarray(0, line.length - 1)
    this.onLine(line)
  }
}
