/**
 * The numeric options of an orchestrator (`OrchestratorInit`), resolved
 * against their defaults and range-checked once, when it is created
 */
import { numberOption } from '../options.js'
import { PLAN_LIMITS } from '../planning/plan.js'
import type { BackoffInit, OrchestratorInit } from './api.js'

export interface OrchestratorSettings {
  retries: number
  backoff: Required<BackoffInit>
  maxDepth: number
  concurrency: number
  discoveryTimeout: number
  maxAttemptsPerRound: number
  confirmTimeout: number
  tokenTtl: number
}

/** The settings of `init`: each option or its `@default`; a RangeError names an option out of range */
export function orchestratorSettings (init: OrchestratorInit): OrchestratorSettings {
  const num = (name: string, v: number, min: number, max?: number): number => numberOption(name, v, { min, ...(max != null ? { max } : {}) })
  return {
    retries: Math.floor(num('retries', init.retries ?? 2, 0, 100)),
    backoff: {
      initial: num('backoff.initial', init.backoff?.initial ?? 200, 0),
      max: num('backoff.max', init.backoff?.max ?? 2_000, 0),
      factor: num('backoff.factor', init.backoff?.factor ?? 2, 1)
    },
    maxDepth: Math.floor(num('maxDepth', init.maxDepth ?? 3, 0, PLAN_LIMITS.maxGoalDepth)),
    concurrency: Math.floor(num('concurrency', init.concurrency ?? 16, 1)),
    discoveryTimeout: num('discoveryTimeout', init.discoveryTimeout ?? 5_000, 1),
    maxAttemptsPerRound: Math.floor(num('maxAttemptsPerRound', init.maxAttemptsPerRound ?? 3, 1)),
    confirmTimeout: num('confirmTimeout', init.confirmTimeout ?? 3_000, 1),
    tokenTtl: num('tokenTtl', init.tokenTtl ?? 3_600_000, 1_000)
  }
}
