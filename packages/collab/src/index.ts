/**
 * @packageDocumentation
 *
 * The task collaboration layer: who may ask whom to do what (chained
 * delegation tokens, revocation, signed request envelopes, call-time policy),
 * how a goal becomes a plan (planners), and how a plan is carried out by agents
 * found at run time (tasks and the orchestrator).
 *
 * Wire formats: `spec/collab.md`.
 */
export {}
