/**
 * An agent module for `startFromConfig` (`examples/node.json` names it): its
 * default export gets the node, the hosted agent and the config's `options`,
 * and returns the skill handlers.
 *
 * A `.ts` module needs a TypeScript loader (tsx, vitest); point a config run
 * by plain `node` at compiled JavaScript instead.
 */
import type { AgentModule } from '@ioa/node'

/** A hotel with `options.rooms` rooms (default 1); a booking takes one */
const hotelAgent: AgentModule = ({ agent, options, log }) => {
  let free = typeof options.rooms === 'number' ? options.rooms : 1
  return {
    handlers: {
      'travel.hotel.booking': (input, ctx) => {
        if (free === 0) throw Object.assign(new Error('No room left'), { code: 'NO_ROOM' })
        free--
        log('booked', { guest: ctx.caller, free })
        return { booked: true, hotel: agent.did, guest: ctx.caller, free }
      }
    }
  }
}

export default hotelAgent
