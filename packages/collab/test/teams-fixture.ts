/**
 * Fixtures of the team suites: TCP nodes on 127.0.0.1, each with an
 * interconnect, one hosted agent and a team service, all dialled to the
 * first one.
 */
import { createInterconnect } from '@ioa/interconnect'
import { createTransportNode } from '@ioa/transport'
import { MemoryDatastore } from 'datastore-core'
import { until } from '../../../test/util.js'
import { createTeamService } from '../src/teams/index.js'
import type { TeamService, TeamsInit } from '../src/teams/index.js'
import type { HostedAgent, Interconnect } from '@ioa/interconnect'
import type { TransportNode } from '@ioa/transport'
import type { Datastore } from 'interface-datastore'

export interface TeamPeer {
  node: TransportNode
  ic: Interconnect
  agent: HostedAgent
  teams: TeamService
  datastore: Datastore
  /** `{ agent, peer }` for `roles[].candidates` */
  ref: { agent: string, peer: string }
}

/** Fast timers for tests: failover within a few seconds (the machine may be loaded) */
export const FAST: TeamsInit = { heartbeat: 300, ackInterval: 100, sequencerTimeout: 2_000, claimStagger: 500, claimTimeout: 1_000, requestTimeout: 3_000 }

export interface PeerOptions {
  skills?: string[]
  name?: string
  init?: TeamsInit
  datastore?: Datastore
  dial?: TransportNode
}

/** Start one team peer; `closers` gets what stops it */
export async function startTeamPeer (closers: Array<() => Promise<unknown>>, options: PeerOptions = {}): Promise<TeamPeer> {
  const datastore = options.datastore ?? new MemoryDatastore()
  const node = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'], datastore })
  closers.push(async () => node.stop())
  if (options.dial != null) {
    const other = options.dial
    await node.dial(other.getMultiaddrs())
    // the dialled node registers the inbound connection a little later: until then it cannot reach this one
    await until(() => other.getConnections(node.peerId).length > 0 || undefined, { timeout: 10_000, interval: 10, what: 'the inbound connection' })
  }
  const ic = await createInterconnect(node, { requestTimeout: 3_000, datastore })
  closers.push(async () => ic.stop())
  const name = options.name ?? 'agent'
  const agent = await ic.host({ key: name, name, skills: (options.skills ?? ['team.member']).map(id => ({ id })) })
  const teams = createTeamService(ic, { ...FAST, datastore, ...options.init })
  await teams.start()
  closers.push(async () => teams.stop())
  return { node, ic, agent, teams, datastore, ref: { agent: agent.did, peer: node.peerId.toString() } }
}

/** Start `n` peers dialled to the first */
export async function startTeamPeers (closers: Array<() => Promise<unknown>>, n: number, options: (i: number) => PeerOptions = () => ({})): Promise<TeamPeer[]> {
  const first = await startTeamPeer(closers, { name: 'agent-0', ...options(0) })
  const rest = await Promise.all(Array.from({ length: n - 1 }, async (_, i) => await startTeamPeer(closers, { name: `agent-${i + 1}`, dial: first.node, ...options(i + 1) })))
  const all = [first, ...rest]
  // every pair connected, so members reach each other directly
  for (const a of rest) {
    for (const b of rest) {
      if (a !== b && a.node.getConnections(b.node.peerId).length === 0) await a.node.dial(b.node.getMultiaddrs())
    }
  }
  return all
}

/** Wait until every peer holds team `id` with at least `length` entries */
export async function settled (peers: TeamPeer[], id: string, length: number): Promise<void> {
  await until(() => peers.every(p => (p.teams.team(id)?.length ?? 0) >= length) ? true : undefined, { timeout: 20_000, interval: 50, what: `${peers.length} members at ${length} entries` })
}

/** A goal due in an hour */
export function goal (text: string, capabilities: string[]): { text: string, capabilities: string[], deadline: number } {
  return { text, capabilities, deadline: Date.now() + 3_600_000 }
}
