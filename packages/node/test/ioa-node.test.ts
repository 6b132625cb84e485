import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { tokenCid } from '@ioa/collab'
import { createIdentity } from '@ioa/interconnect'
import { generateDomainKey } from '@ioa/transport'
import { describe, expect, it } from 'vitest'
import { rejectionOf, until } from '../../../test/util.js'
import { createIoaNode, initFromConfig, loadConfig, parseConfig, resolvePaths, startFromConfig } from '../src/index.js'
import type { ConfigError, IoaLayer, NodeTaskEvent } from '../src/index.js'
import { scratch } from './fixtures/scratch.js'
import type { RelayEvent } from '@ioa/collab'

const { nodes, tempDir } = scratch('ioa-node-')

function configError (fn: () => unknown): ConfigError {
  try {
    fn()
  } catch (err) {
    expect((err as Error).name).toBe('ConfigError')
    return err as ConfigError
  }
  throw new Error('expected a ConfigError')
}

describe('config', () => {
  it('accepts a full config and names the bad field otherwise', () => {
    const ok = parseConfig({
      listen: ['/ip4/127.0.0.1/tcp/0'],
      bootstrap: ['/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo'],
      domain: 'hotels.example',
      agents: [{ key: 'hotel', name: 'Hotel', skills: [{ id: 'travel.hotel.booking', tags: ['eu'] }] }],
      limits: { maxFrameSize: 65536 }
    })
    expect(ok.agents?.[0].skills[0].id).toBe('travel.hotel.booking')
    expect(initFromConfig(ok).messaging?.maxFrameSize).toBe(65536)

    expect(configError(() => parseConfig({ lisen: [] })).message).toMatch(/unknown field "lisen"/)
    expect(configError(() => parseConfig({ bootstrap: ['/ip4/1.2.3.4/tcp/1'] })).field).toBe('bootstrap.0')
    expect(configError(() => parseConfig({ agents: [{ key: 'bad key!', name: 'x', skills: [{ id: 'a' }] }] })).field).toBe('agents.0.key')
    expect(configError(() => parseConfig({ domain: 'Not A Domain' })).field).toBe('domain')
    expect(configError(() => parseConfig({ limits: { maxFrameSize: -1 } })).field).toBe('limits.maxFrameSize')
    expect(configError(() => parseConfig([])).code).toBe('INVALID_CONFIG')
  })

  it('passes the task limits, abandonment and retention to the task service, and names a bad one', () => {
    const init = initFromConfig(parseConfig({
      tasks: { abandonAfter: 60_000, maxActiveTasksPerPeer: 2, maxActiveTasksPerCaller: 3, maxActiveTasksPerAddress: 4, retention: { maxAge: 3_600_000, maxTasks: 50 } }
    }))
    expect(init.tasks).toMatchObject({
      abandonAfter: 60_000,
      limits: { maxActiveTasksPerPeer: 2, maxActiveTasksPerCaller: 3, maxActiveTasksPerAddress: 4 },
      retention: { maxAge: 3_600_000, maxTasks: 50 }
    })
    // unset limits keep the service's defaults (no undefined overrides)
    expect(initFromConfig(parseConfig({ tasks: {} })).tasks?.limits).toBeUndefined()

    const bad = configError(() => parseConfig({ tasks: { abandonAfter: 'soon' } }))
    expect(bad.code).toBe('INVALID_CONFIG')
    expect(bad.field).toBe('tasks.abandonAfter')
    // abandonment shorter than a lease would cancel tasks that are followed
    expect(configError(() => parseConfig({ tasks: { leaseInterval: 2_000, abandonAfter: 1_500 } })).field).toBe('tasks.abandonAfter')
    expect(configError(() => parseConfig({ tasks: { maxActiveTasksPerPeer: 0 } })).field).toBe('tasks.maxActiveTasksPerPeer')
    expect(configError(() => parseConfig({ tasks: { maxActiveTasksPerAddress: 1.5 } })).field).toBe('tasks.maxActiveTasksPerAddress')
    expect(configError(() => parseConfig({ tasks: { retention: { maxTasks: -1 } } })).field).toBe('tasks.retention.maxTasks')
    expect(configError(() => parseConfig({ tasks: { retention: { maxAgeMs: 1 } } })).message).toMatch(/unknown field "maxAgeMs"/)
  })

  it('loads a file, resolves dataDir next to it, and reports unreadable or broken files', async () => {
    const dir = await tempDir()
    const file = join(dir, 'node.json')
    await writeFile(file, JSON.stringify({ dataDir: 'state', domain: 'cars.example' }))
    const config = await loadConfig(file)
    expect(config.dataDir).toBe(join(dir, 'state'))
    await writeFile(file, '{ not json')
    await expect(loadConfig(file)).rejects.toHaveProperty('name', 'ConfigError')
    await expect(loadConfig(join(dir, 'missing.json'))).rejects.toHaveProperty('name', 'ConfigError')
  })
})

