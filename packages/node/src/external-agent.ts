/**
 * External agents: programs in any language that join a node over the local
 * agent protocol `ioa-agent/1` or `ioa-agent/2` (JSON lines on stdio). The
 * node hosts the agent (its key, its signed card, its announcements) and
 * serves its skills through the task protocol; each task is handed to the
 * program and its answer handed back. In version 2 the program also takes
 * part in its agent's teams. Spec: `spec/node-agents.md`.
 *
 * The pieces live in `agents/`: the protocol codec and version negotiation
 * (`protocol.ts`), the bounded line splitter, the limits, the process
 * supervisor (`process.ts`), the call bridge to other agents (`calls.ts`)
 * and the team bridge of version 2 (`teams.ts`).
 */
import { limitsOf } from './agents/limits.js'
import type { ExternalAgent, ExternalAgentComponents, ExternalAgentInit } from './agents/types.js'

export { AGENT_PROTOCOL } from './agents/protocol.js'
export { EXTERNAL_AGENT_DEFAULTS } from './agents/limits.js'
export type { ExternalAgent, ExternalAgentComponents, ExternalAgentInit } from './agents/types.js'
export {
  AgentExitedError, AgentProtocolError, AgentStartError, AgentStartTimeoutError, AgentTaskError, ExternalAgentError,
  LineTooLongError, SkillMismatchError, TooManyTasksError, UnsupportedProtocolError
} from './errors.js'

/**
 * Start an external agent program and host it: spawn `command` (no shell),
 * wait for its hello, host the agent with the card (skills from the card or
 * the hello), send the welcome and serve its skills, each task forwarded to
 * the program. Rejects with a typed error (AGENT_START_FAILED,
 * AGENT_START_TIMEOUT, UNSUPPORTED_PROTOCOL, SKILL_MISMATCH,
 * AGENT_PROTOCOL_ERROR, or the host's error) after killing the program.
 */
export async function startExternalAgent (node: ExternalAgentComponents, init: ExternalAgentInit): Promise<ExternalAgent> {
  if (init == null || typeof init !== 'object') throw new TypeError('startExternalAgent needs an init object')
  const { command } = init
  if (!Array.isArray(command) || command.length === 0 || command.some(a => typeof a !== 'string') || command[0] === '') {
    throw new TypeError('command must be a non-empty list of strings')
  }
  if (init.card == null || typeof init.card !== 'object') throw new TypeError('card is required')
  if (init.inviteDefault != null && init.inviteDefault !== 'accept' && init.inviteDefault !== 'decline') throw new TypeError('inviteDefault must be "accept" or "decline"')
  const limits = limitsOf(init)
  // the process supervisor (child processes, the call and team bridges) loads with the first external agent, not at import
  const { ExternalAgentProcess } = await import('./agents/process.js')
  const agent = new ExternalAgentProcess(node, init, limits)
  await agent.start()
  return agent
}
