/**
 * How a node's DHT starts (spec/transport.md 1, joining): its first lookups
 * neither wait for nor compete with its first self-query. kad-dht offers no
 * option for either, so both adjust fields of its internals; each is checked
 * against @libp2p/kad-dht 16.4.5, and when a field is not where expected
 * (another version) nothing changes and the DHT starts as kad-dht does.
 */
import { logger } from '@libp2p/logger'
import type { KadDHT } from '@libp2p/kad-dht'

const log = logger('ioa:transport:node')

/** The parts of kad-dht's internals used here */
interface DhtInternals {
  queryManager?: {
    initialQuerySelfHasRun?: unknown
    run?: (key: Uint8Array, query: unknown, options?: { isSelfQuery?: boolean, signal?: AbortSignal }) => AsyncGenerator<unknown>
  }
  querySelf?: { querySelf?: () => Promise<void>, isStarted?: () => boolean }
  routingTable?: { size?: number, addEventListener?: EventTarget['addEventListener'], removeEventListener?: EventTarget['removeEventListener'] }
}

/** The lookup counters of the DHTs whose first self-query is held */
const lookups = new WeakMap<object, () => () => void>()

/**
 * Tell the DHT of a node that a lookup of the node's own runs outside
 * kad-dht (a discovery that asks its peers before it walks the DHT): its
 * first self-query waits for it as for the DHT's own queries. Returns the
 * function that ends it (once); a no-op when the self-query is not held.
 */
export function lookupStarted (dht: KadDHT): () => void {
  return lookups.get(dht)?.() ?? (() => {})
}

/**
 * kad-dht holds every query until its first self-query has ended, not only
 * until the routing table has a peer (which it also waits for, and keeps
 * waiting for). On a fresh node that self-query dials the ~20 peers closest
 * to it: about a third of a second on loopback that the newcomer's first
 * lookup spent idle. The hold is a deferred promise on kad-dht's query
 * manager, with no option to skip it short of `allowQueryWithZeroPeers`,
 * which also drops the wait for the first peer and lets the first
 * self-query run on an empty table; so the hold alone is lifted here.
 */
export function releaseFirstQueries (dht: KadDHT): void {
  const manager = (dht as unknown as DhtInternals).queryManager
  if (manager != null && 'initialQuerySelfHasRun' in manager) {
    manager.initialQuerySelfHasRun = undefined
  } else {
    log('kad-dht has no initial self-query hold where expected; first lookups wait for the first self-query')
  }
}

/**
 * Hold the first self-query (due `selfQueryDelay` after start) while queries
 * of the node's own run (lookups, announcements), for at most `maxHold` ms.
 * The self-query dials and pings the peers closest to the node, and kad-dht
 * pings each new peer it hears of before taking it into the routing table:
 * about ten new connections at once, whose handshakes, on a machine whose
 * cores are busy, took the CPU of a newcomer's first lookup still running
 * after its first second. A self-query due before the routing table has a
 * peer (a start slower than `selfQueryDelay`) waits for that peer first, as
 * kad-dht's own query would, and then for the lookups that waited for it
 * too. Later self-queries (every 5 minutes) are not held. `maxHold` 0
 * leaves the first self-query unheld.
 */
export function holdFirstSelfQuery (dht: KadDHT, maxHold: number): void {
  if (maxHold === 0) return
  const { queryManager: manager, querySelf, routingTable: table } = dht as unknown as DhtInternals
  const run = manager?.run
  const first = querySelf?.querySelf
  if (manager == null || typeof run !== 'function' || querySelf == null || typeof first !== 'function' ||
    typeof table?.size !== 'number' || typeof table.addEventListener !== 'function' || typeof table.removeEventListener !== 'function') {
    log('kad-dht has no query manager or self-query where expected; the first self-query is not held for lookups')
    return
  }
  let running = 0
  const idle = new Set<() => void>()
  const enter = (): () => void => {
    running++
    let left = false
    return () => {
      if (left) return
      left = true
      if (--running === 0) {
        for (const wake of idle) wake()
      }
    }
  }
  lookups.set(dht, enter)
  manager.run = async function * (key, query, options) {
    const leave = options?.isSelfQuery !== true ? enter() : undefined
    try {
      yield * run.call(manager, key, query, options)
    } finally {
      leave?.()
    }
  }
  /** Resolve when `ready()` holds (checked now and on `subscribe`'s wake-ups), or at `deadline` */
  const until = async (ready: () => boolean, subscribe: (wake: () => void) => () => void, deadline: number): Promise<void> => {
    if (ready()) return
    await new Promise<void>(resolve => {
      const finish = (): void => {
        clearTimeout(timer)
        unsubscribe()
        resolve()
      }
      const timer = setTimeout(finish, Math.max(0, deadline - Date.now()))
      timer.unref?.()
      const unsubscribe = subscribe(() => { if (ready()) finish() })
    })
  }
  querySelf.querySelf = async () => {
    // only the first one is held; the next runs as kad-dht schedules it
    querySelf.querySelf = first
    const deadline = Date.now() + maxHold
    await until(() => (table.size ?? 0) > 0, wake => {
      table.addEventListener?.('peer:add', wake)
      return () => { table.removeEventListener?.('peer:add', wake) }
    }, deadline)
    if (running > 0) {
      log('holding the first DHT self-query until %d lookup(s) of this node end (at most %d ms)', running, maxHold)
      await until(() => running === 0, wake => {
        idle.add(wake)
        return () => { idle.delete(wake) }
      }, deadline)
    }
    // stopped meanwhile: kad-dht's own check skips the query
    await first()
  }
}
