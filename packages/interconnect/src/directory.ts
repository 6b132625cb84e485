/**
 * The directory side of the interconnect: the agents hosted here, their
 * signed cards (re-signed at half-life and when the node's addresses change)
 * and the DHT records that publish them (through the `Announcer`).
 */
import { agentCid, assertCapability, capabilityCid, capabilityPrefixes } from './capability.js'
import { CARD_LIMITS, signCard } from './card.js'
import { DuplicateAgentError, UnknownAgentError } from './errors.js'
import { isDid } from './identity.js'
import type { Announcer } from './announcer.js'
import type { SignedCard, SkillInit } from './card.js'
import type { InterconnectComponents } from './components.js'
import type { AgentKeyStore, Did, Identity } from './identity.js'
import type { Defaults } from './options.js'
import type { HostAgentInit, HostedAgent } from './types.js'
import type { AbortOptions, Logger } from '@libp2p/interface'

export interface Hosted extends HostedAgent {
  card: SignedCard
  init: HostAgentInit
  /** Keys of the DHT records announced for it */
  cids: string[]
}

export interface DirectoryInit {
  components: Pick<InterconnectComponents, 'peerId' | 'addresses'>
  keys: AgentKeyStore
  opts: Defaults
  announcer: Announcer
  log: Logger
  /** Outer peer ids of this domain's gateways, listed on cards */
  gateways: string[]
  /** Cards carry no addresses */
  private: boolean
  /** Called when the set of hosted agents changes */
  onChange(): void
}

export class Directory {
  /** Hosted agents by id */
  readonly hosted = new Map<Did, Hosted>()
  private readonly hostedByKey = new Map<string, Did>()
  private readonly reserved = new Set<string>()
  private readonly init: DirectoryInit
  private readonly log: Logger

  constructor (init: DirectoryInit) {
    this.init = init
    this.log = init.log
  }

  get (did: Did): Hosted | undefined {
    return this.hosted.get(did)
  }

  has (did: Did): boolean {
    return this.hosted.has(did)
  }

  agents (): HostedAgent[] {
    return [...this.hosted.values()]
  }

  /**
   * Sign a card of a hosted agent: its full card, or (`hidden`) an export
   * card with the chosen skills, the given gateways and no addresses
   */
  async makeCard (identity: Identity, init: HostAgentInit, skills?: SkillInit[], gateways?: string[], hidden = false): Promise<SignedCard> {
    const now = Date.now()
    const gw = gateways ?? this.init.gateways
    const { components, opts } = this.init
    const card = {
      v: 1 as const,
      id: identity.did,
      name: init.name,
      description: init.description ?? '',
      domain: init.domain ?? opts.domain,
      version: init.version ?? '1.0.0',
      skills: skills ?? init.skills,
      peer: components.peerId.toString(),
      addrs: this.init.private || hidden ? [] : components.addresses.getMultiaddrs().slice(0, CARD_LIMITS.maxAddrs).map(a => a.toString()),
      ...(gw.length > 0 ? { gateways: gw } : {}),
      availability: init.availability ?? { mode: 'always' as const },
      issuedAt: now,
      expiresAt: now + opts.cardTtl
    }
    return signCard(card, identity)
  }

  async host (init: HostAgentInit, options?: AbortOptions): Promise<HostedAgent> {
    if (this.hostedByKey.has(init.key) || this.reserved.has(init.key)) {
      this.log('refused to host key "%s": already hosted', init.key)
      throw new DuplicateAgentError(`An agent with key "${init.key}" is already hosted`)
    }
    // validate before touching the key store
    for (const s of init.skills ?? []) assertCapability(s.id)
    this.reserved.add(init.key)
    let identity: Identity & { privateKey: unknown }
    let card: SignedCard
    try {
      identity = await this.init.keys.loadOrCreate(init.key, options)
      if (this.hosted.has(identity.did)) {
        this.log('refused to host %s: already hosted', identity.did)
        throw new DuplicateAgentError(`Agent ${identity.did} is already hosted`)
      }
      card = await this.makeCard(identity, init)
    } finally {
      this.reserved.delete(init.key)
    }
    const cids: string[] = []
    const names = new Set<string>()
    for (const s of card.card.skills) {
      for (const p of capabilityPrefixes(s.id)) names.add(p)
    }
    const agent: Hosted = { did: identity.did, identity, card, init, cids }
    this.hosted.set(identity.did, agent)
    this.hostedByKey.set(init.key, identity.did)
    this.init.onChange()
    this.log('hosting %s (%s) with %d skills', identity.did, init.name, card.card.skills.length)

    if (this.init.opts.publish) {
      for (const name of names) {
        cids.push(`cap:${name}`)
        await this.announce(name)
      }
      if (this.init.opts.announceAgentIds) {
        cids.push(`agent:${identity.did}`)
        this.init.announcer.provide(`agent:${identity.did}`, await agentCid(identity.did))
      }
    }
    return agent
  }

  async unhost (did: Did): Promise<void> {
    const agent = this.hosted.get(did)
    if (agent == null) {
      this.log('cannot unhost %s: not hosted here', did)
      throw new UnknownAgentError(`Agent ${did} is not hosted here`)
    }
    this.hosted.delete(did)
    this.hostedByKey.delete(agent.init.key)
    this.init.onChange()
    this.log('stopped hosting %s', did)
    for (const key of agent.cids) {
      await this.init.announcer.unprovide(key)
    }
  }

  /** Re-sign every hosted agent's card (at half-life, or new addresses) */
  async resignAll (): Promise<void> {
    for (const agent of this.hosted.values()) {
      try {
        agent.card = await this.makeCard(agent.identity, agent.init)
      } catch (err: any) {
        // keep the previous card; the next refresh tries again
        this.log.error('could not re-sign the card of %s (the previous one is kept): %s', agent.did, err?.message ?? err)
      }
    }
  }

  // ---- DHT records --------------------------------------------------------

  async announce (capability: string): Promise<void> {
    this.init.announcer.provide(`cap:${capability}`, await capabilityCid(capability))
  }

  async withdraw (capability: string): Promise<void> {
    await this.init.announcer.unprovide(`cap:${capability}`)
  }

  async announceAgent (did: Did): Promise<void> {
    if (!isDid(did)) throw new UnknownAgentError(`Not an agent id: ${String(did).slice(0, 80)}`)
    this.init.announcer.provide(`agent:${did}`, await agentCid(did))
  }

  async withdrawAgent (did: Did): Promise<void> {
    await this.init.announcer.unprovide(`agent:${did}`)
  }
}