describe('IoaNode over TCP', () => {
  it('hosts agents, discovers them and runs a delegated task between two nodes', async () => {
    const a = await createIoaNode({ domain: 'hotels.example' })
    nodes.push(a)
    const b = await createIoaNode({ domain: 'cars.example', bootstrap: [a.addresses()[0]] })
    nodes.push(b)

    const hotel = await a.host({
      key: 'hotel',
      name: 'Seaside Hotel',
      skills: [{ id: 'travel.hotel.booking' }],
      handlers: {
        'travel.hotel.booking': async (input, ctx) => ({ booked: true, nights: (input as { nights: number }).nights, for: ctx.caller })
      }
    })
    const car = await b.host({ key: 'car', name: 'Car', skills: [{ id: 'vehicle.assistant' }] })

    const found = await until(async () => {
      const r = await b.discover({ capability: 'travel.hotel' }, { cache: false, timeout: 5_000 })
      return r.length > 0 ? r : undefined
    }, { timeout: 20_000, what: 'hotel discovered' })
    expect(found[0].card.id).toBe(hotel.did)

    const user = await createIdentity()
    const { delegate } = await import('@ioa/collab')
    const grant = await delegate(user, { audience: car.did, capabilities: [{ skill: 'travel.*' }], expiresAt: Date.now() + 60_000 })
    const done = await b.tasks.submitAndWait(car.identity, hotel.did, { skill: 'travel.hotel.booking', input: { nights: 2 }, proofs: [grant] })
    expect(done.state).toBe('completed')
    expect(done.result).toEqual({ booked: true, nights: 2, for: car.did })

    // a token the car issued, revoked by the car, reaches the other node
    // (no later than its proof: a later expiry is refused at issue time, issue 11 item 8)
    const sub = await b.delegate(car, { audience: hotel.did, capabilities: [{ skill: 'travel.hotel.booking' }], expiresAt: grant.payload.exp, proofs: [grant] })
    const cid = (await tokenCid(sub)).toString()
    await b.revoke(car, sub)
    await until(async () => (await a.revocationStore.isRevoked(cid)) || undefined, { timeout: 10_000, what: 'revocation received' })
  }, 60_000)

  it('keeps its peer id and agent ids in its data directory across restarts', async () => {
    const dataDir = await tempDir()
    const keyStore = { passphrase: 'a passphrase of the test keys' }
    let node = await createIoaNode({ dataDir, keyStore })
    const peer = node.transport.peerId.toString()
    const first = await node.host({ key: 'robot', name: 'Patrol robot', skills: [{ id: 'security.patrol' }] })
    await node.stop()

    node = await createIoaNode({ dataDir, keyStore })
    nodes.push(node)
    const again = await node.host({ key: 'robot', name: 'Patrol robot', skills: [{ id: 'security.patrol' }] })
    expect(node.transport.peerId.toString()).toBe(peer)
    expect(again.did).toBe(first.did)
  }, 60_000)
})

