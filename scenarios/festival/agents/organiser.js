// The festival organiser (the convener): a storm warning for the festival
// day. It runs a call for proposals among the venues, forms a team of
// agents of four other organisations for the goal (moderator policy, the
// organiser moderates, max turns), discusses, assigns the forecast as a sync
// task (the conversation waits), the shuttle plan and the ticket re-issue as
// async tasks, pauses for them, and concludes with a summary. Every line of
// the conversation goes to the timeline. Lines and figures come from
// scenarios/festival/data/festival.json.
import { find, loadData, negotiationOf, printConversation, waitUntil } from './shared.js'

/** Turns before the sequencer ends the conversation */
const MAX_TURNS = 24
/** A member silent this long loses the floor, ms (the demo's, not the library default) */
const TURN_TIMEOUT = 8_000

/** @type {import('@ioa/node').AgentModule} */
export default async function organiser ({ node, agent, options, log, signal }) {
  const data = await loadData(options.data ?? './data/festival.json')
  const held = negotiationOf(node)
  const ev = data.event

  return {
    handlers: {
      'event.move': async (input, ctx) => {
        const deadline = Math.min(ctx.deadline ?? Infinity, Date.now() + 60_000)
        log('goal', { text: `${String(input?.reason ?? 'storm warning')}: moving "${ev.name}" (${ev.attendees} ticket holders) from ${ev.date}` })

        // who can do what: the DHT
        const [weather, venues, transport, tickets] = await Promise.all([
          find(node, 'weather.forecast', 1, ctx.signal),
          find(node, 'venue.book', 2, ctx.signal),
          find(node, 'transport.plan', 1, ctx.signal),
          find(node, 'tickets.reissue', 1, ctx.signal)
        ])
        const names = new Map([[agent.did, agent.card.card.name], ...[...weather, ...venues, ...transport, ...tickets].map(a => [a.agent, a.name])])

        // the venue: a call for proposals, the cheapest venue that holds everyone
        const negotiation = await held.negotiation()
        const round = await negotiation.callForProposals(agent.identity, venues.map(v => ({ agent: v.agent, peer: v.peer })), {
          skill: 'venue.book',
          what: `an indoor venue for ${ev.attendees} people on ${ev.newDate}`,
          constraints: { capacity: ev.attendees, maxPrice: ev.budget },
          due: Date.now() + 3_000,
          exp: deadline
        }, { signal: ctx.signal })
        const offers = round.proposals.map(p => ({ p, name: names.get(p.agent), price: p.proposal.payload.price?.amount, capacity: Number(p.proposal.payload.terms?.capacity ?? 0) }))
        for (const o of offers) log('proposal', { venue: o.name, price: o.price, capacity: o.capacity, text: `proposal from ${o.name}: ${o.price} EUR, capacity ${o.capacity}${o.capacity < ev.attendees ? ' — too small' : ''}` })
        const fit = offers.filter(o => o.capacity >= ev.attendees && o.price <= ev.budget).sort((a, b) => a.price - b.price)
        if (fit.length === 0) throw new Error(`no venue fits: ${offers.length} proposal(s)`)
        const chosen = fit[0]
        await negotiation.award(agent.identity, chosen.p, { signal: ctx.signal })
        log('awarded', { venue: chosen.name, agent: chosen.p.agent, price: chosen.price, proposals: offers.length, text: `awarded ${chosen.name} (${chosen.price} EUR) out of ${offers.length} proposals` })

        // the team, under the organiser's delegation from the festival's owner
        const ref = a => [{ agent: a.agent, peer: a.peer }]
        const team = await node.team(agent, { text: `move ${ev.name} to ${ev.newDate}, indoors`, capabilities: ['weather', 'venue', 'transport', 'tickets'], deadline }, {
          roles: [
            { role: 'weather', capabilities: ['weather'], candidates: ref(weather[0]) },
            { role: 'venue', capabilities: ['venue'], candidates: [{ agent: chosen.p.agent, peer: chosen.p.peer }] },
            { role: 'transport', capabilities: ['transport'], candidates: ref(transport[0]) },
            { role: 'ticketing', capabilities: ['tickets'], candidates: ref(tickets[0]) }
          ],
          proofs: [...ctx.chain.path],
          flow: { policy: 'moderator', maxTurns: MAX_TURNS, turnTimeout: TURN_TIMEOUT },
          signal: ctx.signal
        })
        const member = role => team.roster.members.find(m => m.role === role)?.agent
        log('team-formed', { team: team.id, members: team.roster.members.map(m => m.agent), policy: 'moderator', maxTurns: MAX_TURNS, text: `formed team ${team.id.slice(0, 8)}: ${team.roster.members.map(m => `${names.get(m.agent)} (${m.role})`).join(', ')}; moderator policy, max ${MAX_TURNS} turns` })
        const printed = printConversation({ team, log, names, signal })

        // the floor is the organiser's again (moderator policy) and the conversation is in discussion
        const floor = async () => {
          await waitUntil(() => team.concluded || (team.flow.phase === 'discussion' && team.flow.speaker === agent.did && team.flow.due == null), { ms: 20_000, signal: ctx.signal, what: 'the floor' })
          if (team.concluded) throw new Error('the team concluded early')
        }
        const ask = async (text, role) => {
          await floor()
          const turn = team.flow.turn
          await team.post('discuss', { text, next: member(role) })
          // the member speaks, and the floor comes back
          await waitUntil(() => team.flow.turn >= turn + 2, { ms: 20_000, signal: ctx.signal, what: `the ${role}'s answer` })
        }

        await floor()
        await team.say(data.organiser.opening)
        // sync: the conversation waits for the forecast
        await floor()
        const forecast = await node.assignments.assign(team, { mode: 'sync', assignee: member('weather'), skill: 'weather.forecast', input: { days: [ev.date, ev.newDate] }, signal: ctx.signal })
        const forecastOutcome = await forecast.done
        if (forecastOutcome.state !== 'completed') throw new Error(`no forecast: ${forecastOutcome.error?.code}`)
        await ask(data.organiser.askVenue, 'venue')
        await ask(data.organiser.askTransport, 'transport')
        await ask(data.organiser.askTickets, 'ticketing')

        // async: shuttles and tickets run in parallel, then the conversation pauses for both
        const work = { date: ev.newDate, venue: chosen.name, attendees: ev.attendees }
        await floor()
        const shuttles = await node.assignments.assign(team, { mode: 'async', assignee: member('transport'), skill: 'transport.plan', input: work, signal: ctx.signal })
        await floor()
        const reissue = await node.assignments.assign(team, { mode: 'async', assignee: member('ticketing'), skill: 'tickets.reissue', input: work, signal: ctx.signal })
        await floor()
        const [shuttleOutcome, ticketOutcome] = await node.assignments.pause(team, [shuttles.task, reissue.task], { signal: ctx.signal })

        const ok = shuttleOutcome.state === 'completed' && ticketOutcome.state === 'completed'
        await floor()
        await team.say(ok ? data.organiser.closing : 'Some of the work failed: we stop here.')
        const summary = `${ev.name} moves to ${ev.newDate} at ${chosen.name}; ${shuttleOutcome.output?.text ?? shuttleOutcome.error?.code}; ${ticketOutcome.output?.text ?? ticketOutcome.error?.code}`
        await team.conclude(summary, ok ? 'done' : 'failed')
        await printed.catch(() => {})
        return {
          team: team.id,
          venue: chosen.name,
          proposals: offers.map(o => ({ venue: o.name, price: o.price, capacity: o.capacity })),
          forecast: forecastOutcome.output?.forecast ?? null,
          shuttles: shuttleOutcome.output ?? null,
          tickets: ticketOutcome.output ?? null,
          turns: team.flow.turn,
          outcome: ok ? 'done' : 'failed',
          summary
        }
      }
    },
    stop: async () => { await held.release() }
  }
}
