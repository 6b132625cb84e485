/**
 * Speaker and state policies (`spec/teams.md` 10.4): what a policy is told
 * and what it answers. The rule policies are pure functions that every
 * member checks (rules.ts); the others (`llm`, or a policy a node brings)
 * run on the sequencer only, and their decisions are entries of the log.
 */
import type { FlowState } from './state.js'
import type { Trigger } from './rules.js'
import type { Entry, RosterPayload } from '../records.js'
import type { Did } from '@ioa/interconnect'
import type { ComponentLogger } from '@libp2p/interface'

export type { Trigger } from './rules.js'

/** What a policy decides from */
export interface SpeakerContext {
  team: string
  /** The state the decision is for */
  state: FlowState
  roster: RosterPayload
  /** Why a decision is needed: a turn ended, its speaker left, or the speaker was silent for `turnTimeout` */
  trigger: Trigger
  /** The most recent entries, oldest first */
  history: Entry[]
  signal: AbortSignal
}

/** A policy's answer: who speaks next, or that the conversation is over */
export interface SpeakerDecision {
  /** A member's `did:key`; required unless `conclude` */
  speaker?: Did
  /** End the conversation (the sequencer appends `conclude`, outcome `done`) */
  conclude?: boolean
  /** Why, logged in the decision entry (at most 256 characters are kept) */
  reason?: string
}

/** A pluggable speaker policy, run by the sequencer (spec 10.4) */
export interface SpeakerPolicy {
  decide(ctx: SpeakerContext): SpeakerDecision | Promise<SpeakerDecision>
}

/** The `llm` policy's model: an OpenAI-compatible chat completions endpoint */
export interface LlmPolicyInit {
  /** Base URL, e.g. `http://127.0.0.1:11434/v1`; `/chat/completions` is appended */
  url: string
  model: string
  /** Sent as `Authorization: Bearer <apiKey>` */
  apiKey?: string
  /** The fetch implementation @default globalThis.fetch */
  fetch?: typeof globalThis.fetch
  /** A model that does not answer within this long is replaced by round-robin, ms @default 10_000 */
  timeout?: number
  /** Largest response body accepted, bytes @default 65_536 */
  maxResponseBytes?: number
  /** Entries of the history shown to the model @default 20 */
  historyEntries?: number
  /** `max_tokens` of the request @default 256 */
  maxTokens?: number
  /** Replaces the default system prompt */
  systemPrompt?: string
  /** Where the policy logs (`ioa:collab:teams:flow:llm`) @default libp2p's default logger */
  logger?: ComponentLogger
}
