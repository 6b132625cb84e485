/**
 * The messaging service's public types, options and their defaults
 */
import { PEER_BUDGET_DEFAULTS } from '../peer-budgets.js'
import { DEFAULT_COALESCE_BYTES } from '../write-coalescer.js'
import type { PeerBudgetInit } from '../peer-budgets.js'
import type { BufferStats } from '../buffer-budget.js'
import type { AbortOptions, ComponentLogger, Connection, Metrics, PeerId } from '@libp2p/interface'
import type { ConnectionManager, Registrar } from '@libp2p/interface-internal'
import type { Multiaddr } from '@multiformats/multiaddr'

export interface MessagingInit extends PeerBudgetInit {
  /**
   * Prefix of the service's log component names: the service logs as
   * `<logPrefix>`, the requester side as `<logPrefix>:outbound`, the responder
   * side as `<logPrefix>:inbound`, framing as `<logPrefix>:framing` and the
   * per-peer budgets as `<logPrefix>:budgets` (`DEBUG=ioa:transport:*`)
   *
   * @default 'ioa:transport:messaging'
   */
  logPrefix?: string

  /**
   * Largest encoded frame (envelope plus payload, without the length prefix)
   * sent or accepted, in bytes
   *
   * @default 1_048_576
   */
  maxFrameSize?: number

  /**
   * Largest number of requests from one remote peer that run at once on this
   * node; more are answered with `TOO_MANY_REQUESTS`. The requesting side
   * queues its own requests above the same number per (peer, protocol).
   *
   * @default 64
   */
  maxInFlightPerPeer?: number

  /**
   * How long a request waits for its response (and a streamed request for
   * each next item) unless the call passes its own `timeout`, in ms
   *
   * @default 10_000
   */
  requestTimeout?: number

  /**
   * Longest time a handler may run (for streaming handlers: between two items),
   * in ms. The requester's own timeout, carried in the request, lowers it.
   *
   * @default 30_000
   */
  handlerTimeout?: number

  /**
   * An inbound stream with no request in flight that receives no frame for this
   * long is closed (defends against peers that open streams and never write)
   *
   * @default 60_000
   */
  idleTimeout?: number

  /**
   * An outbound stream with no request in flight is closed after this long
   *
   * @default 30_000
   */
  outboundIdleTimeout?: number

  /**
   * How many items a streaming handler may send before the requester grants
   * more (flow-control window)
   *
   * @default 16
   */
  streamWindow?: number

  /**
   * Inbound streams per connection per protocol
   *
   * @default 8
   */
  maxInboundStreams?: number

  /**
   * Frames written to one stream in the same event-loop turn are sent as
   * one write (one Yamux data frame, one Noise message) of at most this many
   * bytes; a frame of this size or more is sent on its own at once. Bounds
   * the bytes a stream holds back per turn. 1 sends every frame on its own.
   * The default is what fits in one Noise message (65,535 bytes with its
   * tag) after the Yamux header.
   *
   * @default 65_507
   */
  coalesceBytes?: number
}

/**
 * The slice of a libp2p node the messaging service uses (a stub with these
 * fields is enough to run it, see test/messaging-components.test.ts)
 */
export interface MessagingComponents {
  registrar: Registrar
  connectionManager: ConnectionManager
  logger: ComponentLogger
  /**
   * When present, the service counts the requests it sends, serves and
   * refuses (`ioa_transport_messaging_requests_total`, label `outcome`)
   */
  metrics?: Metrics
}

/** What a handler learns about the request it serves */
export interface RequestContext {
  /** The peer that sent the request */
  peer: PeerId
  /** The connection the request arrived on */
  connection: Connection
  protocol: string
  method: string
  /** Aborted when the requester cancels or the handler runs out of time */
  signal: AbortSignal
  /**
   * False when the request's payload is not in canonical DAG-CBOR form
   * although the transport accepted it: a float in it holds an integral
   * value (spec/transport.md 5; every other non-canonical form is refused
   * by the transport itself)
   */
  canonical?: boolean
}

