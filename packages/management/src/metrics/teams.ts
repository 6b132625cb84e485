/**
 * Conversation metrics: the messages of the teams a node holds, by type,
 * counted from the team service's events (a reader per team, which only
 * counts, so it never falls behind).
 */
import { OTHER } from './labels.js'
import { counter } from './registry-metrics.js'
import type { TeamEvent, TeamMessage, TeamServiceEvent } from '@ioa/collab'
import type { Logger } from '@libp2p/interface'
import type { Counter, Registry } from 'prom-client'

/** The message types of spec/teams.md (the `type` label's values besides `other`) */
const MESSAGE_TYPES: ReadonlySet<string> = new Set(['discuss', 'propose', 'vote', 'vote-result', 'assign', 'progress', 'result', 'pause', 'conclude', 'subteam', 'leave', 'remove', 'admit', 'roster', 'epoch', 'turn'])

/** The part of a team service whose conversations are counted */
export interface MeteredTeams {
  events(options?: { signal?: AbortSignal }): AsyncGenerator<TeamServiceEvent, void, undefined>
  teams(): Array<{ readonly id: string, events(options?: { signal?: AbortSignal }): AsyncGenerator<TeamEvent, void, undefined> }>
}

/** Call `onMessage` with each message ordered in a team `teams` holds, now and later, until `signal` aborts */
export function followMessages (teams: MeteredTeams, signal: AbortSignal, log: Logger, onMessage: (team: string, message: TeamMessage) => void): void {
  const followed = new Set<string>()
  const follow = (team: { readonly id: string, events(options?: { signal?: AbortSignal }): AsyncGenerator<TeamEvent, void, undefined> }): void => {
    if (followed.has(team.id)) return
    followed.add(team.id)
    void (async () => {
      for await (const e of team.events({ signal })) {
        if (e.type === 'message') onMessage(team.id, e.message)
      }
    })().catch((err: unknown) => {
      if (!signal.aborted) log('no longer following the messages of team %s: %s', team.id, (err as Error)?.message ?? err)
    }).finally(() => { followed.delete(team.id) })
  }
  for (const team of teams.teams()) follow(team)
  void (async () => {
    for await (const e of teams.events({ signal })) {
      if (e.type === 'team') follow(e.team)
    }
  })().catch((err: unknown) => {
    if (!signal.aborted) log.error('no longer following the teams\' conversations: %e', err)
  })
}

/** Count the messages of every team `teams` holds, now and later; returns a function that stops counting */
export function meterConversations (registry: Registry, network: string, teams: MeteredTeams, log: Logger): () => void {
  const messages: Counter = counter(registry, 'ioa_conversation_messages_total', 'Messages ordered in the conversations of the teams this node holds, by type', ['network', 'type'])
  const stop = new AbortController()
  followMessages(teams, stop.signal, log, (_team, message) => {
    const type = message.payload.type
    messages.inc({ network, type: MESSAGE_TYPES.has(type) ? type : OTHER })
  })
  return () => { stop.abort() }
}
