/**
 * Conversation metrics (spec/management.md 2.3), over TCP: the messages
 * of a team a node holds are counted by type in
 * `ioa_conversation_messages_total` on the convener's node (the member's
 * node has no management section), with no DID or team id as a label.
 */
import { describe, expect, it } from 'vitest'
import { until } from '../../../test/util.js'
import { createIoaNode } from '../src/index.js'
import { labelValues, sample } from './fixtures/prometheus.js'
import { scratch } from './fixtures/scratch.js'
import type { Team } from '@ioa/collab'

const { nodes } = scratch('management-teams-')

describe('conversation metrics', () => {
  it('counts the messages of a team\'s conversation by type, with no DID or team id as a label', async () => {
    const organiser = await createIoaNode({ management: { http: '127.0.0.1:0' } })
    nodes.push(organiser)
    const venueNode = await createIoaNode({ bootstrap: [organiser.addresses()[0]] })
    nodes.push(venueNode)
    const convener = await organiser.host({ key: 'organiser', name: 'Organiser', skills: [{ id: 'event.plan' }] })
    const venue = await venueNode.host({ key: 'venue', name: 'Venue', skills: [{ id: 'venue.booking' }] })
    await venueNode.interconnect.announced()
    await organiser.discover({ capability: 'venue.booking' }, { wait: { atLeast: 1, timeout: 60_000 } })
    const scrape = async (): Promise<string> => await (await fetch(`${organiser.management!.http!.url}/metrics`)).text()
    const discuss = { network: 'public', type: 'discuss' }

    const team = await organiser.team(convener, { text: 'move the concert indoors', capabilities: ['venue.booking'] })
    await until(() => venueNode.teams.team(team.id) != null || undefined, { timeout: 20_000, what: 'the venue node holds the team' })
    const member = venueNode.teams.team(team.id) as Team
    const before = sample(await scrape(), 'ioa_conversation_messages_total', discuss)
    await member.say('hall B is free tonight')
    await team.say('book it')
    await team.say('and the lights')
    const text = await until(async () => {
      const t = await scrape()
      return sample(t, 'ioa_conversation_messages_total', discuss) - before >= 3 ? t : undefined
    }, { timeout: 20_000, what: 'three discuss messages counted' })
    // the convener's node counts what its team ordered (the venue's node has no management section)
    expect(sample(text, 'ioa_conversation_messages_total', discuss) - before).toBe(3)
    const ids = [team.id, convener.did, venue.did]
    expect(labelValues(text).filter(v => ids.some(id => v.includes(id)) || /did:key/.test(v))).toEqual([])
  }, 90_000)
})
