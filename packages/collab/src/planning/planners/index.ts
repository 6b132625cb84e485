/**
 * The planners: each turns a goal into a plan (`../plan.ts`).
 */
export { declarativePlanner } from './declarative.js'
export type { DeclarativePlannerInit, Template, TemplateStep } from './declarative.js'
export { compositionPlanner } from './composition.js'
export type { CompositionPlannerInit } from './composition.js'
export { llmPlanner, DEFAULT_SYSTEM_PROMPT } from './llm.js'
export type { LlmPlannerInit, CapabilityInfo } from './llm.js'
