/**
 * Assignments as tasks on the assembled node (`spec/teams.md` 10.6) between
 * two IoaNodes over TCP: `node.assignments` assigns a task to a member found
 * by capability, the member's handler (given to `node.host`) runs it and its
 * node posts the progress and the result to the team; a task that claims a
 * team assignment the log does not hold is refused `NOT_ASSIGNED` by the
 * hosted agent's node; `init.assignments` reaches the service.
 */
import { describe, expect, it } from 'vitest'
import { expectErrorCode, until } from '../../../test/util.js'
import { createIoaNode } from '../src/index.js'
import { scratch } from './fixtures/scratch.js'
import { assignmentContext } from '@ioa/collab'
import type { Team } from '@ioa/collab'

const { nodes } = scratch('assignments-node-')

describe('node.assignments', () => {
  it('assigns a task to a member on another node, whose hosted handler posts progress and result; a task naming no assignment is refused', async () => {
    const seed = await createIoaNode()
    nodes.push(seed)
    const boot = [seed.addresses()[0]]
    const organiser = await createIoaNode({ bootstrap: boot })
    nodes.push(organiser)
    const weatherNode = await createIoaNode({ bootstrap: boot, assignments: { progressInterval: 1 } })
    nodes.push(weatherNode)
    const convener = await organiser.host({ key: 'organiser', name: 'Organiser', skills: [{ id: 'event.plan' }] })
    let ran = 0
    const weather = await weatherNode.host({
      key: 'weather',
      name: 'Weather',
      skills: [{ id: 'weather.forecast' }],
      handlers: {
        'weather.forecast': async (input, ctx) => {
          ran++
          ctx.progress('reading the radar')
          return { forecast: 'storm', day: (input as { day: string }).day }
        }
      }
    })
    await weatherNode.interconnect.announced()
    await organiser.discover({ capability: 'weather.forecast' }, { wait: { atLeast: 1, timeout: 60_000 } })

    const team = await organiser.team(convener, { text: 'move the festival day', capabilities: ['weather.forecast'] })
    await until(() => weatherNode.teams.team(team.id) != null || undefined, { timeout: 20_000, what: 'the weather node holds the team' })

    const a = await organiser.assignments.assign(team, { mode: 'sync', assignee: weather.did, skill: 'weather.forecast', input: { day: 'saturday' } })
    const outcome = await a.done
    expect(outcome).toMatchObject({ task: a.task, state: 'completed', assignee: weather.did, output: { forecast: 'storm', day: 'saturday' } })
    expect(ran).toBe(1)
    // the result (and the progress) are the assignee's entries, posted by its node
    const result = team.history().find(e => e.msg.payload.type === 'result' && e.msg.payload.body.task === a.task)
    expect(result?.msg.payload.from).toBe(weather.did)
    const member = weatherNode.teams.team(team.id) as Team
    await until(() => member.length >= team.length || undefined, { timeout: 20_000, what: 'the member catches up' })
    expect(member.history().some(e => e.msg.payload.type === 'progress' && e.msg.payload.from === weather.did)).toBe(true)

    // a task that claims to be entry 0 (the roster) of the team is no assignment: refused before the handler runs
    const token = await organiser.delegate(convener, { audience: weather.did, capabilities: [{ skill: 'weather.forecast' }], expiresAt: Date.now() + 60_000 })
    await expectErrorCode(organiser.tasks.submitAndWait(convener.identity, weather.did, {
      skill: 'weather.forecast', input: { day: 'sunday' }, proofs: [token], contextId: assignmentContext(team.id, 0)
    }), 'NOT_ASSIGNED')
    expect(ran).toBe(1)
  })
})
