// A bus operator (Alpha Coaches or Bravo Buses): runs a shuttle route of
// the transport company's sub-team (scenarios/festival/data/transport.json);
// planning a route takes the operator's `planningMs`. Bravo Buses' process
// is the one the scenario kills mid-way.
import { loadData } from './shared.js'

/** @type {import('@ioa/node').AgentModule} */
export default async function bus ({ agent, options, log }) {
  const data = await loadData(options.data ?? './data/transport.json')
  const name = agent.card.card.name
  const me = data.operators[name]
  if (me == null) throw new Error(`No operator ${name} in the data`)
  return {
    handlers: {
      'transport.bus': async (input, ctx) => {
        const route = data.routes.find(r => r.id === input?.route)
        if (route == null) throw new Error(`No route ${input?.route}`)
        log('driving', { route: route.id, text: `${name} takes route ${route.id} (${route.from} → ${route.to}), planning ${me.buses} buses` })
        ctx.progress(`route ${route.id}: rostering drivers`)
        await new Promise((resolve, reject) => {
          const t = setTimeout(resolve, me.planningMs)
          ctx.signal.addEventListener('abort', () => { clearTimeout(t); reject(ctx.signal.reason) }, { once: true })
        })
        const text = `route ${route.id} ${route.from} → ${route.to} by ${name}: departures ${route.departures.join(', ')}`
        log('route-ready', { route: route.id, text })
        return { route: route.id, operator: name, buses: me.buses, departures: route.departures, text }
      }
    }
  }
}