describe('task limits from a config, over TCP', () => {
  it('maxActiveTasksPerPeer: 1 refuses a second concurrent task from one peer with TOO_MANY_REQUESTS', async () => {
    const a = await createIoaNode(initFromConfig(parseConfig({ domain: 'hotels.example', tasks: { maxActiveTasksPerPeer: 1 } })))
    nodes.push(a)
    const b = await createIoaNode({ domain: 'cars.example', bootstrap: [a.addresses()[0]] })
    nodes.push(b)
    const hotel = await a.host({
      key: 'hotel',
      name: 'Slow Hotel',
      skills: [{ id: 'travel.hotel.booking' }],
      handlers: {
        // runs until canceled
        'travel.hotel.booking': async (_input, ctx) => await new Promise((_resolve, reject) => { ctx.signal.addEventListener('abort', () => { reject(ctx.signal.reason) }, { once: true }) })
      }
    })
    // two caller agents on one peer: the per-caller limit (64) is not what refuses
    const car = await b.host({ key: 'car', name: 'Car', skills: [{ id: 'vehicle.assistant' }] })
    const van = await b.host({ key: 'van', name: 'Van', skills: [{ id: 'vehicle.assistant' }] })
    const user = await createIdentity()
    const { delegate } = await import('@ioa/collab')
    const grant = async (audience: string): Promise<any> => delegate(user, { audience, capabilities: [{ skill: 'travel.*' }], expiresAt: Date.now() + 60_000 })
    await until(async () => b.interconnect.resolve(hotel.did, { cache: false, timeout: 5_000 }).catch(() => undefined), { timeout: 20_000, what: 'hotel resolvable' })

    const first = b.submit(car, hotel.did, { skill: 'travel.hotel.booking', input: 1, proofs: [await grant(car.did)] })
    let id: string | undefined
    for await (const e of first) {
      if (e.type === 'status' && e.task.state === 'working') { id = e.task.id; break }
    }
    expect(id).toBeDefined()
    // the first stream stopped; the task still runs (abandoned only after 3 leases): resubscribe keeps it
    const following = b.tasks.resubscribe(hotel.did, id!)
    const seen = await following.next()
    expect(seen.value).toMatchObject({ task: { state: 'working' } })

    const refused = await rejectionOf(b.tasks.submitAndWait(van.identity, hotel.did, { skill: 'travel.hotel.booking', input: 2, proofs: [await grant(van.did)], deadline: Date.now() + 10_000 }))
    expect(refused.code).toBe('TOO_MANY_REQUESTS')
    expect(refused.message).toMatch(/active tasks from peer/)

    // once the first ends, the peer may submit again
    await b.tasks.cancel(hotel.did, id!)
    await following.return(undefined)
    const again = b.submit(van, hotel.did, { skill: 'travel.hotel.booking', input: 3, proofs: [await grant(van.did)] })
    let second: string | undefined
    for await (const e of again) {
      if (e.type === 'status' && e.task.state === 'working') { second = e.task.id; break }
    }
    expect(second).toBeDefined()
    await b.tasks.cancel(hotel.did, second!)
  }, 90_000)
})

describe('interconnect cache bounds from a config, over TCP', () => {
  it('limits.interconnect reaches the interconnect: one cached lookup at most with maxCachedLookups 1, and a bad bound names its field', async () => {
    const init = initFromConfig(parseConfig({ limits: { interconnect: { maxCachedLookups: 1, maxCachedRoutes: 2, maxHistory: 3 } } }))
    expect(init.interconnect).toEqual({ maxCachedLookups: 1, maxCachedRoutes: 2, maxHistory: 3 })
    expect(configError(() => parseConfig({ limits: { interconnect: { maxCacheBytes: 0 } } })).field).toBe('limits.interconnect.maxCacheBytes')
    expect(configError(() => parseConfig({ limits: { interconnect: { maxCardsPerProvider: 257 } } })).field).toBe('limits.interconnect.maxCardsPerProvider')
    expect(configError(() => parseConfig({ limits: { interconnect: { maxRoutes: 1 } } })).message).toMatch(/unknown field "maxRoutes"/)

    const a = await createIoaNode({ domain: 'hotels.example' })
    nodes.push(a)
    const b = await createIoaNode({ ...initFromConfig(parseConfig({ domain: 'cars.example', limits: { interconnect: { maxCachedLookups: 1 } } })), bootstrap: [a.addresses()[0]] })
    nodes.push(b)
    for (const skill of ['travel.hotel.booking', 'travel.route.plan', 'payment.pay']) {
      await a.host({ key: skill.replaceAll('.', '-'), name: skill, skills: [{ id: skill }] })
    }
    for (const capability of ['travel.hotel', 'travel.route', 'payment']) {
      await until(async () => {
        const r = await b.discover({ capability }, { timeout: 5_000 })
        return r.length > 0 ? r : undefined
      }, { timeout: 20_000, what: `${capability} discovered` })
    }
    expect(b.interconnect.cacheStats().lookups).toBe(1)
  }, 90_000)
})

