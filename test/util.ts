/**
 * Helpers shared by the test suites of the packages (`packages/<name>/test`)
 * and of the repository (`test/`): waiting and polling for a condition,
 * draining a stream, catching the error of a call, reading the test vectors
 * of a spec, and the small byte, seed and PRNG utilities around them.
 *
 * Import it by relative path: `'../../../test/util.js'` from
 * `packages/<name>/test`, `'../../../../test/util.js'` from a folder below
 * that, `'./util.js'` from `test/` and `'../util.js'` from `test/harness`.
 *
 * Only logic that is the same in every suite belongs here; fixtures of one
 * package (agents, tokens, plans, frames) stay in that package's tests.
 */
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { generateKeyPairFromSeed } from '@libp2p/crypto/keys'
import { expect } from 'vitest'
import type { Ed25519PrivateKey } from '@libp2p/interface'

// ---------------------------------------------------------------------------
// networks

/**
 * The loopback allow-list: tests that start several nodes on 127.0.0.1 pass
 * it as `allow` (or `limits.allow` in a node config) so libp2p's inbound
 * connection rate limit (5 per second per host) and connection caps do not
 * refuse their own nodes. Nodes do not allow loopback by default.
 */
export const LOOPBACK: string[] = ['/ip4/127.0.0.1', '/ip6/::1']

// ---------------------------------------------------------------------------
// waiting

/**
 * Resolve after `ms` milliseconds. With a `signal`, reject with its reason as
 * soon as it is aborted (at once when it already is) and clear the timer.
 */
export async function delay (ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted === true) {
      reject(signal.reason)
      return
    }
    const onAbort = (): void => {
      clearTimeout(timer)
      reject(signal?.reason)
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort)
      resolve()
    }, ms)
    signal?.addEventListener('abort', onAbort, { once: true })
  })
}

export interface UntilOptions {
  /** Give up after this many milliseconds. @default 10_000 */
  timeout?: number
  /** Wait this many milliseconds between two calls. @default 50 */
  interval?: number
  /** What is awaited, for the error message on timeout. @default 'condition' */
  what?: string
}

/**
 * Call `fn` until it returns (or resolves to) something other than
 * `undefined` or `false`, and return that value: a predicate is polled until
 * it is `true`, a lookup until it finds something. `fn` runs once at once,
 * then every `interval` ms; after `timeout` ms without a value the returned
 * promise rejects with "<what> not met within <timeout> ms". Errors of `fn`
 * are not caught.
 *
 * @example
 * ```ts
 * await until(() => node.getPeers().length > 0, { timeout: 5_000, what: 'a peer' })
 * const found = await until(async () => {
 *   const results = await ic.discoverAll({ capability: 'travel' })
 *   return results.length > 0 ? results : undefined
 * }, { timeout: 20_000, interval: 200, what: 'discovery' })
 * ```
 */
export async function until<T> (fn: () => T | undefined | false | PromiseLike<T | undefined | false>, options: UntilOptions = {}): Promise<T> {
  const { timeout = 10_000, interval = 50, what = 'condition' } = options
  const start = Date.now()
  while (true) {
    const value = await fn()
    if (value !== undefined && value !== false) return value
    if (Date.now() - start > timeout) throw new Error(`${what} not met within ${timeout} ms`)
    await delay(interval)
  }
}

// ---------------------------------------------------------------------------
// streams

/**
 * Drain an async iterable (a stream of events, say) into an array, calling
 * `onItem` on each item as it arrives and before the next one is taken.
 */
export async function collect<T> (iterable: AsyncIterable<T>, onItem?: (item: T) => Promise<void> | void): Promise<T[]> {
  const out: T[] = []
  for await (const item of iterable) {
    out.push(item)
    await onItem?.(item)
  }
  return out
}

// ---------------------------------------------------------------------------
// expected errors

/** A promise, or a function that throws or returns a promise that rejects */
export type Failing = Promise<unknown> | (() => unknown)

/** What `action` throws or rejects with; throws "expected <what>, got success" when it does not fail */
async function failureOf (action: Failing, what: string): Promise<any> {
  try {
    await (typeof action === 'function' ? action() : action)
  } catch (err) {
    return err
  }
  throw new Error(`expected ${what}, got success`)
}

/** The error a synchronous call throws; throws when it returns instead */
export function errorOf (fn: () => unknown): any {
  try {
    fn()
  } catch (err) {
    return err
  }
  throw new Error('expected a throw')
}

/** The reason `p` rejects with; rejects when `p` resolves instead */
export async function rejectionOf (p: Promise<unknown>): Promise<any> {
  return failureOf(p, 'a rejection')
}

/**
 * Expect `action` (a promise, or a function that may throw or return a
 * promise) to fail with an error whose `name` is `name`; returns the error.
 */
export async function expectErrorName (action: Failing, name: string): Promise<any> {
  const err = await failureOf(action, name)
  expect(err?.name, `expected ${name}`).toBe(name)
  return err
}

/**
 * Expect `action` (a promise, or a function that may throw or return a
 * promise) to fail with an error whose `code` is `code`; returns the error.
 */
export async function expectErrorCode (action: Failing, code: string): Promise<any> {
  const err = await failureOf(action, code)
  expect(err?.code, `expected ${code}`).toBe(code)
  return err
}

// ---------------------------------------------------------------------------
// spec vectors

const SPEC_DIR = new URL('../spec/', import.meta.url)

/** The text of `spec/<specFile>`, located from this file (not from the working directory) */
export function readSpec (specFile: string): string {
  return readFileSync(fileURLToPath(new URL(specFile, SPEC_DIR)), 'utf8')
}

/**
 * The JSON of the first fenced block opened by ```` ```json <tag> ```` in
 * `spec/<specFile>` (e.g. `readSpecBlock('transport.md', 'vectors')`). The
 * spec is read at run time so that the spec and the code cannot drift apart
 * unnoticed; throws when there is no such block.
 */
export function readSpecBlock<T> (specFile: string, tag: string): T {
  const spec = readSpec(specFile)
  const fence = '```json ' + tag
  const match = spec.match(new RegExp(fence.replace(/[.*+?^${}()|[\]\\]/g, '\\$&') + '\\n([\\s\\S]*?)\\n```'))
  if (match == null) throw new Error(`No ${fence} block in spec/${specFile}`)
  return JSON.parse(match[1]) as T
}

/** Lower-case hex of bytes, as the spec vectors write them */
export const toHex = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex')

/** Bytes of a hex string of the spec vectors */
export const fromHex = (hex: string): Uint8Array => new Uint8Array(Buffer.from(hex, 'hex'))

/** The Ed25519 key of a fixed 32-byte seed given in hex (the principals of the spec vectors) */
export async function ed25519KeyFromSeed (seedHex: string): Promise<Ed25519PrivateKey> {
  return generateKeyPairFromSeed('Ed25519', fromHex(seedHex))
}

// ---------------------------------------------------------------------------
// randomness

/** mulberry32: a small seeded PRNG, so that a failure on random input can be reproduced from its seed */
export function prng (seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}
