/**
 * Node 20 lacks two globals that libp2p 3 relies on:
 *
 * - `Promise.withResolvers` (ES2024), called throughout libp2p
 * - `WebSocket`, which `@libp2p/websockets` uses when dialling
 *
 * Import this module before any libp2p code (`node --import`, vitest
 * `setupFiles`, or as the first import of an entry point). It is idempotent and
 * does nothing on runtimes that already provide both.
 *
 * @packageDocumentation
 */
import { createRequire } from 'node:module'

interface Resolvers<T> {
  promise: Promise<T>
  resolve(value: T | PromiseLike<T>): void
  reject(reason?: unknown): void
}

const P = Promise as unknown as { withResolvers?: <T>() => Resolvers<T> }

if (typeof P.withResolvers !== 'function') {
  Object.defineProperty(Promise, 'withResolvers', {
    configurable: true,
    writable: true,
    value: function withResolvers<T> (): Resolvers<T> {
      let resolve!: Resolvers<T>['resolve']
      let reject!: Resolvers<T>['reject']
      const promise = new Promise<T>((res, rej) => {
        resolve = res
        reject = rej
      })
      return { promise, resolve, reject }
    }
  })
}

const g = globalThis as { WebSocket?: unknown }

if (g.WebSocket == null) {
  // `ws` loads on first use (a WebSockets dial), not with every program
  const require = createRequire(import.meta.url)
  Object.defineProperty(globalThis, 'WebSocket', {
    configurable: true,
    enumerable: false,
    get () {
      const value = (require('ws') as { WebSocket: unknown }).WebSocket
      Object.defineProperty(globalThis, 'WebSocket', { configurable: true, writable: true, enumerable: false, value })
      return value
    },
    set (value: unknown) {
      Object.defineProperty(globalThis, 'WebSocket', { configurable: true, writable: true, enumerable: false, value })
    }
  })
}

export {}