describe('custom layers', () => {
  it('starts layers in order after the built-in ones, finds them by name, and stops them in reverse before the node', async () => {
    const order: string[] = []
    const layer = (name: string): IoaLayer & { seen?: string } => ({
      name,
      start (node) {
        order.push(`start ${name}`)
        // the lower layers are up: the layer may use them
        this.seen = node.transport.peerId.toString()
      },
      stop () { order.push(`stop ${name}`) }
    })
    const clumsy: IoaLayer = { name: 'clumsy', start () {}, stop () { order.push('stop clumsy'); throw new Error('cannot stop') } }
    const node = await createIoaNode({ layers: [layer('audit'), clumsy, layer('reputation')] })
    expect(node.layer<IoaLayer & { seen?: string }>('audit')?.seen).toBe(node.transport.peerId.toString())
    expect(node.layer('missing')).toBeUndefined()
    await node.stop()
    await node.stop() // idempotent
    expect(order).toEqual(['start audit', 'start reputation', 'stop reputation', 'stop clumsy', 'stop audit'])
  })

  it('fails with LayerError for a malformed, duplicate or failing layer, stopping what started and releasing the data directory', async () => {
    const dataDir = await tempDir()
    const keyStore = { insecurePlaintext: true }
    const stopped: string[] = []
    const ok: IoaLayer = { name: 'ok', start () {}, stop () { stopped.push('ok') } }

    const dup = await rejectionOf(createIoaNode({ dataDir, keyStore, layers: [ok, { name: 'ok', start () {} }] }))
    expect(dup.name).toBe('LayerError')
    expect((dup as { code?: string }).code).toBe('LAYER_FAILED')
    expect(stopped).toEqual(['ok'])

    const failing = await rejectionOf(createIoaNode({ dataDir, keyStore, layers: [{ name: 'broken', start () { throw new Error('no database') } }] }))
    expect(failing.name).toBe('LayerError')
    expect(failing.message).toContain('no database')
    expect((failing.cause as Error).message).toBe('no database')

    const malformed = await rejectionOf(createIoaNode({ dataDir, keyStore, layers: [{ name: '' } as unknown as IoaLayer] }))
    expect(malformed.name).toBe('LayerError')

    // nothing was left holding the data directory
    const node = await createIoaNode({ dataDir, keyStore })
    nodes.push(node)
  }, 60_000)
})

