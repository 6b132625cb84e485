// Maps: a route from the car's position to its destination, with the area
// where the driver should stop tonight (from the shipped trip data).
import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'

/** @type {import('@ioa/node').AgentModule} */
export default async function maps ({ options, log }) {
  const data = JSON.parse(await readFile(fileURLToPath(new URL(`../${String(options.data ?? './data/trip.json')}`, import.meta.url)), 'utf8'))
  return {
    handlers: {
      'geo.route': async (input, ctx) => {
        const from = input?.from ?? data.trip.position
        const to = String(input?.to ?? data.trip.to.name)
        ctx.progress(`routing from ${from.name ?? `${from.lat},${from.lon}`} to ${to}`)
        const route = data.route
        const stop = route.stop
        log('routed', {
          text: `route ${route.via.join('+')} ${route.remainingKm} km left; tonight's stop: ${stop.area}, ETA ${stop.eta}`,
          remainingKm: route.remainingKm,
          stop: stop.city
        })
        return { from, to, via: route.via, remainingKm: route.remainingKm, legs: route.legs, stop }
      }
    }
  }
}
