/**
 * The stack's own metrics (`ioa_*`, and the OpenTelemetry GenAI durations
 * in their Prometheus form), counted from the events the layers already
 * emit: the executor's task events, the gateway's relay events, the
 * requester's task streams and discovery lookups (spec/management.md 2.3).
 *
 * They are prom-client metrics in the registry libp2p's metrics component
 * writes to: libp2p's `Metrics` groups take one label, and these need two
 * or three (`network` and `skill` and `state`). Every node of a process
 * shares them (see registry.ts); a second node finds them registered.
 */
import { cellCounter } from './cells.js'
import { DURATION_BUCKETS, counter, histogram } from './registry-metrics.js'
import { SkillLabel, codeLabel } from './labels.js'
import type { BoundedLabel } from './labels.js'
import type { CellCounter, CountCell } from './cells.js'
import type { ExecutorEvent, RelayEvent, TaskSnapshot, TaskState } from '@ioa/collab'
import type { Counter, Histogram, Registry } from 'prom-client'

/** Buckets of discovery lookup durations, seconds */
const LOOKUP_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]
/** Buckets of the number of agents a lookup found */
const RESULT_BUCKETS = [0, 1, 2, 5, 10, 20, 50, 100, 256]

/** The task states of spec/collab-tasks.md (the only `state` label values besides `lapsed` and `error`) */
const TASK_STATES: ReadonlySet<string> = new Set<TaskState>(['submitted', 'working', 'input-required', 'auth-required', 'completed', 'failed', 'canceled', 'rejected'])
/** Codes of a delegation chain that did not verify (spec/collab-delegation.md) */
const CHAIN_CODES = new Set(['INVALID_TOKEN', 'TOKEN_EXPIRED', 'TOKEN_NOT_YET_VALID', 'ESCALATION', 'PRINCIPAL_MISMATCH', 'CHAIN_TOO_DEEP', 'REVOKED'])
/** Codes of a request envelope that was refused (spec/collab-tasks.md 2) */
const ENVELOPE_CODES = new Set(['INVALID_ENVELOPE', 'ENVELOPE_EXPIRED', 'REPLAY', 'INVALID_SIGNATURE'])

export interface IoaMetricsInit {
  /** The registry to record in (libp2p's metrics component's) */
  registry: Registry
  /**
   * Which network this node is in: `public`, or `domain` for a gateway's
   * inner node (the `network` label)
   *
   * @default 'public'
   */
  network?: string
  /** Is this skill hosted on the node? (the only skills a `skill` label names for served tasks) */
  hosted: (skill: string) => boolean
  /**
   * Distinct skills of tasks this node submits that keep their name in the
   * `skill` label (they are chosen by the node's own code); the rest are `other`
   *
   * @default 64
   */
  maxSubmittedSkills?: number
  /**
   * Distinct error codes kept per `code` label; the rest are `other`
   *
   * @default 64
   */
  maxCodes?: number
}

/** What a requester's stream of one task came to: the task's last state, its lease lapsed, or the stream failed */
export type SubmittedOutcome = TaskState | 'lapsed' | 'error'

/** The metrics of one node (its network), recorded in the process's registry */
export class IoaMetrics {
  readonly network: string
  private readonly skills: SkillLabel
  private readonly codes: BoundedLabel
  // the metrics of every task are counted in cells (cells.ts), looked up once per label set
  private readonly served: CellCounter
  private readonly submitted: CellCounter
  private readonly refused: Counter
  private readonly chainsVerified: CountCell
  private readonly chainsRejected: Counter
  private readonly envelopesRefused: Counter
  private readonly invokeDuration: Histogram
  /** Cells by skill and state (served, submitted) or side and skill (durations) */
  private readonly cells = new Map<string, CountCell>()
  /** prom-client's bound children of the duration histogram, by side and skill */
  private readonly durations = new Map<string, { observe: (v: number) => void }>()
  private readonly relays: Counter
  private readonly relayRefusals: Counter
  private readonly lapsed: Counter
  private readonly lookups: Counter
  private readonly lookupDuration: Histogram
  private readonly lookupResults: Histogram

