/**
 * Flow control of the group conversation (`spec/teams.md` 10.1-10.5): the
 * state machine, turns, and the speaker policies.
 */
export { FLOW_DEFAULTS, RULE_POLICIES, TURN_TYPES, initialFlow, nextFlow } from './state.js'
export type { FlowPhase, FlowParams, FlowState, OpenTask, DueDecision } from './state.js'
export { LlmSpeakerPolicy, SPEAKER_SYSTEM_PROMPT } from './llm.js'
export type { SpeakerPolicy, SpeakerContext, SpeakerDecision, LlmPolicyInit, Trigger } from './policy.js'
