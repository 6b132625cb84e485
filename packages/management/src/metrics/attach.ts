/**
 * Metrics for one node, counted in one place: the executor's and the
 * gateway's events, the task service's submits, the interconnect's lookups.
 */
import { IoaMetrics } from './ioa-metrics.js'
import type { SubmittedOutcome } from './ioa-metrics.js'
import { meterLookups, meterSubmits } from './metered.js'
import { OrchestratorMetrics } from './orchestration.js'
import { meterConversations } from './teams.js'
import type { MeteredOrchestrator } from './orchestration.js'
import type { MeteredTeams } from './teams.js'
import type { DiscoveringService, SubmittingService } from './metered.js'
import type { ExecutorEvent, RelayEvent } from '@ioa/collab'
import type { Logger } from '@libp2p/interface'
import type { Registry } from 'prom-client'

/** The parts of a node whose work is counted */
export interface MeteredNode {
  /** The agents hosted here: their skills are the `skill` label's values */
  readonly interconnect: DiscoveringService & { agents(): Array<{ card: { card: { skills: Array<{ id: string }> } } }> }
  readonly tasks: SubmittingService
  readonly events: {
    onTask(listener: (event: ExecutorEvent) => void): () => void
    onGateway(listener: (event: RelayEvent) => void): () => void
  }
  /** A domain gateway's inner interconnect: its lookups count with `network="domain"` */
  readonly gatewayInner?: DiscoveringService
  /** The node's team service: the messages of its teams' conversations are counted */
  readonly teams?: MeteredTeams
}

export interface AttachMetricsInit {
  registry: Registry
  /** Where a reader of the team events that fails says so */
  log: Logger
  /** @default 'public' */
  network?: string
}

/** What `attachMetrics` returns */
export interface AttachedMetrics {
  /** Count the runs of an orchestrator of the node (steps, failovers, `gen_ai_workflow_duration_seconds`) */
  orchestrator(o: MeteredOrchestrator): void
  /** Called as each task submitted from this node ends (the dashboard's timeline); returns a function that removes the listener */
  onSubmitted(listener: (e: SubmittedTask) => void): () => void
  /** Stop counting the node's events */
  detach(): void
}

/** A task submitted from this node that ended, as counted */
export interface SubmittedTask {
  skill: string
  /** How its stream ended: a task state, `lapsed` or `error` */
  outcome: SubmittedOutcome
  /** ms from the submit to the stream's end */
  duration: number
  /** When it ended, ms since the epoch */
  at: number
}

/** Count a node's tasks, relays and lookups in `registry` */
export function attachMetrics (node: MeteredNode, init: AttachMetricsInit): AttachedMetrics {
  const hosted = (skill: string): boolean => node.interconnect.agents().some(a => a.card.card.skills.some(s => s.id === skill))
  const m = new IoaMetrics({ registry: init.registry, network: init.network, hosted })
  const submitted = new Set<(e: SubmittedTask) => void>()
  meterSubmits({
    submit: (skill, outcome, seconds) => {
      m.submit(skill, outcome, seconds)
      for (const l of submitted) l({ skill, outcome, duration: seconds * 1000, at: Date.now() })
    }
  }, node.tasks)
  meterLookups(m, node.interconnect)
  if (node.gatewayInner != null) meterLookups(new IoaMetrics({ registry: init.registry, network: 'domain', hosted: () => false }), node.gatewayInner)
  const offTask = node.events.onTask(e => { m.task(e) })
  const offGateway = node.events.onGateway(e => { m.relay(e) })
  const runs = new OrchestratorMetrics(init.registry, m.network)
  const offTeams = node.teams != null ? meterConversations(init.registry, m.network, node.teams, init.log) : undefined
  return {
    orchestrator: (o) => { runs.meter(o) },
    onSubmitted: (l) => {
      submitted.add(l)
      return () => { submitted.delete(l) }
    },
    detach: () => {
      offTask()
      offGateway()
      offTeams?.()
    }
  }
}
