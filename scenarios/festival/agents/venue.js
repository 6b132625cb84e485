// A venue of the venue agency (Dock Hall or Parc Arena, from
// scenarios/festival/data/venues.json): bids on calls for proposals for
// `venue.book` (price and capacity), commits when awarded, and speaks in
// the festival team when the moderator gives it the floor.
import { loadData, negotiationOf, speakWhenAsked } from './shared.js'

/** @type {import('@ioa/node').AgentModule} */
export default async function venue ({ node, agent, options, log, signal }) {
  const all = await loadData(options.data ?? './data/venues.json')
  const me = all[String(options.venue)]
  if (me == null) throw new Error(`No venue ${options.venue} in the data`)
  const held = negotiationOf(node)
  const negotiation = await held.negotiation()
  await negotiation.bid(agent.did, 'venue.book', ({ cfp }) => {
    log('bid', { venue: me.name, price: me.price, capacity: me.capacity, text: `bids for "${cfp.what}": ${me.price} EUR, capacity ${me.capacity}` })
    return { offer: { price: { amount: me.price, currency: 'EUR' }, terms: { venue: me.name, capacity: me.capacity, address: me.address } } }
  }, {
    commit: () => {
      log('committed', { venue: me.name, text: `${me.name} commits to the award` })
      return { commit: true }
    }
  })
  speakWhenAsked({ node, agent, lines: me.lines, log, signal })
  return {
    handlers: {
      'venue.book': async (input) => {
        const reservation = `${me.name.replace(/\s/g, '').toUpperCase().slice(0, 4)}-${String(input?.date ?? '').replace(/\W/g, '').slice(0, 12)}`
        log('booked', { venue: me.name, reservation, text: `booked ${me.name} for ${input?.date}: ${reservation}` })
        return { venue: me.name, reservation }
      }
    },
    stop: async () => {
      negotiation.unbid(agent.did, 'venue.book')
      await held.release()
    }
  }
}
