/**
 * What a test started and must stop: `stopAfterEach()` registers, in the
 * calling test file, an `afterEach` that restores vitest's mocks and stops
 * everything pushed onto the returned list during the test, last pushed
 * first (push a network before the services on it, so that it stops last).
 *
 * Import it by relative path, as `util.js`.
 */
import { afterEach, vi } from 'vitest'

/** A transport node's `stop` may return nothing (libp2p types it `void | Promise<void>`) */
export interface Stoppable { stop(): void | Promise<void> }

export function stopAfterEach (): Stoppable[] {
  const started: Stoppable[] = []
  afterEach(async () => {
    vi.restoreAllMocks()
    for (const x of started.splice(0).reverse()) {
      // one part failing to stop must not keep the others running into the next test
      await Promise.resolve().then(async () => { await x.stop() }).catch((err: unknown) => { console.warn('stop after the test failed:', err) })
    }
  })
  return started
}
