/**
 * Logging of the node package: every component logs through
 * `logger.forComponent('ioa:node:<part>')` (libp2p's ComponentLogger, the
 * `debug` package underneath, so `DEBUG=ioa:*` works), and `ioa start --log`
 * turns namespaces on from the command line.
 */
import { enable } from '@libp2p/logger'
import type { Logger } from '@libp2p/interface'

/**
 * Turn on debug namespaces (`debug` syntax: `ioa:*`, `ioa:node*,libp2p:dial`),
 * in addition to those `DEBUG` turned on. Lines go to stderr.
 */
export function enableLogging (namespaces: string): void {
  const current = process.env.DEBUG
  enable(current != null && current !== '' ? `${current},${namespaces}` : namespaces)
}

/**
 * Run a clean-up step whose failure must not stop the steps after it (a
 * stop, a close): its error is logged on `log.error`, never thrown.
 */
export async function attempt (log: Logger, what: string, fn: () => unknown): Promise<void> {
  try {
    await fn()
  } catch (err) {
    log.error('%s failed: %e', what, err)
  }
}
