/**
 * External agents: programs in any language that join a node over the local
 * agent protocol (JSON lines on stdio). Spec: `spec/node-agents.md`.
 *
 * PLACEHOLDER — being implemented; the signature is fixed.
 */
import type { HostAgentOptions, IoaNode } from './ioa-node.js'
import type { HostedAgent } from '@ioa/interconnect'

export interface ExternalAgentInit {
  /** The program and its arguments */
  command: string[]
  /** @default the current directory */
  cwd?: string
  /** Extra environment variables of the program @default {} */
  env?: Record<string, string>
  /** The agent's card (skills may be left empty: the program's hello names them) */
  card: Omit<HostAgentOptions, 'handlers' | 'inbox'>
  /** Passed to the program as JSON in IOA_AGENT_OPTIONS and in the welcome message @default {} */
  options?: Record<string, unknown>
  /** Lines the program writes that are not protocol messages, and its stderr */
  onLog?: (line: string) => void
  /** Events the program reports (`log` messages) */
  onEvent?: (event: string, data: Record<string, unknown>) => void
}

export interface ExternalAgent {
  readonly agent: HostedAgent
  readonly pid: number | undefined
  /** Resolves with the exit code when the program exits */
  readonly exited: Promise<number | null>
  stop(): Promise<void>
}

export async function startExternalAgent (_node: IoaNode, _init: ExternalAgentInit): Promise<ExternalAgent> {
  throw new Error('not implemented yet')
}
