/**
 * The public types of assignments as tasks (`createAssignmentService`,
 * spec/teams.md 10.6): options, what `assign` takes and gives back, and the
 * service.
 */
import type { Team, TeamService } from '../api.js'
import type { ServeOptions, SkillHandler, TaskService } from '../../tasks/api.js'
import type { Did, Interconnect } from '@ioa/interconnect'
import type { AbortOptions, ComponentLogger } from '@libp2p/interface'

/** Options of the assignment service; every limit of spec/teams.md 10.6 and section 9 */
export interface AssignmentsInit {
  /** Reassignments of one task after its first assignee went silent, left or refused @default 2 */
  maxReassignments?: number
  /** Open assignments this node runs as assigner, per team @default 64 */
  maxOpenPerTeam?: number
  /** Open assignments this node runs as assigner, per assignee (per team) @default 8 */
  maxOpenPerAssignee?: number
  /** Team tasks an assignee's node serves at once, per team @default 16 */
  maxServedPerTeam?: number
  /** Least time between two `progress` posts of one task (more are dropped, and logged), ms @default 1_000 */
  progressInterval?: number
  /** Assignee: how long a task waits for its `assign` entry to reach this node's log, ms @default 10_000 */
  entryTimeout?: number
  /** Assigner: how long after the task ended through the task protocol the `result` entry may take before the assigner posts `LEASE_LAPSED`, ms @default 10_000 */
  resultTimeout?: number
  /** Longest time one assignee holds a task before it is taken back and reassigned, ms @default until the team's deadline */
  attemptTimeout?: number
  /** Logger name @default 'ioa:collab:teams:assign' */
  logName?: string
}

/** The numeric options, all set (`attemptTimeout`: 0 = none) */
export type AssignmentLimits = Required<Omit<AssignmentsInit, 'logName'>>

export const ASSIGNMENT_DEFAULTS: Readonly<AssignmentLimits> = Object.freeze({
  maxReassignments: 2,
  maxOpenPerTeam: 64,
  maxOpenPerAssignee: 8,
  maxServedPerTeam: 16,
  progressInterval: 1_000,
  entryTimeout: 10_000,
  resultTimeout: 10_000,
  attemptTimeout: 0
})

/** The parts of a node the assignment service uses */
export interface AssignmentComponents {
  logger: ComponentLogger
  teams: Pick<TeamService, 'team' | 'events'>
  tasks: TaskService
  /** Finds the members that hold a skill, for reassignment (their cards, through discovery) */
  interconnect: Pick<Interconnect, 'discoverAll'>
}

export interface AssignOptions extends AbortOptions {
  /** `sync`: the conversation waits for the result (flow machine); `async`: it goes on @default 'sync' */
  mode?: 'sync' | 'async'
  assignee: Did
  /** The capability the assignee runs */
  skill: string
  input?: Record<string, unknown>
  /** The task id (collab-tasks.md 8) @default a random one */
  task?: string
  /** Members to reassign to, in order, when the assignee is silent @default the members whose card offers the skill */
  candidates?: Did[]
  /** Overrides `attemptTimeout` for this assignment, ms */
  attemptTimeout?: number
}

/** How a task ended, as its `result` entry says */
export interface ClosedAssignment {
  task: string
  /** seq of the `result` entry */
  seq: number
  /** A terminal task state (`completed`, `failed`, `canceled`, `rejected`) */
  state: string
  /** The assignee that had the task last */
  assignee: Did
  output?: Record<string, unknown>
  error?: Record<string, unknown>
}

/** How an assignment ended: its `result` entry, and who was tried */
export interface AssignmentOutcome extends ClosedAssignment {
  /** Assignees tried, in order */
  assignees: Did[]
}

/** A running assignment */
export interface Assignment {
  readonly task: string
  /** seq of the `assign` entry */
  readonly seq: number
  /** Resolves with the `result` entry, whoever posted it; never rejects */
  readonly done: Promise<AssignmentOutcome>
}

export interface AssignmentService {
  /**
   * Post `assign` and run the task at the assignee under a token this
   * member derives from its team chain (narrowed to `skill`, to the
   * assignee, to the team's deadline); reassign or post `LEASE_LAPSED` when
   * the assignee is silent. Resolves once the `assign` entry is ordered.
   */
  assign(team: Team, options: AssignOptions): Promise<Assignment>
  /** Post `pause { tasks }` and resolve when every listed task has its `result` entry */
  pause(team: Team, tasks: string[], options?: AbortOptions): Promise<AssignmentOutcome[]>
  /** The `result` entry of a task, when it comes */
  result(team: Team, task: string, options?: AbortOptions): Promise<AssignmentOutcome>
  /**
   * Serve a skill so that tasks that name a team assignment post their
   * `progress` and `result` to the team as the assignee (other tasks run as
   * with `tasks.serve`)
   */
  serve(agent: Did, skill: string, handler: SkillHandler, options?: ServeOptions): Promise<void>
  /**
   * Convener: watch the team's open tasks; one whose assigner is no longer a
   * member gets the `LEASE_LAPSED` result from the convener after
   * `resultTimeout` (until the team concludes or the signal aborts)
   */
  supervise(team: Team, options?: AbortOptions): void
  /** The task service with `serve` doing the same (give it to an orchestrator to serve sub-goals of teams) */
  readonly tasks: TaskService
  /** Stop the runners (tasks running at assignees are canceled) */
  stop(): Promise<void>
}
