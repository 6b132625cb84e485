/**
 * Teams and the orchestrator (`spec/teams.md` 10.6) between separate nodes
 * over TCP on 127.0.0.1: an orchestrator's sub-goal step executed by a team
 * (formed under the step's chain, one sync assignment per role, concluded),
 * and a team member handing its assignment's sub-plan to an orchestrator
 * that runs it at an agent outside the team under the member's team chain.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { until } from '../../../test/util.js'
import { createOrchestrator } from '../src/orchestration/orchestrator.js'
import { orchestratedPart, teamStep } from '../src/teams/index.js'
import { startAssignPeers } from './assignments-fixture.js'
import { goal, settled } from './teams-fixture.js'
import type { Plan } from '../src/planning/plan.js'
import type { Team } from '../src/teams/index.js'
import type { AssignPeer } from './assignments-fixture.js'
import type { Interconnect } from '@ioa/interconnect'

let closers: Array<() => Promise<unknown>> = []

afterEach(async () => {
  for (const c of closers.reverse()) await c().catch(() => {})
  closers = []
})

/** Leases of 1 s: a step's team formation signs a lot, and a loaded machine must not make the step's lease lapse */
async function startPeers (skills: string[][]): Promise<AssignPeer[]> {
  return await startAssignPeers(closers, skills, {}, () => ({ leaseInterval: 1_000 }))
}

async function discovered (ic: Interconnect, capability: string): Promise<void> {
  await until(async () => {
    const found = await ic.discoverAll({ capability }, { cache: false, timeout: 3_000 }).catch(() => [])
    return found.length > 0 ? true : undefined
  }, { timeout: 30_000, interval: 200, what: `discover ${capability}` })
}

describe('teams and the orchestrator', () => {
  it('an orchestrator step is executed by a team: formed for the step goal, assigned, concluded, its conclusion the step result', async () => {
    const [orch, stepAgent, weather, venue] = await startPeers([['event.run'], ['event.team'], ['weather.forecast'], ['venue.search']])
    await weather.assignments.serve(weather.agent.did, 'weather.forecast', (input) => ({ forecast: 'storm', city: (input as { city: string }).city }))
    await venue.assignments.serve(venue.agent.did, 'venue.search', (input) => ({ venue: `the old hall of ${(input as { city: string }).city}` }))
    const formed: Team[] = []
    await stepAgent.tasks.serve(stepAgent.agent.did, 'event.team', teamStep({
      logger: stepAgent.ic.node.logger,
      teams: { form: async (...args) => { const t = await stepAgent.teams.form(...args); formed.push(t); return t } },
      assignments: stepAgent.assignments,
      agent: stepAgent.agent.did,
      roles: [
        { role: 'weather', capabilities: ['weather.forecast'], candidates: [weather.ref] },
        { role: 'venue', capabilities: ['venue.search'], candidates: [venue.ref] }
      ]
    }))
    const orchestrator = createOrchestrator({
      ic: orch.ic, tasks: orch.tasks, agent: orch.agent, goalCapabilities: () => [{ skill: 'weather.*' }, { skill: 'venue.*' }]
    })
    await discovered(orch.ic, 'event.team')
    const plan: Plan = {
      id: 'move-event',
      goal: { intent: 'move the outdoor event', input: { city: 'Lyon' } },
      output: 'replan',
      steps: [{ id: 'replan', capability: 'event.team', goal: { intent: 'move the outdoor event out of the storm', input: { city: 'Lyon' } }, input: {}, dependsOn: [] }]
    }
    const run = await orchestrator.runToCompletion(plan)
    expect(run.state).toBe('completed')
    // (a step retried by the orchestrator forms a team per attempt: the result names its own)
    const team = formed.find(t => t.id === (run.result as { team?: string }).team) as Team
    expect(team).toBeDefined()
    expect(run.result).toMatchObject({
      team: team.id, outcome: 'done', weather: { forecast: 'storm', city: 'Lyon' }, venue: { venue: 'the old hall of Lyon' }
    })
    // the team's authority came from the step's chain: its root is the orchestrating agent
    const w = weather.teams.team(team.id) as Team
    await until(() => w.concluded ? true : undefined, { timeout: 10_000, what: 'the team concluded on a member' })
    const results = w.history().filter(e => e.msg.payload.type === 'result').map(e => e.msg.payload.from)
    expect(results.sort()).toEqual([weather.agent.did, venue.agent.did].sort())
  })

  it('a team hands a sub-plan to an orchestrator: the assignee runs it under its team chain, the run result is posted', async () => {
    const [convener, planner, outside] = await startPeers([['team.member'], ['venue.plan'], ['venue.plan.search']])
    let chainRoot: string | undefined
    await outside.tasks.serve(outside.agent.did, 'venue.plan.search', (input, ctx) => {
      chainRoot = ctx.chain.root
      return { hall: `the old hall of ${(input as { city: string }).city}` }
    })
    const orchestrator = createOrchestrator({ ic: planner.ic, tasks: planner.assignments.tasks, agent: planner.agent })
    await planner.assignments.serve(planner.agent.did, 'venue.plan', orchestratedPart({ logger: planner.ic.node.logger, teams: planner.teams, orchestrator }))
    const team = await convener.teams.form(convener.agent.did, goal('move the outdoor event', ['venue.plan']), {
      roles: [{ role: 'venue', capabilities: ['venue.plan'], candidates: [planner.ref] }]
    })
    await settled([convener, planner], team.id, 1)
    await discovered(planner.ic, 'venue.plan.search')
    const plan: Plan = {
      id: 'find-hall',
      goal: { intent: 'find a hall', input: { city: 'Lyon' } },
      output: 'search',
      steps: [{ id: 'search', capability: 'venue.plan.search', input: { city: { $input: 'city' } }, dependsOn: [] }]
    }
    const a = await convener.assignments.assign(team, { mode: 'async', assignee: planner.agent.did, skill: 'venue.plan', input: { plan: plan as unknown as Record<string, unknown> } })
    const outcome = await a.done
    expect(outcome).toMatchObject({ state: 'completed', assignee: planner.agent.did, output: { result: { hall: 'the old hall of Lyon' } } })
    expect(team.history().find(e => e.seq === outcome.seq)?.msg.payload.from).toBe(planner.agent.did)
    // the sub-plan ran on the team's authority: the convener is the root of the outside agent's chain
    expect(chainRoot).toBe(convener.agent.did)
  })
})
