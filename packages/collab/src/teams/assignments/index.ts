/**
 * Assignments as tasks (spec/teams.md 10.6): the assigner's runner, the
 * assignee's handlers, leases and reassignment, pause-and-trigger, and the
 * bridges between teams and the orchestrator.
 */
export { createAssignmentService } from './service.js'
export { ASSIGNMENT_DEFAULTS } from './api.js'
export { teamStep, orchestratedPart } from './bridges.js'
export type { TeamStepInit, OrchestratedPartInit, StepConclusion } from './bridges.js'
export { assignmentContext, parseAssignmentContext } from './authority.js'
export type {
  AssignmentService, AssignmentsInit, AssignmentLimits, AssignmentComponents, AssignOptions, Assignment, AssignmentOutcome, ClosedAssignment
} from './api.js'
