/**
 * Quick start: two nodes over TCP on 127.0.0.1. The hotel node hosts an agent
 * with a skill handler; the car node discovers it by capability, gets a
 * delegation from the driver and submits a task to it.
 *
 * Run it with `npm run build && npx tsx examples/quickstart.ts`.
 */
import { createIoaNode } from '@ioa/node'
import { delegate } from '@ioa/collab'
import { createIdentity } from '@ioa/interconnect'
import { setTimeout as sleep } from 'node:timers/promises'
import { pathToFileURL } from 'node:url'
import type { IoaNode } from '@ioa/node'
import type { TaskSnapshot } from '@ioa/collab'
import type { DiscoveredAgent } from '@ioa/interconnect'

export interface Booking {
  booked: boolean
  nights: number
  guest: string
}

/** Ask the network for a capability until an agent answers */
async function findAgent (node: IoaNode, capability: string, signal: AbortSignal): Promise<DiscoveredAgent> {
  while (true) {
    const [best] = await node.discover({ capability }, { cache: false, timeout: 5_000, signal })
    if (best != null) return best
    await sleep(200, undefined, { signal }) // the DHT needs a moment after a node joins
  }
}

export async function main ({ log = console.log, signal = AbortSignal.timeout(60_000) } = {}): Promise<Booking> {
  const hotels = await createIoaNode({ domain: 'hotels.example' })
  const cars = await createIoaNode({ domain: 'cars.example', bootstrap: hotels.addresses() })
  try {
    // the hotel node hosts an agent whose handler serves one skill
    await hotels.host({
      key: 'hotel',
      name: 'Seaside Hotel',
      skills: [{ id: 'travel.hotel.booking', tags: ['sea-view'] }],
      handlers: {
        'travel.hotel.booking': async (input, ctx) => {
          const { nights } = input as { nights: number }
          return { booked: true, nights, guest: ctx.caller }
        }
      }
    }, { signal })
    const car = await cars.host({ key: 'car', name: 'Car assistant', skills: [{ id: 'vehicle.assistant' }] }, { signal })

    // the car node finds a hotel agent by what it can do
    const hotel = await findAgent(cars, 'travel.hotel', signal)
    log(`found ${hotel.card.name} (${hotel.card.id}) on ${hotel.peer}`)

    // the driver allows the car agent to book hotels for one minute
    const driver = await createIdentity()
    const grant = await delegate(driver, {
      audience: car.did,
      capabilities: [{ skill: 'travel.hotel.*' }],
      expiresAt: Date.now() + 60_000
    })

    // submit the task and follow its states until it ends
    let task: TaskSnapshot | undefined
    for await (const event of cars.submit(car, hotel.card.id, {
      skill: 'travel.hotel.booking',
      input: { nights: 2 },
      proofs: [grant]
    }, { signal })) {
      if (event.type !== 'status') continue
      task = event.task
      log(`task ${task.id}: ${task.state}`)
    }
    if (task?.state !== 'completed') throw new Error(`The booking ended ${task?.state}: ${task?.error?.message}`)
    return task.result as Booking
  } finally {
    await cars.stop()
    await hotels.stop()
  }
}

if (process.argv[1] != null && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().then(
    booking => { console.log('result:', booking) },
    (err: unknown) => { console.error(err); process.exitCode = 1 }
  )
}
