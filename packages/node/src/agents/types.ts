/**
 * The public types of external agents, and the narrow slice of the node an
 * external agent needs ({@link ExternalAgentComponents}).
 */
import type { HostAgentOptions, IoaNode } from '../ioa-node.js'
import type { TaskService, TeamService } from '@ioa/collab'
import type { HostedAgent, Interconnect } from '@ioa/interconnect'

/**
 * What an external agent needs of its node: an `IoaNode` is one; tests may
 * pass stubs. `logger` gives the `ioa:node:agents` log.
 */
export interface ExternalAgentComponents extends Pick<IoaNode, 'host' | 'serve' | 'discover' | 'delegate' | 'logger'> {
  readonly tasks: Pick<TaskService, 'submitAndWait' | 'cancel' | 'unserve'>
  readonly interconnect: Pick<Interconnect, 'unhost'>
  /** Teams, for programs that speak `ioa-agent/2` (without it, they get no invitations and their posts fail with TEAMS_UNAVAILABLE) */
  readonly teams?: Pick<TeamService, 'events' | 'teams' | 'acceptFor' | 'form'>
}

export interface ExternalAgentInit {
  /** The program and its arguments (run without a shell) */
  command: string[]
  /** @default the current directory */
  cwd?: string
  /** Extra environment variables of the program (added to the node's) @default {} */
  env?: Record<string, string>
  /**
   * The agent's card. Skills may be left empty: the program's hello names
   * them. When both name skills, the program must serve every configured one.
   */
  card: Omit<HostAgentOptions, 'handlers' | 'inbox'>
  /** Passed to the program as JSON in IOA_AGENT_OPTIONS and in the welcome message @default {} */
  options?: Record<string, unknown>
  /** The program's stderr lines, and the protocol errors of its stdout (prefixed `protocol error: `) */
  onLog?: (line: string) => void
  /** Events the program reports (`log` messages) */
  onEvent?: (event: string, data: Record<string, unknown>) => void
  /** Aborting it fails a start in progress, or stops the running agent */
  signal?: AbortSignal
  /** Longest line in either direction, in bytes, without the newline @default 1_048_576 */
  maxLineBytes?: number
  /** Time from spawn to the program's hello, ms @default 10_000 */
  startTimeout?: number
  /** Tasks the program runs at once; more fail at once with TOO_MANY_TASKS @default 16 */
  maxConcurrentTasks?: number
  /** Time the program gets to exit after `shutdown`, then again after SIGTERM before SIGKILL, ms @default 2_000 */
  stopGrace?: number
  /** Protocol errors after which the program is killed @default 10 */
  maxProtocolErrors?: number
  /** Calls to other agents pending at once; more are answered TOO_MANY_CALLS @default 16 */
  maxConcurrentCalls?: number
  /** Longest call to another agent (the subtask's deadline is at most this far away), ms @default 300_000 */
  callTimeout?: number
  /** How long a call looks for a provider of its skill, ms @default 10_000 */
  discoveryTimeout?: number
  /** Bytes written to the program and not yet read by it before it is deemed stuck and killed @default 16_777_216 */
  maxPendingWriteBytes?: number
  /** ioa-agent/2: how long an invitation waits for the program's `team-answer` before `inviteDefault` decides, ms @default 5_000 */
  inviteAnswerTimeout?: number
  /** ioa-agent/2: the decision when the program does not answer an invitation in time @default 'decline' */
  inviteDefault?: 'accept' | 'decline'
  /** ioa-agent/2: invitations waiting for the program's answer at once; more are declined BUSY at once @default 8 */
  maxPendingInvites?: number
  /** ioa-agent/2: `team-post`s and `team-form`s in flight at once; more are answered TOO_MANY_POSTS @default 8 */
  maxConcurrentPosts?: number
  /** ioa-agent/2: longest `team-post` (signing, ordering by the sequencer), ms @default 30_000 */
  postTimeout?: number
  /**
   * ioa-agent/2: team messages are written to the program only while less
   * than this many bytes of its input are unread; beyond, the node stops
   * reading the teams' logs for it and resumes where it stopped @default 1_048_576
   */
  maxTeamBacklogBytes?: number
  /** ioa-agent/2: teams whose conversation the program follows at once; invitations beyond are declined BUSY @default 16 */
  maxTeams?: number
  /** ioa-agent/2: longest `team-form` (discovery and invitations), ms @default 60_000 */
  formTimeout?: number
}

export interface ExternalAgent {
  readonly agent: HostedAgent
  readonly pid: number | undefined
  /** Resolves with the exit code when the program exits (null when a signal ended it) */
  readonly exited: Promise<number | null>
  /** The skills served for the program */
  readonly skills: readonly string[]
  /** Protocol errors counted so far */
  readonly protocolErrors: number
  /** Send `shutdown`, wait `stopGrace`, then SIGTERM, then SIGKILL; resolves once the program exited and the agent is unhosted */
  stop(): Promise<void>
}

