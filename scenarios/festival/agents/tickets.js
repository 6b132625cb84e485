// TicketLine: re-issues the event's tickets for the new date and venue in
// batches (scenarios/festival/data/tickets.json), reporting progress; in
// the festival team it is an async assignment the organiser pauses for.
import { loadData, speakWhenAsked } from './shared.js'

/** @type {import('@ioa/node').AgentModule} */
export default async function tickets ({ node, agent, options, log, signal }) {
  const data = await loadData(options.data ?? './data/tickets.json')
  speakWhenAsked({ node, agent, lines: data.lines, log, signal })
  return {
    handlers: {
      'tickets.reissue': async (input, ctx) => {
        const per = Math.ceil(data.sold / data.batches)
        let done = 0
        for (let b = 1; b <= data.batches; b++) {
          await new Promise((resolve, reject) => {
            const t = setTimeout(resolve, data.batchMs)
            ctx.signal.addEventListener('abort', () => { clearTimeout(t); reject(ctx.signal.reason) }, { once: true })
          })
          done = Math.min(data.sold, done + per)
          ctx.progress(`batch ${b}/${data.batches}: ${done} tickets re-issued`)
        }
        const text = `${done} tickets re-issued for ${input?.date} at ${input?.venue}`
        log('reissued', { tickets: done, text })
        return { reissued: done, text }
      }
    }
  }
}
