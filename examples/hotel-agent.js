// @ts-check
/**
 * An agent module for `startFromConfig` and `ioa start` (`examples/node.json`
 * names it): its default export gets the node, the hosted agent and the
 * config's `options`, and returns the skill handlers.
 *
 * It is plain JavaScript (an ES module), so `ioa start --config
 * examples/node.json` runs it with Node.js alone; the JSDoc type lets the
 * tests typecheck it.
 */

/**
 * A hotel with `options.rooms` rooms (default 1); a booking takes one
 *
 * @type {import('@ioa/node').AgentModule}
 */
const hotelAgent = ({ agent, options, log }) => {
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
