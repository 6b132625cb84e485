/**
 * The interconnect's options with their defaults filled in, validated once
 */
import { BadRequestError } from './errors.js'
import { resolveGossipOptions } from './gossip/options.js'
import { MAX_CARDS_PER_LIST } from './protocols.js'
import type { GossipDefaults } from './gossip/options.js'
import type { InterconnectInit } from './types.js'

export interface Defaults {
  domain: string
  cardTtl: number
  cacheTtl: number
  publish: boolean
  announceAgentIds: boolean
  announceConcurrency: number
  fetchConcurrency: number
  fetchAttempts: number
  requestTimeout: number
  clockSkew: number
  maxCachedLookups: number
  maxCachedRoutes: number
  maxCacheBytes: number
  maxResultsPerLookup: number
  maxCardsPerProvider: number
  maxHistory: number
  /** `false`: gossip off (still off at start when the node has no pubsub service) */
  gossip: GossipDefaults | false
  logPrefix: string
}

/** Most times one lookup may ask one provider for its cards */
const MAX_FETCH_ATTEMPTS = 10

/** Fill in the defaults of `init` and check every number */
export function resolveOptions (init: InterconnectInit): Defaults {
  const opts: Defaults = {
    domain: init.domain ?? 'local',
    cardTtl: init.cardTtl ?? 3_600_000,
    cacheTtl: init.cacheTtl ?? 30_000,
    publish: init.publish ?? true,
    announceAgentIds: init.announceAgentIds ?? true,
    announceConcurrency: init.announceConcurrency ?? 8,
    fetchConcurrency: init.fetchConcurrency ?? 8,
    fetchAttempts: init.fetchAttempts ?? 3,
    requestTimeout: init.requestTimeout ?? 5_000,
    clockSkew: init.clockSkew ?? 60_000,
    maxCachedLookups: init.maxCachedLookups ?? 256,
    maxCachedRoutes: init.maxCachedRoutes ?? 1_024,
    maxCacheBytes: init.maxCacheBytes ?? 8_388_608,
    maxResultsPerLookup: init.maxResultsPerLookup ?? 256,
    maxCardsPerProvider: init.maxCardsPerProvider ?? 64,
    maxHistory: init.maxHistory ?? 4_096,
    gossip: init.gossip === false ? false : resolveGossipOptions(init.gossip ?? {}),
    logPrefix: init.logPrefix ?? 'ioa:interconnect'
  }
  for (const key of ['cardTtl', 'cacheTtl', 'fetchConcurrency', 'announceConcurrency', 'requestTimeout', 'clockSkew'] as const) {
    const v = opts[key]
    if (!Number.isFinite(v) || v < 0 || (key !== 'cacheTtl' && key !== 'clockSkew' && v === 0)) {
    throw new BadRequestError(`Invalid interconnect option ${key}=${v}`)
    }
  }
  for (const key of ['maxCachedLookups', 'maxCachedRoutes', 'maxCacheBytes', 'maxResultsPerLookup', 'maxHistory'] as const) {
    const v = opts[key]
    if (!Number.isInteger(v) || v < 1) throw new BadRequestError(`Invalid interconnect option ${key}=${v}`)
  }
  if (!Number.isInteger(opts.fetchAttempts) || opts.fetchAttempts < 1 || opts.fetchAttempts > MAX_FETCH_ATTEMPTS) {
    throw new BadRequestError(`Invalid interconnect option fetchAttempts=${opts.fetchAttempts} (1-${MAX_FETCH_ATTEMPTS})`)
  }
  const perProvider = opts.maxCardsPerProvider
  if (!Number.isInteger(perProvider) || perProvider < 1 || perProvider > MAX_CARDS_PER_LIST) {
    throw new BadRequestError(`Invalid interconnect option maxCardsPerProvider=${perProvider} (1-${MAX_CARDS_PER_LIST})`)
  }
  return opts
}
