/**
 * Options of the gossip channel (`InterconnectInit.gossip`), their defaults
 * and their checks (spec `interconnect.md` 10 and 12)
 */
import { BadRequestError } from '../errors.js'

export interface GossipInit {
  /**
   * A node republishes its snapshot this often (jittered by ±10 %), in ms
   *
   * @default 60_000
   */
  interval?: number

  /**
   * The `ttl` of the snapshots this node publishes, in ms
   *
   * @default 3 × `interval`
   */
  ttl?: number

  /**
   * Longest time a received snapshot is kept, in ms: a longer `ttl` is clamped to it
   *
   * @default 180_000
   */
  maxTtl?: number

  /**
   * A node answers a `hello` (republishes its snapshot within 0-1 s) at most
   * once per this many ms
   *
   * @default 10_000
   */
  helloMinInterval?: number

  /**
   * How long after start a hello that announces nothing (a client's,
   * section 12.4) is held, in ms: its signing and sending then do not take
   * the CPU of a newcomer's first lookup and task, and its first lookups
   * ask the index query (12.6) for what the hello's answers would bring.
   * Announcing something sends it at once. 0: not held
   *
   * @default 1_000
   */
  helloHold?: number

  /**
   * Changes to the announced set within this many ms make one snapshot
   *
   * @default 100
   */
  debounce?: number

  /**
   * Most capabilities in one snapshot; a received snapshot with more is
   * rejected (`SNAPSHOT_TOO_LARGE`), and this node announces no more than these
   *
   * @default 1_024
   */
  maxCapabilities?: number

  /**
   * Most bytes of one snapshot; a received snapshot with more is rejected
   * (`SNAPSHOT_TOO_LARGE`) before it is parsed
   *
   * @default 65_536
   */
  maxMessageBytes?: number

  /**
   * Most announcers held in the index; beyond it the least recently updated are dropped
   *
   * @default 10_000
   */
  maxAnnouncers?: number

  /**
   * Most (announcer, name) pairs held in the index over all announcers,
   * counting each capability with its prefixes; beyond it the least recently
   * updated announcers are dropped
   *
   * @default 262_144
   */
  maxIndexedNames?: number

  /**
   * Most snapshots taken from one announcer per minute (in bursts of as
   * many); more are ignored until its budget refills
   *
   * @default 30
   */
  maxSnapshotsPerMinute?: number

  /**
   * Clock skew allowed for a snapshot's `seq` (the publisher's clock): a
   * snapshot whose `seq + ttl` is further than this in the past is ignored (a replay)
   *
   * @default 60_000
   */
  clockSkew?: number

  /**
   * Most connected peers of the topic (or, while none is known, identified as serving the index query) a lookup asks for their index entries
   * of a capability (the index query, spec section 12.6) when this node's
   * own index has no announcer of it, as a newcomer's has not; 0 never asks
   *
   * @default 2
   */
  queryPeers?: number

  /**
   * How long such a lookup waits for a first connected peer to ask (of
   * the topic, or whose identify lists the index query's protocol: a
   * newcomer's bootstrap connection), in ms
   *
   * @default 2_000
   */
  queryWait?: number

  /**
   * A lookup that asks the index query (its own index has no announcer)
   * starts its DHT walk once the query's candidates are fetched, or after
   * this many ms, whichever comes first: a newcomer then dials the
   * announcer its bootstrap peer named before the peers of a walk it may not need
   *
   * @default 1_000
   */
  queryHold?: number

  /**
   * Most entries in one index answer, sent or received: a longer answer is
   * refused (`SNAPSHOT_TOO_LARGE`)
   *
   * @default 32
   */
  queryMaxEntries?: number

  /**
   * Most bytes of snapshots in one index answer, sent or received: a larger
   * answer is refused (`SNAPSHOT_TOO_LARGE`)
   *
   * @default 262_144
   */
  queryMaxBytes?: number

  /**
   * Most index queries answered per asking peer per minute (in bursts of
   * as many); more are refused with `RATE_LIMITED`
   *
   * @default 30
   */
  queriesPerMinute?: number
}

export type GossipDefaults = Required<GossipInit>

/** Fill in the defaults and check every number */
export function resolveGossipOptions (init: GossipInit): GossipDefaults {
  const interval = init.interval ?? 60_000
  const opts: GossipDefaults = {
    interval,
    ttl: init.ttl ?? 3 * interval,
    maxTtl: init.maxTtl ?? 180_000,
    helloMinInterval: init.helloMinInterval ?? 10_000,
    helloHold: init.helloHold ?? 1_000,
    debounce: init.debounce ?? 100,
    maxCapabilities: init.maxCapabilities ?? 1_024,
    maxMessageBytes: init.maxMessageBytes ?? 65_536,
    maxAnnouncers: init.maxAnnouncers ?? 10_000,
    maxIndexedNames: init.maxIndexedNames ?? 262_144,
    maxSnapshotsPerMinute: init.maxSnapshotsPerMinute ?? 30,
    clockSkew: init.clockSkew ?? 60_000,
    queryPeers: init.queryPeers ?? 2,
    queryWait: init.queryWait ?? 2_000,
    queryHold: init.queryHold ?? 1_000,
    queryMaxEntries: init.queryMaxEntries ?? 32,
    queryMaxBytes: init.queryMaxBytes ?? 262_144,
    queriesPerMinute: init.queriesPerMinute ?? 30
  }
  const ranges: Record<keyof GossipDefaults, [number, number]> = {
    interval: [100, 86_400_000],
    ttl: [1, 2_147_483_647],
    maxTtl: [1, 2_147_483_647],
    helloMinInterval: [0, 86_400_000],
    helloHold: [0, 60_000],
    debounce: [0, 60_000],
    maxCapabilities: [1, 65_536],
    maxMessageBytes: [64, 1_048_576],
    maxAnnouncers: [1, 10_000_000],
    maxIndexedNames: [1, 100_000_000],
    maxSnapshotsPerMinute: [1, 60_000],
    clockSkew: [0, 86_400_000],
    queryPeers: [0, 16],
    queryWait: [0, 60_000],
    queryHold: [0, 60_000],
    queryMaxEntries: [1, 256],
    queryMaxBytes: [1_024, 786_432],
    queriesPerMinute: [1, 60_000]
  }
  for (const [key, [min, max]] of Object.entries(ranges) as Array<[keyof GossipDefaults, [number, number]]>) {
    const v = opts[key]
    if (!Number.isInteger(v) || v < min || v > max) throw new BadRequestError(`Invalid interconnect option gossip.${key}=${v} (${min}-${max})`)
  }
  return opts
}
