/**
 * @packageDocumentation
 *
 * The transport layer of the Internet of Agents stack.
 *
 * - {@link createTransportNode} creates a libp2p node configured for agents
 *   (TCP, WebSockets, in-memory; Noise; Yamux; identify; ping; Kademlia DHT on
 *   `/ioa/kad/1.0.0`; optional bootstrap and mDNS; persistent identity).
 * - Its `services.messaging` ({@link Messaging}) sends typed requests and
 *   server-streamed responses over versioned protocol ids, multiplexed over
 *   long-lived streams, with limits, timeouts and cancellation.
 *
 * The wire format is specified in `spec/transport.md`.
 */
import './polyfill.js'

export { createTransportNode, IOA_DHT_PROTOCOL } from './node.js'
export type { TransportNodeInit, TransportNode, TransportServices, TransportKind, PubsubInit } from './node.js'
export { messaging, MESSAGING_DEFAULTS } from './messaging.js'
export type {
  Messaging, MessagingInit, MessagingComponents, MessagingStats, MessageTarget,
  RequestContext, RequestOptions, UnaryHandler, StreamingHandler
} from './messaging.js'
export type { MessagingDefaults } from './messaging/api.js'
export { encodeFrame, encodeFramePrefixed, decodeFrame, FrameType, METHOD_PATTERN } from './codec.js'
export type { CodedErrorClass } from './errors.js'
export type { BufferStats } from './buffer-budget.js'
export type { PeerBudgetInit } from './peer-budgets.js'
export type { DecodeFrameOptions, Frame, FrameTypeValue, RequestFrame, PayloadFrame, ControlFrame, CreditFrame, ErrorFrame } from './codec.js'
export {
  MessagingError, UnknownMethodError, PayloadTooLargeError, TimeoutError, HandlerError,
  TooManyRequestsError, MalformedFrameError, MalformedLengthError, ResourceExhaustedError, CanceledError, StreamClosedError, NotStartedError,
  InvalidArgumentError, DialFailedError, ProtocolNotSupportedError, RemoteError, errorFromWire, ERROR_CODE_PATTERN,
  ErrorFamily,
  CodedError, withCode
} from './errors.js'
export { openDatastore } from './node.js'
export {
  RETRY_TABLE, ANSWER, retryFacts, isRepeatable, isUnreached, mayTryAnotherPeer, countsAgainstAgent
} from './retry.js'
export type { RetryFacts, Reached, ErrorLayer, RetryReadOptions, AnotherPeerOptions, BlameOptions } from './retry.js'
export { membersOnlyGater } from './gater.js'
export type { MembersOnlyGaterOptions } from './gater.js'
export {
  InvalidDomainKeyError, parseDomainKey, readDomainKeyFile, loadDomainKey, generateDomainKey, privateDhtProtocol,
  DOMAIN_KEY_HEADER, PRIVATE_DHT_PREFIX
} from './private-network.js'
export type { PrivateNetworkInit, DomainKey } from './private-network.js'