describe('gateway role from a config, over TCP', () => {
  it('exports a skill of a node behind the gateway: relayed for an allowed domain, refused otherwise, both reported as node events', async () => {
    // the gateway: its public node, and an inner node in the domain network (private: the domain's key)
    const domainPsk = generateDomainKey()
    const gw = await createIoaNode(initFromConfig(parseConfig({
      domain: 'riviera.example',
      domainPsk,
      gateway: { exports: [{ skill: 'travel.hotel.booking', domains: ['cars.example'] }], refreshInterval: 300 }
    })))
    nodes.push(gw)
    expect(gw.gateway).toBeDefined()
    const relays: RelayEvent[] = []
    gw.events.onGateway(e => { relays.push(e) })
    const inner = gw.gateway!.addresses()[0]

    // the hotel's node joins only the domain network and names its gateway
    const hotelNode = await createIoaNode(initFromConfig(parseConfig({
      domain: 'riviera.example',
      bootstrap: [inner],
      domainPsk,
      behindGateways: [{ outer: gw.transport.peerId.toString(), inner: gw.gateway!.inner.peerId.toString() }]
    })))
    nodes.push(hotelNode)
    const served: NodeTaskEvent[] = []
    hotelNode.events.onTask(e => { served.push(e) })
    const hotel = await hotelNode.host({
      key: 'hotel',
      name: 'Riviera Hotels',
      skills: [{ id: 'travel.hotel.booking' }, { id: 'hospitality.rota' }],
      handlers: {
        'travel.hotel.booking': (input) => ({ booked: true, nights: (input as { nights: number }).nights }),
        'hospitality.rota': () => ({ shifts: [] })
      }
    })
    // the hotel's card says it is reachable only through the gateway
    expect(hotel.card.card.addrs).toEqual([])
    expect(hotel.card.card.gateways).toEqual([gw.transport.peerId.toString()])

    // outside: a car agent (allowed domain) and a phone (not)
    const cars = await createIoaNode({ domain: 'cars.example', bootstrap: [gw.addresses()[0]] })
    nodes.push(cars)
    const car = await cars.host({ key: 'car', name: 'Car', skills: [{ id: 'vehicle.assistant' }] })
    const phones = await createIoaNode({ domain: 'people.example', bootstrap: [gw.addresses()[0]] })
    nodes.push(phones)
    const phone = await phones.host({ key: 'phone', name: 'Phone', skills: [{ id: 'people.phone' }] })

    const found = await until(async () => {
      const r = await cars.discover({ capability: 'travel.hotel.booking' }, { cache: false, timeout: 3_000 })
      return r.length > 0 ? r : undefined
    }, { timeout: 30_000, what: 'the exported hotel found outside' })
    expect(found[0].card.id).toBe(hotel.did)
    expect(found[0].peer).toBe(gw.transport.peerId.toString())
    expect(found[0].card.skills.map(s => s.id)).toEqual(['travel.hotel.booking'])

    const user = await createIdentity()
    const { delegate } = await import('@ioa/collab')
    const grant = await delegate(user, { audience: car.did, capabilities: [{ skill: 'travel.hotel.*' }], expiresAt: Date.now() + 60_000 })

    // the car's orchestrator runs a one-step plan whose provider is behind the gateway
    const { declarativePlanner } = await import('@ioa/collab')
    const orchestrator = cars.orchestrator(car, {
      planner: declarativePlanner({
        templates: { 'book a room': { output: 'book', steps: [{ id: 'book', capability: 'travel.hotel.booking', input: { nights: { $input: 'nights' } } }] } }
      })
    })
    const run = await orchestrator.runToCompletion({ intent: 'book a room', input: { nights: 3 } }, { proofs: [grant] })
    expect(run.state).toBe('completed')
    expect(run.steps.book.result).toEqual({ booked: true, nights: 3 })
    expect(run.steps.book.providers).toEqual([hotel.did])
    expect(served.some(e => e.type === 'task-completed' && e.skill === 'travel.hotel.booking' && e.root === user.did)).toBe(true)
    const relayed = await until(() => relays.find(e => e.type === 'relayed'), { what: 'a relayed event' })
    expect(relayed).toMatchObject({ agent: hotel.did, skill: 'travel.hotel.booking', domain: 'cars.example' })

    // the phone's domain is not in the export rule; the rota is not exported at all
    const phoneGrant = await delegate(phone.identity, { audience: hotel.did, capabilities: [{ skill: 'travel.hotel.booking' }], expiresAt: Date.now() + 60_000 })
    const refused = await rejectionOf(phones.tasks.submitAndWait(phone.identity, hotel.did, { skill: 'travel.hotel.booking', input: { nights: 1 }, proofs: [phoneGrant] }))
    expect(refused.name).toBe('NotExportedError')
    const rotaGrant = await delegate(user, { audience: car.did, capabilities: [{ skill: 'hospitality.*' }], expiresAt: Date.now() + 60_000 })
    const hidden = await rejectionOf(cars.tasks.submitAndWait(car.identity, hotel.did, { skill: 'hospitality.rota', input: null, proofs: [rotaGrant] }))
    expect((hidden as { code?: string }).code).toBe('NOT_EXPORTED')
    expect(relays.filter(e => e.type === 'refused').map(e => e.type === 'refused' ? e.code : '')).toEqual(['NOT_EXPORTED', 'NOT_EXPORTED'])
    expect(served.some(e => e.skill === 'hospitality.rota')).toBe(false)

    // admitted by the gateway, refused by the executor (the car re-delegates the phone's token): said so on both sides (issue 11 item 3)
    const notTheCars = await delegate(user, { audience: phone.did, capabilities: [{ skill: 'travel.hotel.*' }], expiresAt: Date.now() + 60_000 })
    const stolen = await delegate(car.identity, { audience: hotel.did, capabilities: [{ skill: 'travel.hotel.booking' }], expiresAt: notTheCars.payload.exp, proofs: [notTheCars] }, { verify: false })
    const mismatch = await rejectionOf(cars.tasks.submitAndWait(car.identity, hotel.did, { skill: 'travel.hotel.booking', input: { nights: 1 }, proofs: [stolen, notTheCars], taskId: 'refused-inside' }))
    expect(mismatch.code).toBe('PRINCIPAL_MISMATCH')
    const told = await until(() => relays.find(e => e.type === 'relayed' && e.taskId === 'refused-inside'), { what: 'the relay of the refused task' })
    expect(told).toMatchObject({ type: 'relayed', refused: { code: 'PRINCIPAL_MISMATCH' } })
    expect(relayed).not.toHaveProperty('refused')
    const inside = await until(() => served.find(e => e.type === 'task-refused' && e.taskId === 'refused-inside'), { what: 'the executor\'s task-refused event' })
    expect(inside).toMatchObject({ code: 'PRINCIPAL_MISMATCH', caller: car.did, skill: 'travel.hotel.booking', agent: hotel.did })
  }, 90_000)
})

