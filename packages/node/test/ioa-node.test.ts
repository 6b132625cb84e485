import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { tokenCid } from '@ioa/collab'
import { createIdentity } from '@ioa/interconnect'
import { afterEach, describe, expect, it } from 'vitest'
import { until } from '../../../test/util.js'
import { createIoaNode, initFromConfig, loadConfig, parseConfig } from '../src/index.js'
import type { IoaNode , ConfigError} from '../src/index.js'

const nodes: IoaNode[] = []
const dirs: string[] = []

afterEach(async () => {
  for (const n of nodes.splice(0).reverse()) await n.stop().catch(() => {})
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true })
})

async function tempDir (): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), 'ioa-node-'))
  dirs.push(d)
  return d
}

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
    const sub = await b.delegate(car, { audience: hotel.did, capabilities: [{ skill: 'travel.hotel.booking' }], expiresAt: Date.now() + 60_000, proofs: [grant] })
    const cid = (await tokenCid(sub)).toString()
    await b.revoke(car, sub)
    await until(async () => (await a.revocationStore.isRevoked(cid)) || undefined, { timeout: 10_000, what: 'revocation received' })
  }, 60_000)

  it('keeps its peer id and agent ids in its data directory across restarts', async () => {
    const dataDir = await tempDir()
    let node = await createIoaNode({ dataDir })
    const peer = node.transport.peerId.toString()
    const first = await node.host({ key: 'robot', name: 'Patrol robot', skills: [{ id: 'security.patrol' }] })
    await node.stop()

    node = await createIoaNode({ dataDir })
    nodes.push(node)
    const again = await node.host({ key: 'robot', name: 'Patrol robot', skills: [{ id: 'security.patrol' }] })
    expect(node.transport.peerId.toString()).toBe(peer)
    expect(again.did).toBe(first.did)
  }, 60_000)
})
