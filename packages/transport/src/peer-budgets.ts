/**
 * What one remote peer may cost this node before its frames are decoded
 * (`spec/transport.md` section 11.1): bytes held in partial frames (per
 * peer, per IP address, per node), decoding work per second (per peer, per
 * IP address), and the size of one frame in items and nesting.
 */
import { BufferBudget, remoteAddress } from './buffer-budget.js'
import { InvalidArgumentError, TooManyRequestsError } from './errors.js'
import { ITEM_COST } from './framed-stream.js'
import { MAX_PREFIX_BYTES } from './length-prefix.js'
import { TokenBuckets } from './rate-limit.js'
import type { BufferAccount } from './buffer-budget.js'
import type { ScanLimits } from './cbor-scan.js'
import type { MessagingError } from './errors.js'
import type { Connection, Logger } from '@libp2p/interface'

export interface PeerBudgetInit {
  /**
   * Bytes of partial frames one remote peer may have this node hold, over
   * all its streams (at least `maxFrameSize` + 9). A stream that would go
   * over it gets a stream-level `RESOURCE_EXHAUSTED` and is closed.
   *
   * @default 8_388_608
   */
  maxBufferedPerPeer?: number

  /**
   * Bytes of partial frames all peers connected from one IP address may have
   * this node hold (at least `maxFrameSize` + 9)
   *
   * @default 33_554_432
   */
  maxBufferedPerAddress?: number

  /**
   * Bytes of partial frames all peers together may have this node hold (at
   * least `maxFrameSize` + 9)
   *
   * @default 134_217_728
   */
  maxBufferedTotal?: number

  /**
   * Decoding work one remote peer may cause per second, in bytes: a frame
   * costs its length plus 16 per data item. Also the burst. A frame over the
   * budget is not decoded: the stream gets a stream-level
   * `TOO_MANY_REQUESTS` and is closed. At least the cost of one largest
   * frame (`maxFrameSize` + 16 x `maxFrameItems`).
   *
   * @default 33_554_432
   */
  decodeBytesPerPeer?: number

  /**
   * Decoding work all peers from one IP address may cause per second, in
   * bytes, counted like `decodeBytesPerPeer`
   *
   * @default 67_108_864
   */
  decodeBytesPerAddress?: number

  /**
   * Most data items (scalars, strings, arrays, maps, tags) in one frame body;
   * a body with more is refused as `MALFORMED_FRAME` before it is decoded
   *
   * @default 131_072
   */
  maxFrameItems?: number

  /**
   * Most levels of arrays, maps and tags inside one another in one frame
   * body (the envelope map is level 1)
   *
   * @default 128
   */
  maxFrameDepth?: number
}

export const PEER_BUDGET_DEFAULTS: Readonly<Required<PeerBudgetInit>> = Object.freeze({
  maxBufferedPerPeer: 8_388_608,
  maxBufferedPerAddress: 33_554_432,
  maxBufferedTotal: 134_217_728,
  decodeBytesPerPeer: 33_554_432,
  decodeBytesPerAddress: 67_108_864,
  maxFrameItems: 131_072,
  maxFrameDepth: 128
})

/** What a framed stream needs from the budgets */
export interface StreamBudget {
  scan: ScanLimits
  account: BufferAccount
  charge(cost: number): MessagingError | undefined
}

export class PeerBudgets {
  readonly buffers: BufferBudget
  private readonly decodePeers: TokenBuckets
  private readonly decodeAddresses: TokenBuckets
  private readonly scan: ScanLimits
  private readonly opts: Required<PeerBudgetInit>
  private readonly log: Logger

  constructor (opts: Required<PeerBudgetInit>, maxFrameSize: number, log: Logger) {
    const largest = maxFrameSize + MAX_PREFIX_BYTES
    for (const key of ['maxBufferedPerPeer', 'maxBufferedPerAddress', 'maxBufferedTotal'] as const) {
      if (opts[key] < largest) {
        throw new InvalidArgumentError(`Messaging option ${key}=${opts[key]} is below one largest frame (${largest} bytes)`)
      }
    }
    const costliest = maxFrameSize + ITEM_COST * opts.maxFrameItems
    for (const key of ['decodeBytesPerPeer', 'decodeBytesPerAddress'] as const) {
      if (opts[key] < costliest) {
        throw new InvalidArgumentError(`Messaging option ${key}=${opts[key]} is below the cost of one largest frame (${costliest})`)
      }
    }
    this.opts = opts
    this.log = log
    this.buffers = new BufferBudget({ perPeer: opts.maxBufferedPerPeer, perAddress: opts.maxBufferedPerAddress, total: opts.maxBufferedTotal })
    this.decodePeers = new TokenBuckets(opts.decodeBytesPerPeer, 1_000)
    this.decodeAddresses = new TokenBuckets(opts.decodeBytesPerAddress, 1_000)
    this.scan = Object.freeze({ maxItems: opts.maxFrameItems, maxDepth: opts.maxFrameDepth })
  }

  /** The account and decode charge of one stream on `connection` */
  forConnection (connection: Connection): StreamBudget {
    const peer = connection.remotePeer.toString()
    const address = remoteAddress(connection)
    return {
      scan: this.scan,
      account: this.buffers.open(peer, address),
      charge: (cost) => this.charge(peer, address, cost)
    }
  }

  private charge (peer: string, address: string | undefined, cost: number): MessagingError | undefined {
    const now = Date.now()
    if (!this.decodePeers.take(peer, now, cost)) {
      this.log('decode budget of peer %s spent', peer)
      return new TooManyRequestsError(`Peer sent more than ${this.opts.decodeBytesPerPeer} bytes of decoding work per second`)
    }
    if (address != null && !this.decodeAddresses.take(address, now, cost)) {
      this.log('decode budget of address %s spent (peer %s)', address, peer)
      return new TooManyRequestsError(`Address sent more than ${this.opts.decodeBytesPerAddress} bytes of decoding work per second`)
    }
    return undefined
  }

  /** Entries in the per-peer and per-address tables */
  entries (): number {
    return this.buffers.entries + this.decodePeers.size() + this.decodeAddresses.size()
  }
}
