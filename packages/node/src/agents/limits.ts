/**
 * The limits of an external agent (`spec/node-agents.md`, "Limits") and
 * their checking.
 */

/** Default limits of an external agent (`spec/node-agents.md`, "Limits") */
export const EXTERNAL_AGENT_DEFAULTS = Object.freeze({
  maxLineBytes: 1_048_576,
  startTimeout: 10_000,
  maxConcurrentTasks: 16,
  stopGrace: 2_000,
  maxProtocolErrors: 10,
  maxConcurrentCalls: 16,
  callTimeout: 300_000,
  discoveryTimeout: 10_000,
  maxPendingWriteBytes: 16_777_216,
  // ioa-agent/2 (teams)
  inviteAnswerTimeout: 5_000,
  maxPendingInvites: 8,
  maxConcurrentPosts: 8,
  postTimeout: 30_000,
  maxTeamBacklogBytes: 1_048_576,
  maxTeams: 16,
  formTimeout: 60_000
})

/** Every limit, set */
export type Limits = { readonly [K in keyof typeof EXTERNAL_AGENT_DEFAULTS]: number }

/** The limits of an init (its own, else the defaults); a limit that is not a positive integer throws a RangeError */
export function limitsOf (init: Partial<Record<keyof Limits, unknown>>): Limits {
  const out: Record<string, number> = {}
  for (const [key, def] of Object.entries(EXTERNAL_AGENT_DEFAULTS)) {
    const v = (init as Record<string, unknown>)[key] ?? def
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1) throw new RangeError(`${key} must be a positive integer`)
    out[key] = v
  }
  return out as Limits
}
