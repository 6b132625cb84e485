/**
 * Ranking feedback from finished tasks (spec/interconnect.md 7.1): what a
 * requester learned of a remote agent from one task it submitted or
 * followed, as an outcome for the interconnect's record of that agent
 * (`Interconnect.observe`). Only what the agent is answerable for counts:
 * a completed task is a success; a task that failed on the executor (its
 * handler threw, the deadline passed, the executor restarted), a lease that
 * lapsed and an agent no serving peer of which answered are failures.
 * Refusals that are the caller's doing (policy, authorization, revocation,
 * replay, fair-share quota, a malformed request) and tasks the caller
 * canceled, abandoned or aborted count neither way.
 */
import { countsAgainstAgent } from '@ioa/transport'
import type { TaskState } from './model.js'
import type { Outcome } from '@ioa/interconnect'

/**
 * Codes of a `failed` task that the caller caused: the budget it gave did
 * not cover the work
 */
const CALLER_FAILURES = new Set(['BUDGET_EXCEEDED'])


/**
 * The outcome of a task that reached a terminal state, or undefined when it
 * says nothing about the agent. A task's duration is not a round-trip
 * sample (it measures the work asked for, not the path), so none is given.
 */
export function finishedOutcome (state: TaskState, errorCode?: string): Outcome | undefined {
  if (state === 'completed') return { ok: true }
  if (state === 'failed') return errorCode != null && CALLER_FAILURES.has(errorCode) ? undefined : { ok: false }
  // rejected: refused by policy or authorization; canceled: by the caller, or abandoned by it
  return undefined
}

/**
 * The outcome of a stream that ended with `code` before the task did (before
 * any event, after every serving peer was tried), or undefined for a refusal:
 * a failure when the code says the agent could not be reached or did not
 * answer (the transport's retry table)
 */
export function unansweredOutcome (code: string | undefined): Outcome | undefined {
  return code != null && countsAgainstAgent(code) ? { ok: false } : undefined
}
