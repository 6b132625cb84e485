/**
 * @packageDocumentation
 *
 * The agent interconnect layer: who an agent is (Ed25519 keys, `did:key`),
 * what it can do (signed agent cards with hierarchical capabilities), where it
 * is (capability and agent-id records in the Kademlia DHT), and how to reach
 * it (routing to an agent id, across domain gateways).
 *
 * Wire formats: `spec/interconnect.md`.
 */
export { createInterconnect, interconnectFromComponents } from './interconnect.js'
export { CARD_PROTOCOL, ROUTE_PROTOCOL, CAPS_INDEX_PROTOCOL, MAX_CARDS_PER_LIST } from './protocols.js'
export { componentsFromNode } from './components.js'
export type { InterconnectComponents, PubSub, PubSubMessage, PubSubVerdict } from './components.js'
export type {
  Interconnect, InterconnectService, InterconnectInit, HostAgentInit, HostedAgent, InboundMessage, InboxHandler,
  DiscoveredAgent, DiscoverOptions, DiscoverWait, SendOptions, CardQuery, CardSource, Forwarder
} from './types.js'
export type { InterconnectCacheStats } from './caches.js'
export type { AgentHistory, Outcome } from './history.js'
export {
  publicKeyToDid, didToPublicKey, isDid, domainSeparated, createIdentity, identityFromPrivateKey, verifyByDid, KeyStore
} from './identity.js'
export type { Did, Identity, AgentKeyStore } from './identity.js'
export {
  assertCapability, isCapability, capabilityPrefixes, capabilityMatches, capabilityCid, agentCid,
  MAX_CAPABILITY_DEPTH, MAX_CAPABILITY_LENGTH
} from './capability.js'
export {
  parseCard, signCard, verifyCard, cardSigningBytes, encodeSignedCard, matchingSkills,
  CARD_VERSION, CARD_LIMITS, AgentCardSchema, SkillSchema, AvailabilitySchema
} from './card.js'
export type { AgentCard, AgentCardInit, SignedCard, Skill, SkillInit, Availability, VerifyCardOptions } from './card.js'
export { defaultRanker, historyScore, matchQuery, schemaSatisfies } from './ranking.js'
export type { DiscoveryQuery, Ranker, RankInput, DefaultRankerInit } from './ranking.js'
export {
  InterconnectError, InvalidDidError, InvalidCapabilityError, InvalidCardError, InvalidSignatureError,
  ExpiredCardError, CardBindingError, UnknownAgentError, PeerUnreachableError, AgentNotHereError,
  NoInboxError, NotExportedError, RateLimitedError, DuplicateAgentError, BadRequestError, ForbiddenError,
  InvalidSnapshotError, SnapshotTooLargeError, UnrequestedSnapshotError, fromRemote
} from './errors.js'
export { encodeSnapshot, decodeSnapshot, gossipTopic, GOSSIP_TOPIC_PREFIX, SNAPSHOT_VERSION } from './gossip/snapshot.js'
export type { CapabilitySnapshot, SnapshotLimits } from './gossip/snapshot.js'
export type { GossipView, GossipStats } from './gossip/channel.js'
export { signedBytes } from './gossip/signed-entry.js'
export type { SignedEntry } from './gossip/signed-entry.js'
export type { CapabilityIndexStats } from './gossip/cap-index.js'
export type { GossipInit } from './gossip/options.js'
export { createGateway, gatewayFromComponents } from './gateway.js'
export type {
  Gateway, GatewayCaller, GatewayComponents, GatewayExportedEvent, GatewayInit, GatewayOptions, GatewayRateLimit, GatewayStats, ExportRule
} from './gateway-types.js'
