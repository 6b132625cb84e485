/**
 * Errors of the `ioa` command-line tool and how any error becomes its one
 * error line and exit code.
 */
import { CodedError } from '@ioa/transport'

/** Exit codes of every `ioa` command */
export const EXIT = Object.freeze({
  /** The command did what was asked */
  ok: 0,
  /** The operation failed: network, not found, task failed, interrupted */
  failed: 1,
  /** Bad usage or bad configuration: nothing was attempted */
  usage: 2
})

/** An error the CLI reports with its own code and exit status */
export class CliError extends CodedError {
  static override name = 'CliError'
  readonly exit: number
  /** The flag or config field at fault */
  readonly field?: string

  constructor (code: string, message: string, options: { exit?: number, field?: string, cause?: unknown } = {}) {
    super(code, message, options.cause != null ? { cause: options.cause } : undefined)
    this.exit = options.exit ?? EXIT.failed
    this.field = options.field
  }
}

/** Bad usage: an unknown flag, a missing or malformed argument (exit 2) */
export class UsageError extends CliError {
  static override name = 'UsageError'
  constructor (message: string, field?: string, code = 'USAGE') {
    super(code, message, { exit: EXIT.usage, field })
  }
}

/** What an error line says */
export interface ErrorReport {
  code: string
  message: string
  field?: string
  exit: number
}

/** Errors of the node that the user fixes before trying again (exit 2), each naming its field */
const USAGE_ERRORS = new Set(['ConfigError', 'KeyStoreError', 'DataDirCorruptError', 'IdentityMissingError'])
/** Errors of the node that name their field but may pass when tried again (exit 1) */
const FIELD_ERRORS = new Set(['DataDirLockedError', 'DataDirUnavailableError'])

/**
 * The report of any error: CLI errors keep their code and exit status; a
 * `ConfigError`, `KeyStoreError`, `DataDirCorruptError` or
 * `IdentityMissingError` exits 2 naming its field; a `DataDirLockedError` or
 * `DataDirUnavailableError` exits 1 naming its field; other typed errors of
 * the layers keep their code and exit 1; anything else is `ERROR`.
 */
export function errorReport (err: unknown): ErrorReport {
  const e = err as { name?: unknown, code?: unknown, message?: unknown, field?: unknown, exit?: unknown } | undefined
  const message = typeof e?.message === 'string' && e.message !== '' ? oneLine(e.message) : oneLine(String(err))
  const code = typeof e?.code === 'string' && e.code !== '' ? e.code : 'ERROR'
  const field = typeof e?.field === 'string' ? e.field : undefined
  if (err instanceof CliError) return { code, message, exit: err.exit, ...(field != null ? { field } : {}) }
  const name = typeof e?.name === 'string' ? e.name : ''
  if (USAGE_ERRORS.has(name)) return { code, message, exit: EXIT.usage, ...(field != null ? { field } : {}) }
  if (FIELD_ERRORS.has(name)) return { code, message, exit: EXIT.failed, ...(field != null ? { field } : {}) }
  return { code, message, exit: EXIT.failed }
}

/** A message on one line, bounded */
export function oneLine (text: string, max = 2000): string {
  const s = text.replace(/\s*\n\s*/g, ' ').trim()
  return s.length > max ? s.slice(0, max - 1) + '…' : s
}

/**
 * Rethrow a typed error of the layers as a usage error (exit 2) keeping its
 * code: for input the user gave that a layer refused (a token, a DID)
 */
export function asUsage (err: unknown, field?: string): never {
  if (err instanceof CliError) throw err
  const e = err as { code?: unknown, message?: unknown } | undefined
  if (typeof e?.code === 'string') {
    throw new UsageError(oneLine(String(e.message ?? err)), field, e.code)
  }
  throw err
}
