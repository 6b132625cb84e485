// A hotel group's booking agent: books the cheapest room near the requested
// place within the price, from the group's shipped inventory. With
// `outage: true` its booking backend is down (it fails after a short wait),
// which the car's orchestrator must survive by failing over.
import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'

const sleep = (ms, signal) => new Promise((resolve, reject) => {
  const t = setTimeout(resolve, ms)
  signal?.addEventListener('abort', () => { clearTimeout(t); reject(signal.reason) }, { once: true })
})

/** @type {import('@ioa/node').AgentModule} */
export default async function hotel ({ agent, options, log }) {
  const all = JSON.parse(await readFile(fileURLToPath(new URL('../data/hotels.json', import.meta.url)), 'utf8'))
  const inventory = all[String(options.inventory)] ?? []
  const brand = String(options.brand ?? 'Hotel')
  const booked = new Map()
  let seq = 0

  return {
    handlers: {
      'travel.hotel.book': async (input, ctx) => {
        const city = input?.near?.city
        const nights = Number(input?.nights ?? 1)
        const maxPrice = Number(input?.maxPrice ?? Infinity)
        ctx.progress(`${brand}: looking for rooms in ${city} for ${nights} night(s)`)
        if (options.outage === true) {
          await sleep(300, ctx.signal)
          log('backend-down', { text: `${brand}: booking backend unavailable (HTTP 503) — refusing the request`, city })
          throw Object.assign(new Error(`${brand} booking backend unavailable`), { code: 'BACKEND_DOWN' })
        }
        const offers = inventory
          .filter(h => h.city === city && h.price * nights <= maxPrice)
          .sort((a, b) => a.price - b.price || a.distanceKm - b.distanceKm)
        if (offers.length === 0) {
          throw Object.assign(new Error(`${brand} has no room in ${city} within ${maxPrice}`), { code: 'NO_AVAILABILITY' })
        }
        // a retried request (same task) never books twice
        const existing = booked.get(ctx.task.id)
        if (existing != null) return existing
        const offer = offers[0]
        const reservation = {
          reservation: `${offer.id.toUpperCase()}-${String(++seq).padStart(4, '0')}`,
          hotel: { id: offer.id, name: offer.name, city: offer.city, stars: offer.stars, parking: offer.parking },
          brand,
          nights,
          amount: offer.price * nights,
          currency: offer.currency,
          payee: agent.did
        }
        booked.set(ctx.task.id, reservation)
        log('booked', {
          text: `${brand}: booked ${offer.name} (${offer.stars}★) for ${nights} night(s), ${reservation.amount} ${offer.currency}, ref ${reservation.reservation}`,
          reservation: reservation.reservation,
          amount: reservation.amount,
          currency: reservation.currency,
          caller: ctx.caller,
          root: ctx.chain.root
        })
        return reservation
      },
      'hospitality.housekeeping.schedule': async () => ({ shifts: [{ floor: 1, from: '07:00', to: '15:00' }] })
    }
  }
}