  constructor (init: IoaMetricsInit) {
    const r = init.registry
    this.network = init.network ?? 'public'
    this.skills = new SkillLabel(init.hosted, init.maxSubmittedSkills ?? 64)
    this.codes = codeLabel(init.maxCodes ?? 64)
    this.served = cellCounter(r, 'ioa_tasks_served_total', 'Tasks the agents hosted here ran, by the state they reached (working when a handler started)', ['network', 'skill', 'state'])
    this.submitted = cellCounter(r, 'ioa_tasks_submitted_total', 'Tasks this node submitted, by how their stream ended', ['network', 'skill', 'state'])
    this.refused = counter(r, 'ioa_tasks_refused_total', 'Requests refused before any handler ran, by error code', ['network', 'code'])
    this.chainsVerified = cellCounter(r, 'ioa_delegation_chains_verified_total', 'Delegation chains of served requests that verified', ['network']).cell({ network: this.network })
    this.chainsRejected = counter(r, 'ioa_delegation_chains_rejected_total', 'Delegation chains of requests that did not verify, by error code', ['network', 'code'])
    this.envelopesRefused = counter(r, 'ioa_envelopes_refused_total', 'Request envelopes refused, by error code', ['network', 'code'])
    this.invokeDuration = histogram(r, 'gen_ai_invoke_agent_duration_seconds', 'Duration of agent invocations (gen_ai.invoke_agent.duration): side=server for tasks served here, client for tasks submitted', ['network', 'side', 'skill'], DURATION_BUCKETS)
    this.relays = counter(r, 'ioa_gateway_relays_total', 'Task submits the domain gateway relayed, by what the executor said (accepted, refused)', ['network', 'outcome'])
    this.relayRefusals = counter(r, 'ioa_gateway_refusals_total', 'Task submits the domain gateway refused, by reason (error code)', ['network', 'reason'])
    this.lapsed = counter(r, 'ioa_leases_lapsed_total', 'Submitted tasks whose executor lease lapsed', ['network'])
    this.lookups = counter(r, 'ioa_discovery_lookups_total', 'Discovery lookups, by outcome (found, empty, failed)', ['network', 'outcome'])
    this.lookupDuration = histogram(r, 'ioa_discovery_lookup_duration_seconds', 'Duration of discovery lookups', ['network'], LOOKUP_BUCKETS)
    this.lookupResults = histogram(r, 'ioa_discovery_lookup_results', 'Agents a discovery lookup found', ['network'], RESULT_BUCKETS)
  }

  /** The cell of `metric` for the two varying labels (`network` is the node's) */
  private count (metric: CellCounter, skill: string, state: string): CountCell {
    const k = `c\u0000${metric.metricName}\u0000${skill}\u0000${state}`
    let c = this.cells.get(k) as CountCell | undefined
    if (c == null) {
      c = metric.cell({ network: this.network, skill, state })
      this.cells.set(k, c)
    }
    return c
  }

  /** The duration cell of `side` and `skill` */
  private duration (side: 'server' | 'client', skill: string): { observe: (v: number) => void } {
    const k = `${side}\u0000${skill}`
    let c = this.durations.get(k)
    if (c == null) {
      c = this.invokeDuration.labels({ network: this.network, side, skill })
      this.durations.set(k, c)
    }
    return c
  }

  /** Count an executor event (`TaskServiceInit.onEvent`, `node.events.onTask`) */
  task (e: ExecutorEvent): void {
    const network = this.network
    switch (e.type) {
      case 'task-started':
        this.chainsVerified.inc()
        this.count(this.served, this.skills.served(e.skill), 'working').inc()
        return
      case 'task-completed':
      case 'task-failed': {
        const skill = this.skills.served(e.skill)
        this.count(this.served, skill, e.type === 'task-completed' ? 'completed' : e.state).inc()
        this.duration('server', skill).observe(e.duration / 1000)
        return
      }
      case 'task-refused': {
        const code = this.codes.of(e.code)
        this.refused.inc({ network, code })
        if (CHAIN_CODES.has(e.code)) this.chainsRejected.inc({ network, code })
        else if (ENVELOPE_CODES.has(e.code)) this.envelopesRefused.inc({ network, code })
      }
    }
  }

  /** Count a gateway relay event (`node.events.onGateway`) */
  relay (e: RelayEvent): void {
    if (e.type === 'relayed') this.relays.inc({ network: this.network, outcome: e.refused != null ? 'refused' : 'accepted' })
    else this.relayRefusals.inc({ network: this.network, reason: this.codes.of(e.code) })
  }

  /** Count a submitted task's end: how its stream ended, after `seconds` */
  submit (skill: string, outcome: SubmittedOutcome, seconds: number): void {
    const label = this.skills.asked(skill)
    this.count(this.submitted, label, outcome).inc()
    this.duration('client', label).observe(seconds)
    if (outcome === 'lapsed') this.lapsed.inc({ network: this.network })
  }

  /** Count a discovery lookup: its duration and how many agents it found (undefined: it failed) */
  lookup (seconds: number, results: number | undefined): void {
    const network = this.network
    this.lookupDuration.observe({ network }, seconds)
    if (results == null) {
      this.lookups.inc({ network, outcome: 'failed' })
      return
    }
    this.lookups.inc({ network, outcome: results > 0 ? 'found' : 'empty' })
    this.lookupResults.observe({ network }, results)
  }
}

/** The outcome of a task stream that ended with this snapshot (a state outside the model's is `error`) */
export function outcomeOf (task: TaskSnapshot | undefined): SubmittedOutcome {
  const state = task?.state
  return state != null && TASK_STATES.has(state) ? state : 'error'
}
