// Meteo Rhône: the forecast for the days asked, from the shipped data
// (scenarios/festival/data/forecast.json). In the festival team it is the
// sync assignment the conversation waits for.
import { loadData, speakWhenAsked } from './shared.js'

/** @type {import('@ioa/node').AgentModule} */
export default async function weather ({ node, agent, options, log, signal }) {
  const data = await loadData(options.data ?? './data/forecast.json')
  speakWhenAsked({ node, agent, lines: data.lines, log, signal })
  return {
    handlers: {
      'weather.forecast': async (input, ctx) => {
        const days = Array.isArray(input?.days) ? input.days.map(String) : Object.keys(data.days)
        ctx.progress(`reading the ${data.source}`)
        const forecast = Object.fromEntries(days.map(d => [d, data.days[d] ?? { sky: 'unknown' }]))
        const text = days.map(d => `${d}: ${forecast[d].sky}, gusts ${forecast[d].gustsKmh ?? '?'} km/h, warning ${forecast[d].warning ?? '?'}`).join('; ')
        log('forecast', { days, text: `forecast sent: ${text}` })
        return { forecast, text }
      }
    }
  }
}
