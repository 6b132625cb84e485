/**
 * Fixtures of the assignment suites: team peers (teams-fixture.ts) that
 * also run a task service (short leases) and an assignment service.
 */
import { createTaskService } from '../src/tasks/service.js'
import { createAssignmentService } from '../src/teams/index.js'
import { startTeamPeers } from './teams-fixture.js'
import type { AssignmentService, AssignmentsInit } from '../src/teams/index.js'
import type { TaskService, TaskServiceInit } from '../src/tasks/service.js'
import type { TeamPeer } from './teams-fixture.js'

export interface AssignPeer extends TeamPeer {
  tasks: TaskService
  assignments: AssignmentService
}

/** One peer per entry of `skills` (peer i hosts an agent with `skills[i]`), dialled to each other */
export async function startAssignPeers (closers: Array<() => Promise<unknown>>, skills: string[][], init: AssignmentsInit = {}, taskInit: (i: number) => TaskServiceInit = () => ({})): Promise<AssignPeer[]> {
  const peers = await startTeamPeers(closers, skills.length, i => ({ skills: skills[i], name: `agent-${i}` }))
  return await Promise.all(peers.map(async (p, i) => {
    const tasks = createTaskService(p.ic, { leaseInterval: 300, requestTimeout: 3_000, ...taskInit(i) })
    await tasks.start()
    closers.push(async () => tasks.stop())
    const assignments = createAssignmentService({ logger: p.ic.node.logger, teams: p.teams, tasks, interconnect: p.ic }, init)
    closers.push(async () => assignments.stop())
    return { ...p, tasks, assignments }
  }))
}

export interface Gate {
  promise: Promise<void>
  resolve: () => void
}

/** A promise to open from outside */
export function gate (): Gate {
  let resolve: () => void = () => {}
  const promise = new Promise<void>(r => { resolve = r })
  return { promise, resolve }
}
