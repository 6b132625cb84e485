/**
 * Teams on the assembled node (issue 12, "Using it"): `node.team(...)` forms
 * a team by discovery over TCP, members talk through `node.teams`, and a
 * member node restarted from its data directory resumes the team with its
 * history.
 */
import { describe, expect, it } from 'vitest'
import { until } from '../../../test/util.js'
import { createIoaNode } from '../src/index.js'
import { scratch } from './fixtures/scratch.js'
import type { Team } from '@ioa/collab'

const { nodes, tempDir } = scratch('teams-node-')

describe('node.team', () => {
  it('forms a team found by capability; members talk; a restarted member resumes from its data directory', async () => {
    const seed = await createIoaNode()
    nodes.push(seed)
    const boot = [seed.addresses()[0]]
    const organiser = await createIoaNode({ bootstrap: boot })
    nodes.push(organiser)
    const dir = await tempDir()
    const keyStore = { insecurePlaintext: true }
    let venueNode = await createIoaNode({ bootstrap: boot, dataDir: dir, keyStore })
    const convener = await organiser.host({ key: 'organiser', name: 'Organiser', skills: [{ id: 'event.plan' }] })
    const venue = await venueNode.host({ key: 'venue', name: 'Venue', description: 'indoor halls', skills: [{ id: 'venue.booking' }] })
    await venueNode.interconnect.announced()
    await organiser.discover({ capability: 'venue.booking' }, { wait: { atLeast: 1, timeout: 60_000 } })

    const team = await organiser.team(convener, { text: 'move the concert indoors', capabilities: ['venue.booking'] })
    expect(team.roster.members.map(m => m.agent).sort()).toEqual([convener.did, venue.did].sort())
    expect(team.roster.deadline).toBeGreaterThan(Date.now())
    await until(() => venueNode.teams.team(team.id) != null || undefined, { timeout: 20_000, what: 'the venue node holds the team' })
    const member = venueNode.teams.team(team.id) as Team
    await member.say('hall B is free tonight')
    await team.say('book it')
    await until(() => member.length >= 3 || undefined, { timeout: 20_000 })

    // the member's node goes away and comes back from its data directory
    await venueNode.stop()
    await team.say('while you were away')
    venueNode = await createIoaNode({ bootstrap: boot, dataDir: dir, keyStore })
    nodes.push(venueNode)
    await venueNode.host({ key: 'venue', name: 'Venue', description: 'indoor halls', skills: [{ id: 'venue.booking' }] })
    // hosted again after the start: the stored team is picked up once its member agent is back
    await until(() => (venueNode.teams.team(team.id)?.length ?? 0) >= 4 || undefined, { timeout: 30_000, what: 'the restarted member catches up' })
    const again = venueNode.teams.team(team.id) as Team
    expect(again.history().map(e => e.msg.payload.id)).toEqual(team.history().map(e => e.msg.payload.id))
  })
})