describe('startFromConfig with bad agents', () => {
  it('names the agent field for a module that cannot load, has no default export or returns nothing, and for impossible combinations', async () => {
    const dir = await tempDir()
    await writeFile(join(dir, 'no-default.mjs'), 'export const x = 1\n')
    await writeFile(join(dir, 'nothing.mjs'), 'export default () => undefined\n')
    await writeFile(join(dir, 'syntax.mjs'), 'export default (\n')
    const agent = (extra: Record<string, unknown>): unknown => ({ agents: [{ key: 'a', name: 'A', skills: [{ id: 'x.y' }], ...extra }] })
    const failure = async (config: unknown): Promise<ConfigError> => {
      const err = await rejectionOf(startFromConfig(resolvePaths(parseConfig(config), dir)))
      expect(err.name).toBe('ConfigError')
      return err as ConfigError
    }
    const missing = await failure(agent({ module: './missing.mjs' }))
    expect(missing.field).toBe('agents.0.module')
    expect(missing.message).toMatch(/Cannot load agent module/)
    expect((await failure(agent({ module: './syntax.mjs' }))).field).toBe('agents.0.module')
    expect((await failure(agent({ module: './no-default.mjs' }))).message).toMatch(/no default export/)
    expect((await failure(agent({ module: './nothing.mjs' }))).message).toMatch(/returned no implementation/)
    // a gateway node relays tasks; it cannot serve its own
    const gw = await failure({ ...(agent({ module: './nothing.mjs' }) as object), gateway: { exports: [{ skill: 'x' }] } })
    expect(gw.field).toBe('agents.0')
    // module and command together
    expect(configError(() => parseConfig(agent({ module: './a.mjs', command: ['node', './a.mjs'] }))).field).toBe('agents.0.command')
  }, 60_000)
})
