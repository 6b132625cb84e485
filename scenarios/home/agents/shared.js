// Small helpers shared by the home-security agent modules: typed errors,
// input validation, waiting, and reading the shipped data files.
import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { z } from 'zod'

/** A typed error of the home-security agents; `code` travels in the task's error */
export class HomeSecurityError extends Error {
  static name = 'HomeSecurityError'
  constructor (code, message) {
    super(message)
    this.name = HomeSecurityError.name
    this.code = code
  }
}

/** The input of a task does not have the expected shape (code INVALID_INPUT) */
export class InvalidInputError extends HomeSecurityError {
  static name = 'InvalidInputError'
  constructor (message) {
    super('INVALID_INPUT', message)
    this.name = InvalidInputError.name
  }
}

/** Parse `value` with a zod schema; InvalidInputError naming the first bad field */
export function parseInput (schema, value, what) {
  const r = schema.safeParse(value)
  if (r.success) return r.data
  const issue = r.error.issues[0]
  const field = issue.path.length > 0 ? issue.path.join('.') : '(input)'
  throw new InvalidInputError(`Invalid ${what} input at ${field}: ${issue.message}`)
}

/** A site name, zone name or robot id */
export const Name = z.string().min(1).max(64).regex(/^[A-Za-z0-9._-]+$/)
export const Did = z.string().max(128).regex(/^did:key:z[1-9A-HJ-NP-Za-km-z]+$/)
/** A coordinate of the site frame, in metres */
export const Coord = z.number().finite().min(-1000).max(1000)
export const FrameId = z.string().regex(/^[a-z0-9]{1,8}-[0-9]{6}$/)

/** Resolve after `ms`, or reject with the signal's reason when it aborts */
export function sleep (ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted === true) { reject(signal.reason); return }
    const onAbort = () => { clearTimeout(t); reject(signal.reason) }
    const t = setTimeout(() => { signal?.removeEventListener('abort', onAbort); resolve() }, ms)
    signal?.addEventListener('abort', onAbort, { once: true })
  })
}

/** Resolve when `signal` aborts (never rejects) */
export function aborted (signal) {
  return new Promise(resolve => {
    if (signal.aborted) resolve()
    else signal.addEventListener('abort', () => { resolve() }, { once: true })
  })
}

/** The scenario folder (`scenarios/home`), where the configs and data live */
export const HOME_DIR = fileURLToPath(new URL('../', import.meta.url))

/** The absolute path of a file given relative to the scenario folder (as paths in the node configs' options are) */
export function homePath (relative) {
  if (typeof relative !== 'string' || relative === '' || relative.length > 256 || relative.includes('\0')) throw new InvalidInputError('A file path must be a short string')
  return fileURLToPath(new URL(relative.replace(/^\.\//, ''), new URL('../', import.meta.url)))
}

/** Read a JSON file given relative to the scenario folder */
export async function readHomeJson (relative) {
  return JSON.parse(await readFile(homePath(relative), 'utf8'))
}

/** `did:key:z6Mk…abcd` → `z6Mk…abcd` for log lines */
export const shortDid = did => typeof did === 'string' ? `${did.slice(8, 12)}…${did.slice(-4)}` : String(did)