/** Answers one request with one response */
export type UnaryHandler = (payload: unknown, context: RequestContext) => unknown

/** Answers one request with a stream of items */
export type StreamingHandler = (payload: unknown, context: RequestContext) => AsyncIterable<unknown> | Iterable<unknown>

export interface RequestOptions extends AbortOptions {
  /**
   * Overrides `requestTimeout` for this call, in ms
   */
  timeout?: number
}

/** Where to send: a peer id (dialled through the peer store) or address(es) */
export type MessageTarget = PeerId | Multiaddr | Multiaddr[]

export interface MessagingStats {
  /** Open outbound streams (one per peer and protocol in use) */
  outboundStreams: number
  /** Open inbound streams */
  inboundStreams: number
  /** Requests sent and awaiting their answer */
  pendingRequests: number
  /** Handlers running on this node */
  activeHandlers: number
  /** Bytes held in partial frames, over all streams (`bufferStats()` has them per peer and address) */
  bufferedBytes: number
  /**
   * Entries in the tables kept per remote peer and per address (calls in
   * flight, buffered bytes, decode budgets not yet refilled); goes back to
   * its baseline when peers go away
   */
  peerEntries: number
}

export interface Messaging {
  /** Serve `method` on `protocol` with a handler that returns one response */
  handle(protocol: string, method: string, handler: UnaryHandler): Promise<void>
  /** Serve `method` on `protocol` with a handler that yields a stream of items */
  handleStream(protocol: string, method: string, handler: StreamingHandler): Promise<void>
  /** Stop serving one method, or the whole protocol when `method` is omitted */
  unhandle(protocol: string, method?: string): Promise<void>
  /** Send a request and wait for its response */
  request<T = unknown>(target: MessageTarget, protocol: string, method: string, payload?: unknown, options?: RequestOptions): Promise<T>
  /** Send a request and iterate the items the handler streams back; breaking out cancels it */
  stream<T = unknown>(target: MessageTarget, protocol: string, method: string, payload?: unknown, options?: RequestOptions): AsyncGenerator<T, void, undefined>
  /** Counters for open streams and calls, for health checks and leak tests */
  stats(): MessagingStats
  /** Bytes held in partial frames: in total, per remote peer and per remote IP address */
  bufferStats(): BufferStats
}

/** The numeric options, all set */
export interface MessagingDefaults extends Required<PeerBudgetInit> {
  maxFrameSize: number
  maxInFlightPerPeer: number
  requestTimeout: number
  handlerTimeout: number
  idleTimeout: number
  outboundIdleTimeout: number
  streamWindow: number
  maxInboundStreams: number
  coalesceBytes: number
}

/** Default of each numeric option */
export const MESSAGING_DEFAULTS: Readonly<MessagingDefaults> = Object.freeze({
  maxFrameSize: 1_048_576,
  maxInFlightPerPeer: 64,
  requestTimeout: 10_000,
  handlerTimeout: 30_000,
  idleTimeout: 60_000,
  outboundIdleTimeout: 30_000,
  streamWindow: 16,
  maxInboundStreams: 8,
  coalesceBytes: DEFAULT_COALESCE_BYTES,
  ...PEER_BUDGET_DEFAULTS
})

/** Longest timeout, in ms (the largest delay setTimeout accepts) */
export const MAX_TIMEOUT = 2_147_483_647

/** Most credit a requester may grant a stream at once */
export const MAX_WINDOW = 1024

/** A registered handler and whether it answers once or streams */
export type Handler = { kind: 'unary', fn: UnaryHandler } | { kind: 'stream', fn: StreamingHandler }

/** Default `MessagingInit.logPrefix` */
export const MESSAGING_LOG_PREFIX = 'ioa:transport:messaging'
