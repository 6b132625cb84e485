/**
 * The collaboration layer over TCP on 127.0.0.1: a user delegates to a car
 * agent, whose orchestrator plans "book a hotel for tonight" with a
 * declarative template (a route, then a hotel near the route's stop), finds
 * a map agent and a hotel agent on two other nodes through the DHT,
 * delegates each an attenuated token and runs the steps as tasks. Run it
 * with `npm run build && npx tsx examples/collab-orchestration.ts`.
 */
import { createTaskService, createOrchestrator, declarativePlanner, delegate } from '@ioa/collab'
import { createIdentity, createInterconnect } from '@ioa/interconnect'
import { createTransportNode } from '@ioa/transport'
import { MemoryDatastore } from 'datastore-core'
import { setTimeout as sleep } from 'node:timers/promises'
import { pathToFileURL } from 'node:url'
import type { OrchestratorEvent, SkillHandler, StepOutcome } from '@ioa/collab'
import type { Did } from '@ioa/interconnect'

export interface OrchestrationResult {
  /** The user (root principal), the car agent, the map agent and the hotel agent */
  dids: { user: Did, car: Did, map: Did, hotel: Did }
  /** The events of the run, in order */
  events: OrchestratorEvent[]
  /** What became of each step */
  steps: Record<string, StepOutcome>
  /** The run's result: the hotel step's */
  booking: unknown
}

export async function main ({ log = console.log, signal = AbortSignal.timeout(60_000) }: { log?: (...args: unknown[]) => void, signal?: AbortSignal } = {}): Promise<OrchestrationResult> {
  const stops: Array<() => unknown> = []
  try {
    // the car's node, and two nodes of providers that join through it
    const node = await createTransportNode()
    stops.push(async () => node.stop())
    const ic = await createInterconnect(node, { domain: 'cars.example' })
    stops.push(async () => ic.stop())
    const bootstrap = node.getMultiaddrs().map(a => a.toString())

    /** A node whose agent serves one skill through the task protocol */
    const provider = async (domain: string, key: string, name: string, skill: string, handler: SkillHandler): Promise<Did> => {
      const n = await createTransportNode({ bootstrap })
      stops.push(async () => n.stop())
      const i = await createInterconnect(n, { domain })
      stops.push(async () => i.stop())
      const t = createTaskService(i)
      stops.push(async () => t.stop())
      const agent = await i.host({ key, name, skills: [{ id: skill }] }, { signal })
      await t.serve(agent.did, skill, handler)
      await i.announced({ signal })
      return agent.did
    }
    const map = await provider('maps.example', 'map', 'Maps', 'geo.route', (input) => {
      const { from, to } = input as { from: string, to: string }
      return { from, to, distanceKm: 775, stop: { city: 'Lyon' } }
    })
    const hotel = await provider('hotels.example', 'hotel', 'Seaside Hotel', 'travel.hotel.book', (input, ctx) => {
      const { near } = input as { near: { city: string } }
      // the chain of delegations: user -> car agent -> this agent
      return { booked: true, city: near.city, guest: ctx.chain.root, via: ctx.caller, links: ctx.chain.path.length }
    })
    // the providers' records reach the car's node through the DHT
    for (const capability of ['geo.route', 'travel.hotel.book']) {
      while ((await ic.discoverAll({ capability }, { cache: false, timeout: 3_000, signal })).length === 0) {
        await sleep(200, undefined, { signal })
      }
    }

    const user = await createIdentity()
    const carAgent = await ic.host({ key: 'car', name: 'Car assistant', skills: [{ id: 'vehicle.assistant' }] }, { signal })
    const datastore = new MemoryDatastore()
    const events: OrchestratorEvent[] = []
    // (called once they exist; before, the ReferenceError is caught like any error of a stop)
    stops.push(async () => { await orchestrator.stop(); await tasks.stop() })

    const templates = {
      'book a hotel for tonight': {
        requires: ['from', 'to'],
        steps: [
          { id: 'route', capability: 'geo.route', input: { from: { $input: 'from' }, to: { $input: 'to' } } },
          { id: 'hotel', capability: 'travel.hotel.book', input: { near: { $ref: 'route.stop' } }, dependsOn: ['route'] }
        ]
      }
    }

    // the user (root principal) delegates to the car agent
    const grant = await delegate(user, {
      audience: carAgent.did,
      capabilities: [{ skill: 'geo.*' }, { skill: 'travel.hotel.*' }],
      expiresAt: Date.now() + 3_600_000
    })

    const tasks = createTaskService(ic, { datastore })
    const orchestrator = createOrchestrator({ ic, tasks, agent: carAgent, datastore, planner: declarativePlanner({ templates }) })
    for await (const event of orchestrator.run({ intent: 'book a hotel for tonight', input: { from: 'Paris', to: 'Marseille' } }, { proofs: [grant], signal })) {
      log(event.type)
      events.push(event)
    }

    const end = events.at(-1)
    if (end?.type !== 'completed') throw new Error(`The run ended ${end?.type}`)
    return { dids: { user: user.did, car: carAgent.did, map, hotel }, events, steps: end.steps, booking: end.result }
  } finally {
    for (const stop of stops.reverse()) await Promise.resolve().then(stop).catch(() => {})
  }
}

if (process.argv[1] != null && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().then(result => { console.log(result.booking) }, (err: unknown) => { console.error(err); process.exitCode = 1 })
}
