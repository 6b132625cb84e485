/**
 * Cards signed as if the clock read another time: an agent's old card, or a
 * rogue's card from the future, for ranking tests over real nodes.
 */
import { capabilityPrefixes } from '@ioa/interconnect'
import { vi } from 'vitest'
import type { HostAgentInit, HostedAgent, Interconnect } from '@ioa/interconnect'

/**
 * Host an agent whose card is signed as if the clock read `offset` ms from
 * now, then announce it. The interconnect must not publish by itself
 * (`publish: false`), so the clock is moved only while the card is signed,
 * not while the DHT is written.
 */
export async function hostAt (ic: Interconnect, offset: number, init: HostAgentInit): Promise<HostedAgent> {
  const realNow = Date.now.bind(Date)
  const spy = vi.spyOn(Date, 'now').mockImplementation(() => realNow() + offset)
  let agent: HostedAgent
  try {
    agent = await ic.host(init)
  } finally {
    spy.mockRestore()
  }
  const names = new Set(init.skills.flatMap(s => capabilityPrefixes(s.id)))
  for (const name of names) await ic.announce(name)
  await ic.announceAgent(agent.did)
  return agent
}
