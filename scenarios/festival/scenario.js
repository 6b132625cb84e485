// Scenario 3, a team moves a festival day: a storm warning for Saturday.
//
// The festival's owner (a user key on the phone) delegates to the organiser
// agent. The organiser runs a call for proposals between two venues of the
// venue agency (Parc Arena is cheaper but too small: Dock Hall wins), forms a
// team with the weather service, the venue, the transport company and the
// ticketing company (moderator policy, max turns), and talks: a sync
// assignment (the forecast) holds the conversation, two async ones (shuttle
// plan, ticket re-issue) run while it goes on, and a pause waits for both.
// The transport company forms a nested team of two bus operators; one of
// them (Bravo Buses, its own process) is SIGKILLed mid-route: its task's
// lease lapses, the route is reassigned to Alpha Coaches by rule, Bravo is
// removed from the nested team, which concludes; then the team concludes.
import { delegate } from '@ioa/collab'
import { multiaddr } from '@multiformats/multiaddr'

export default {
  name: 'festival-move',
  title: 'Festival day moved by a team of agents: "storm warning for Saturday"',
  timeout: 60_000,
  // seven more processes: a network of their own (its own seed), which the phone joins once the scenarios before are over (see the runner)
  ownNetwork: true,
  nodes: [
    { name: 'organiser', config: 'festival/organiser.json' },
    { name: 'weather', config: 'festival/weather.json' },
    { name: 'venues', config: 'festival/venues.json' },
    { name: 'transport', config: 'festival/transport.json' },
    { name: 'bus-a', config: 'festival/bus-a.json' },
    { name: 'bus-b', config: 'festival/bus-b.json' },
    { name: 'ticketing', config: 'festival/ticketing.json' }
  ],

  async run (ctx) {
    const steps = []
    const checks = []
    const step = (name, since, extra = {}) => steps.push({ name, ms: Date.now() - since, ...extra })
    const check = (name, ok, detail) => checks.push({ name, ok: Boolean(ok), detail })
    const owner = ctx.driver.identity
    const organiser = ctx.node('organiser')
    const busB = ctx.node('bus-b')
    const organiserDid = organiser.did('organiser')
    const bravo = busB.did('bus-b')
    const alpha = ctx.node('bus-a').did('bus-a')

    // the organiser's card must be known before the phone can reach it: the
    // phone connects to the organiser's node (an address the owner knows) and
    // looks the capability up
    let t = Date.now()
    await ctx.driver.node.transport.dial(multiaddr(organiser.ready.addresses[0]), { signal: ctx.deadline(10_000) }).catch(err => {
      ctx.timeline('owner', `could not connect to the organiser's node (${err.message}); looking it up in the DHT`)
    })
    let reached = false
    while (!reached && Date.now() - t < 30_000 && !ctx.signal.aborted) {
      const found = await ctx.driver.node.discover({ capability: 'event.move' }, { cache: false, timeout: 5_000 }).catch(() => [])
      reached = found.some(a => a.card.id === organiserDid)
      if (!reached) await new Promise(resolve => setTimeout(resolve, 250))
    }
    const token = await delegate(owner, {
      audience: organiserDid,
      capabilities: [{ skill: 'event.*' }, { skill: 'weather.*' }, { skill: 'venue.*' }, { skill: 'transport.*' }, { skill: 'tickets.*' }],
      expiresAt: Date.now() + 3_600_000
    })
    ctx.timeline('owner', 'delegated to the organiser: event.*, weather.*, venue.*, transport.*, tickets.* for 1 h')
    step('delegate', t)

    // the chaos: Bravo Buses' process dies while it plans its route
    let killedAt
    const killer = busB.waitForEvent({ source: 'bus-b', event: 'driving' }, 55_000, 'Bravo Buses on its route').then(() => {
      killedAt = Date.now()
      ctx.timeline('chaos', `SIGKILL to bus-b (pid ${busB.pid}), Bravo Buses, in the middle of its route`)
      busB.kill('SIGKILL')
    }, () => {})

    t = Date.now()
    ctx.timeline('owner', '"storm warning for Saturday: move the festival day" → organiser')
    let result
    let failure
    for await (const e of ctx.driver.node.tasks.submit(owner, organiserDid, {
      skill: 'event.move',
      input: { reason: 'storm warning for Saturday' },
      proofs: [token],
      deadline: Date.now() + 55_000
    }, { signal: ctx.signal })) {
      if (e.type === 'status' && e.task.state === 'completed') result = e.task.result
      if (e.type === 'status' && ['failed', 'rejected', 'canceled'].includes(e.task.state)) failure = e.task.error
      if (e.type === 'lapsed') failure = e.error
    }
    step('goal', t)
    await Promise.race([killer, new Promise(resolve => setTimeout(resolve, 100))])
    if (failure != null) ctx.timeline('owner', `failed: ${failure.code} ${failure.message}`)
    if (result != null) ctx.timeline('owner', `done: ${result.summary}`)
    // the last lines of the processes
    await new Promise(resolve => setTimeout(resolve, 300))

    const ev = (node, name) => ctx.node(node).events.filter(e => e.event === name).map(e => e.data)
    const awarded = ev('organiser', 'awarded')[0]
    const committed = ev('venues', 'committed')
    const formed = ev('organiser', 'team-formed')[0]
    const topTeam = formed?.team
    const states = ev('organiser', 'team-state').filter(s => s.team === topTeam)
    const concluded = ev('organiser', 'team-concluded').find(c => c.team === topTeam)
    const sub = ev('transport', 'subteam-formed')[0]
    const subConcluded = ev('transport', 'team-concluded').find(c => c.team === sub?.team)
    const reassigned = ev('transport', 'assignment-reassigned').filter(a => a.team === sub?.team)
    const removed = ev('transport', 'member-removed').filter(r => r.team === sub?.team)
    const subRosters = ev('transport', 'roster').filter(r => r.team === sub?.team)
    const lastSubRoster = subRosters.at(-1)
    const said = ev('organiser', 'said').filter(s => s.team === topTeam)
    const speakers = new Set(said.filter(s => s.text.includes(': "')).map(s => s.from))
    if (killedAt != null) steps.push({ name: 'kill', at: killedAt - t })

    check('goal completed', result != null, failure != null ? `${failure.code}: ${failure.message}` : `${Date.now() - t} ms`)
    check('venue chosen by a call for proposals', awarded?.venue === 'Dock Hall' && awarded.proposals === 2 && committed.some(c => c.venue === 'Dock Hall'),
      awarded != null ? `${awarded.venue} (${awarded.price} EUR) of ${awarded.proposals} proposals; Parc Arena too small` : 'no award')
    check('team of five organisations formed (moderator, max turns)', formed?.members?.length === 5, `${formed?.members?.length ?? 0} members`)
    check('members discussed in turn', speakers.size >= 4, `${speakers.size} speakers, ${said.length} entries`)
    check('the sync assignment held the conversation, the pause waited for the async ones',
      states.some(s => s.state === 'sync') && states.some(s => s.state === 'paused') && states.filter(s => s.state === 'discussion').length >= 2,
      states.map(s => s.state).join(' → '))
    check('tasks done: forecast, shuttle plan, ticket re-issue', result?.forecast != null && result?.shuttles?.routes?.length === 2 && result?.tickets?.reissued === 2400,
      result != null ? `${result.shuttles?.routes?.map(r => `route ${r.route}: ${r.operator}`).join(', ')}; ${result.tickets?.reissued} tickets` : 'no result')
    check('Bravo Buses killed mid-route, its route reassigned to Alpha Coaches', killedAt != null && busB.events.some(e => e.event === 'driving') && reassigned.some(a => a.assignee === alpha) &&
      result?.shuttles?.routes?.every(r => r.operator === 'Alpha Coaches'), `killed: ${killedAt != null}; reassigned ${reassigned.length}×`)
    check('the killed member removed from the nested team', removed.some(r => r.agent === bravo) && lastSubRoster != null && !lastSubRoster.members.includes(bravo),
      `removed ${removed.length}; nested roster v${lastSubRoster?.version}: ${lastSubRoster?.members?.length} members`)
    check('nested team concluded', subConcluded?.outcome === 'done', subConcluded != null ? `${subConcluded.outcome}: ${subConcluded.summary}` : 'not concluded')
    check('conversation concluded with outcome done', concluded?.outcome === 'done' && result?.outcome === 'done', concluded != null ? `${concluded.outcome}, ${result?.turns} turns` : 'not concluded')

    return {
      steps,
      checks,
      outcome: {
        team: topTeam ?? null,
        venue: result?.venue ?? null,
        proposals: result?.proposals ?? [],
        members: formed?.members?.length ?? 0,
        states: states.map(s => s.state),
        turns: result?.turns ?? null,
        maxTurns: formed?.maxTurns ?? null,
        tasks: { forecast: result?.forecast != null, shuttles: result?.shuttles?.routes ?? [], tickets: result?.tickets?.reissued ?? 0 },
        subteam: sub != null ? { team: sub.team, outcome: subConcluded?.outcome ?? null, members: lastSubRoster?.members?.length ?? null } : null,
        killed: { agent: bravo, killed: killedAt != null, reassigned: reassigned.length, removed: removed.some(r => r.agent === bravo) },
        outcome: concluded?.outcome ?? null,
        summary: result?.summary ?? null
      }
    }
  }
}
