/**
 * Where the CLI writes: results on stdout (human text, or JSON), progress
 * and errors on stderr.
 */
import { EXIT } from './errors.js'
import type { ErrorReport } from './errors.js'

export interface Streams {
  stdout: { write(chunk: string): unknown }
  stderr: { write(chunk: string): unknown }
}

export class Output {
  /** Machine-readable output (`--json`) */
  readonly json: boolean
  private readonly streams: Streams

  constructor (json: boolean, streams: Streams = { stdout: process.stdout, stderr: process.stderr }) {
    this.json = json
    this.streams = streams
  }

  /** A line of the human-readable result (stdout) */
  print (text = ''): void {
    this.streams.stdout.write(text + '\n')
  }

  /** A progress line (stderr, human mode only) */
  progress (text: string): void {
    if (!this.json) this.streams.stderr.write(text + '\n')
  }

  /** A warning (stderr, human mode only) */
  warn (text: string): void {
    if (!this.json) this.streams.stderr.write(`ioa: warning: ${text}\n`)
  }

  /** One JSON document or JSON line on stdout */
  emit (value: unknown): void {
    this.streams.stdout.write(toJson(value) + '\n')
  }

  /** The one error line on stderr; returns the exit code */
  error (report: ErrorReport): number {
    if (this.json) {
      const error: Record<string, string> = { code: report.code, message: report.message }
      if (report.field != null) error.field = report.field
      this.streams.stderr.write(JSON.stringify({ error }) + '\n')
    } else {
      this.streams.stderr.write(`ioa: ${report.message}${report.code !== 'ERROR' && report.code !== 'USAGE' ? ` (${report.code})` : ''}\n`)
    }
    return report.exit ?? EXIT.failed
  }
}

/** JSON of values that may hold bytes (base64url) and bigints (strings) */
export function toJson (value: unknown, indent?: number): string {
  return JSON.stringify(value, (_key, v: unknown) => {
    if (v instanceof Uint8Array) return Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64url')
    if (typeof v === 'bigint') return v.toString()
    return v
  }, indent)
}

/** Compact JSON of event data for one timeline line, bounded */
export function compact (data: unknown, max = 160): string {
  const s = toJson(data ?? {})
  return s.length > max ? s.slice(0, max - 1) + '…' : s
}

/** `+1.234s`, time since `t0` */
export function elapsed (at: number, t0: number, digits = 3): string {
  return `+${((at - t0) / 1000).toFixed(digits)}s`
}
