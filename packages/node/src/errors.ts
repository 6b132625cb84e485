/**
 * Error classes of the node package, written out: each has a `static name`
 * (the instances' `name`) and a stable `static code` (the instances' `code`),
 * on the transport's `CodedError` base. Tests and callers assert on name and
 * code, never on the message.
 */
import { CodedError, withCode } from '@ioa/transport'

/** A config file or config object is invalid (the CLI exits 2 naming `field`) */
export class ConfigError extends CodedError {
  static override name = 'ConfigError'
  static code = 'INVALID_CONFIG'
  /** Dotted path of the bad field, e.g. `agents.0.skills` */
  readonly field?: string

  constructor (message: string, field?: string, options?: ErrorOptions) {
    super(ConfigError.code, message, options)
    this.field = field
  }
}

/** A custom layer is malformed or failed to start */
export class LayerError extends CodedError {
  static override name = 'LayerError'
  static code = 'LAYER_FAILED'
  constructor (message: string, options?: ErrorOptions) {
    super(LayerError.code, message, options)
  }
}

/**
 * The key store cannot be opened or changed; `code` says why
 * (`PASSPHRASE_REQUIRED`, `WRONG_PASSPHRASE`, ...). The CLI exits 2 naming `field`.
 */
export class KeyStoreError extends CodedError {
  static override name = 'KeyStoreError'
  /** Where the passphrase came from (`keyStore.passphraseFile`, `$IOA_KEY_PASSPHRASE`), when that is at fault */
  readonly field?: string

  constructor (code: string, message: string, options: { field?: string, cause?: unknown } = {}) {
    super(code, message, options.cause != null ? { cause: options.cause } : undefined)
    this.field = options.field
  }
}

// ---- data directories ---------------------------------------------------------

/**
 * Base class of the errors of a data directory that cannot be used as it is;
 * `code` is stable, `file` names the file at fault when one is
 */
export class DataDirError extends CodedError {
  static override name = 'DataDirError'
  /** The data directory */
  readonly dir: string
  /** The file of the directory at fault (`LOCK`, `CURRENT`, `MANIFEST-000002`, `000005.ldb`) */
  readonly file?: string
  /** The config field or flag that named the directory (`dataDir`, `--data-dir`) */
  readonly field?: string

  constructor (code: string, message: string, options: { dir: string, file?: string, field?: string, cause?: unknown }) {
    super(code, message, options.cause != null ? { cause: options.cause } : undefined)
    this.dir = options.dir
    this.file = options.file
    this.field = options.field
  }
}

/** Another process (or node) holds the directory's LevelDB lock (the CLI exits 1) */
export class DataDirLockedError extends DataDirError {
  static override name = 'DataDirLockedError'
  static code = 'DATA_DIR_LOCKED'
  constructor (message: string, options: { dir: string, file?: string, field?: string, cause?: unknown }) {
    super(DataDirLockedError.code, message, options)
  }
}

/** The directory's LevelDB files are damaged or missing: nothing was changed (the CLI exits 2) */
export class DataDirCorruptError extends DataDirError {
  static override name = 'DataDirCorruptError'
  static code = 'DATA_DIR_CORRUPT'
  constructor (message: string, options: { dir: string, file?: string, field?: string, cause?: unknown }) {
    super(DataDirCorruptError.code, message, options)
  }
}

/** The directory cannot be created or opened for another reason (permissions, disk) (the CLI exits 1) */
export class DataDirUnavailableError extends DataDirError {
  static override name = 'DataDirUnavailableError'
  static code = 'DATA_DIR_UNAVAILABLE'
  constructor (message: string, options: { dir: string, file?: string, field?: string, cause?: unknown }) {
    super(DataDirUnavailableError.code, message, options)
  }
}

/**
 * The directory holds state but no node key: starting would give the node a
 * new identity, which only `newIdentity` (`--new-identity`) allows (the CLI exits 2)
 */
export class IdentityMissingError extends DataDirError {
  static override name = 'IdentityMissingError'
  static code = 'IDENTITY_MISSING'
  constructor (message: string, options: { dir: string, file?: string, field?: string, cause?: unknown }) {
    super(IdentityMissingError.code, message, options)
  }
}

// ---- external agents (`spec/node-agents.md`, "Errors") -----------------------

/** Base class of the external agent errors; `code` is stable */
export class ExternalAgentError extends CodedError {
  static override name = 'ExternalAgentError'
}

/** The program could not be started, or exited before its hello */
export class AgentStartError extends withCode(ExternalAgentError, 'AGENT_START_FAILED', 'The agent program failed to start') {
  static override name = 'AgentStartError'
}

/** No hello within `startTimeout` */
export class AgentStartTimeoutError extends withCode(ExternalAgentError, 'AGENT_START_TIMEOUT', 'The agent program sent no hello in time') {
  static override name = 'AgentStartTimeoutError'
}

/** The hello names another protocol (version) */
export class UnsupportedProtocolError extends withCode(ExternalAgentError, 'UNSUPPORTED_PROTOCOL', 'Unsupported agent protocol') {
  static override name = 'UnsupportedProtocolError'
}

/** The hello lacks a skill the configuration gives the agent */
export class SkillMismatchError extends withCode(ExternalAgentError, 'SKILL_MISMATCH', 'The program does not serve a configured skill') {
  static override name = 'SkillMismatchError'
}

/** A line of the program is not a valid protocol message */
export class AgentProtocolError extends withCode(ExternalAgentError, 'AGENT_PROTOCOL_ERROR', 'Agent protocol error') {
  static override name = 'AgentProtocolError'
}

/** A line is longer than `maxLineBytes` */
export class LineTooLongError extends withCode(ExternalAgentError, 'LINE_TOO_LONG', 'Line too long') {
  static override name = 'LineTooLongError'
}

/** The program exited (or was stopped) while the task ran */
export class AgentExitedError extends withCode(ExternalAgentError, 'AGENT_EXITED', 'The agent program exited') {
  static override name = 'AgentExitedError'
}

/** More than `maxConcurrentTasks` tasks at once */
export class TooManyTasksError extends withCode(ExternalAgentError, 'TOO_MANY_TASKS', 'Too many concurrent tasks') {
  static override name = 'TooManyTasksError'
}

/** The error a program reported for a task (`{"type":"error"}`): its code is the program's */
export class AgentTaskError extends ExternalAgentError {
  static override name = 'AgentTaskError'
}
