/**
 * Private domain networks from config files, as `ioa start` loads them: a
 * gateway and a hotel behind it share the domain's pre-shared key; an
 * outsider that knows the hotel's address cannot connect and never sees an
 * internal card; the exported skill is still reached through the gateway.
 * Also `ioa key new --domain-psk` and the refusals of `ioa start`.
 */
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { createIdentity } from '@ioa/interconnect'
import { generateDomainKey, parseDomainKey } from '@ioa/transport'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { LOOPBACK, errorOf, rejectionOf, until } from '../../../test/util.js'
import { createIoaNode, initFromConfig, loadConfig, parseConfig, startFromConfig } from '../src/index.js'
import type { IoaNode, StartedNode } from '../src/index.js'

const BIN = fileURLToPath(new URL('../bin/ioa.js', import.meta.url))

let dir: string
const stops: Array<() => Promise<unknown>> = []

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'ioa-domain-'))
})

afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop().catch(() => {})
})

afterAll(async () => {
  await rm(dir, { recursive: true, force: true })
})

interface Run { code: number | null, stdout: string, stderr: string }

/** Run `ioa …` in a child process; resolves when it exits */
async function ioa (args: string[], env: Record<string, string> = {}): Promise<Run> {
  const child = spawn(process.execPath, [BIN, ...args], { cwd: dir, env: { ...process.env, IOA_HOME: join(dir, 'home'), ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (c: string) => { stdout += c })
  child.stderr.setEncoding('utf8').on('data', (c: string) => { stderr += c })
  const timer = setTimeout(() => child.kill('SIGKILL'), 30_000)
  const [code] = await once(child, 'close') as [number | null]
  clearTimeout(timer)
  return { code, stdout, stderr }
}

function errorLine (run: Run): { code: string, message: string, field?: string } {
  return JSON.parse(run.stderr.trim().split('\n').at(-1) ?? '{}').error
}

async function writeJson (name: string, value: unknown): Promise<string> {
  const path = join(dir, name)
  await writeFile(path, JSON.stringify(value))
  return path
}

describe('ioa key new --domain-psk', () => {
  it('writes a 0600 key file in the libp2p swarm key format, refuses to overwrite it, and prints the key without --out', async () => {
    const [created, human, printed] = await Promise.all([
      ioa(['key', 'new', '--domain-psk', '--out', 'riviera.psk', '--json']),
      ioa(['key', 'new', '--domain-psk', '--out', 'other.psk']),
      ioa(['key', 'new', '--domain-psk'])
    ])
    expect(created.code, created.stderr).toBe(0)
    const out = JSON.parse(created.stdout)
    const text = await readFile(join(dir, 'riviera.psk'), 'utf8')
    expect(text).toMatch(/^\/key\/swarm\/psk\/1\.0\.0\/\n\/base16\/\n[0-9a-f]{64}\n$/)
    expect(out).toEqual({ type: 'domain-psk', file: join(dir, 'riviera.psk'), dhtProtocol: parseDomainKey(text).dhtProtocol })
    expect(out.dhtProtocol).toMatch(/^\/ioa\/kad\/1\.0\.0\/psk\/[0-9a-f]{16}$/)
    expect((await stat(join(dir, 'riviera.psk'))).mode & 0o777).toBe(0o600)
    expect(human.code, human.stderr).toBe(0)
    expect(human.stdout).toContain('wrote ')
    expect(await readFile(join(dir, 'other.psk'), 'utf8')).not.toBe(text)
    expect(printed.code).toBe(0)
    expect(parseDomainKey(printed.stdout).key).toHaveLength(32)
    expect(printed.stderr).toMatch(/keep it secret/)

    const again = await ioa(['key', 'new', '--domain-psk', '--out', 'riviera.psk', '--json'])
    expect(again.code).toBe(2)
    expect(errorLine(again)).toMatchObject({ code: 'FILE_EXISTS', field: '--out' })
    expect(await readFile(join(dir, 'riviera.psk'), 'utf8')).toBe(text)
  }, 60_000)
})

describe('ioa start in a domain network', () => {
  it('refuses a node behind gateways, or a gateway, without a key (ConfigError naming domainPsk), and a bad key naming its source', async () => {
    const peer = '12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo'
    const behind = await writeJson('behind.json', { domain: 'riviera.example', behindGateways: [{ outer: peer, inner: peer }] })
    const gateway = await writeJson('gateway.json', { domain: 'riviera.example', gateway: { exports: [{ skill: 'travel.hotel.book' }] } })
    await writeFile(join(dir, 'bad.psk'), 'not a key\n', { mode: 0o600 })
    const badFile = await writeJson('bad-file.json', { domain: 'riviera.example', domainPskFile: 'bad.psk', behindGateways: [{ outer: peer, inner: peer }] })
    const both = await writeJson('both.json', { domain: 'riviera.example', domainPskFile: 'bad.psk', domainPsk: 'ab'.repeat(32) })
    const runs = await Promise.all([
      ioa(['start', '--json', '--config', behind]),
      ioa(['start', '--json', '--config', gateway]),
      ioa(['start', '--json', '--config', badFile]),
      ioa(['start', '--json', '--config', behind], { IOA_DOMAIN_PSK_FILE: 'missing.psk' }),
      ioa(['start', '--json', '--config', both])
    ])
    for (const r of runs) expect(r.code, r.stderr).toBe(2)
    const [noKey, noGatewayKey, bad, missing, twice] = runs.map(errorLine)
    expect(noKey).toMatchObject({ code: 'INVALID_CONFIG', field: 'domainPsk' })
    expect(noKey.message).toMatch(/ioa key new --domain-psk/)
    expect(noGatewayKey).toMatchObject({ code: 'INVALID_CONFIG', field: 'domainPsk' })
    expect(bad).toMatchObject({ code: 'INVALID_CONFIG', field: 'domainPskFile' })
    expect(bad.message).toMatch(/not a pre-shared key/)
    expect(missing).toMatchObject({ code: 'INVALID_CONFIG', field: 'IOA_DOMAIN_PSK_FILE' })
    expect(missing.message).toContain(join(dir, 'missing.psk'))
    expect(twice).toMatchObject({ code: 'INVALID_CONFIG', field: 'domainPsk' })
  }, 60_000)

  it('an outsider that knows the inner nodes\' addresses is refused at connection time; members and the gateway still work', async () => {
    await writeFile(join(dir, 'domain.psk'), generateDomainKey(), { mode: 0o600 })
    // the gateway, from its config file
    const gwConfig = await loadConfig(await writeJson('riviera-gateway.json', {
      domain: 'riviera.example',
      domainPskFile: 'domain.psk',
      limits: { allow: LOOPBACK },
      gateway: { exports: [{ skill: 'travel.hotel.book', domains: ['cars.example'] }], refreshInterval: 300 }
    }))
    const gw: StartedNode = await startFromConfig(gwConfig, { env: {} })
    stops.push(async () => gw.stop())
    const gateway = gw.node.gateway!
    const innerAddr = gateway.addresses()[0]

    // the hotel behind it, from its config file, with the key from the environment
    const hotelConfig = await loadConfig(await writeJson('riviera-hotel.json', {
      domain: 'riviera.example',
      bootstrap: [innerAddr],
      limits: { allow: LOOPBACK },
      behindGateways: [{ outer: gw.node.transport.peerId.toString(), inner: gateway.inner.peerId.toString() }],
      agents: [{ key: 'riviera', name: 'Riviera Hotels', skills: [{ id: 'travel.hotel.book' }, { id: 'hospitality.housekeeping.schedule' }] }]
    }))
    const hotel = await startFromConfig(hotelConfig, { env: { IOA_DOMAIN_PSK_FILE: join(dir, 'domain.psk') } })
    stops.push(async () => hotel.stop())
    const hotelAgent = hotel.agents[0].agent
    await hotel.node.tasks.serve(hotelAgent.did, 'travel.hotel.book', (input) => ({ booked: true, nights: (input as { nights: number }).nights }))
    let rotaRuns = 0
    await hotel.node.tasks.serve(hotelAgent.did, 'hospitality.housekeeping.schedule', () => { rotaRuns++; return { rota: [] } })
    const hotelAddrs = hotel.node.addresses()
    expect(hotelAddrs.length).toBeGreaterThan(0)
    const key = parseDomainKey(await readFile(join(dir, 'domain.psk')))
    expect(hotel.node.transport.getProtocols()).toContain(key.dhtProtocol)
    expect(gateway.inner.node.getProtocols()).toContain(key.dhtProtocol)
    // the gateway's outer node is on the public network
    expect(gw.node.transport.getProtocols()).toContain('/ioa/kad/1.0.0')

    // outside: a car agent of an allowed domain, through the gateway's outer node
    const cars: IoaNode = await createIoaNode({ domain: 'cars.example', bootstrap: [gw.node.addresses()[0]], transport: { allow: LOOPBACK } })
    stops.push(async () => cars.stop())
    const car = await cars.host({ key: 'car', name: 'Car', skills: [{ id: 'vehicle.assistant' }] })
    const found = await until(async () => {
      const r = await cars.discover({ capability: 'travel.hotel.book' }, { cache: false, timeout: 3_000 })
      return r.length > 0 ? r : undefined
    }, { timeout: 40_000, interval: 300, what: 'the exported hotel found outside' })
    expect(found[0].card.id).toBe(hotelAgent.did)
    expect(found[0].card.skills.map(s => s.id)).toEqual(['travel.hotel.book'])

    const user = await createIdentity()
    const { delegate } = await import('@ioa/collab')
    const grant = await delegate(user, { audience: car.did, capabilities: [{ skill: 'travel.*' }, { skill: 'hospitality.*' }], expiresAt: Date.now() + 60_000 })
    const done = await cars.tasks.submitAndWait(car.identity, hotelAgent.did, { skill: 'travel.hotel.book', input: { nights: 2 }, proofs: [grant] })
    expect(done.state).toBe('completed')
    expect(done.result).toEqual({ booked: true, nights: 2 })
    const hidden = await rejectionOf(cars.tasks.submitAndWait(car.identity, hotelAgent.did, { skill: 'hospitality.housekeeping.schedule', input: null, proofs: [grant] }))
    expect((hidden as { code?: string }).code).toBe('NOT_EXPORTED')

    // an outsider that learned the addresses of the hotel and of the gateway's inner node joins through them
    const outsider: IoaNode = await createIoaNode({ domain: 'evil.example', bootstrap: [...hotelAddrs, innerAddr], transport: { allow: LOOPBACK } })
    stops.push(async () => outsider.stop())
    const hotelPeer = hotel.node.transport.peerId
    const { multiaddr } = await import('@multiformats/multiaddr')
    for (const target of [hotelAddrs, gateway.addresses()]) {
      const dial = await rejectionOf(outsider.transport.dial(target.map(a => multiaddr(a)), { signal: AbortSignal.timeout(15_000) }))
      expect(dial).toBeInstanceOf(Error)
    }
    // it never sees an internal card
    const listed = await rejectionOf(outsider.interconnect.fetchCards(hotelPeer, {}, { timeout: 5_000 }))
    expect(listed).toBeInstanceOf(Error)
    // nor runs the non-exported skill directly
    const evil = await outsider.host({ key: 'evil', name: 'Evil', skills: [{ id: 'evil.probe' }] })
    const selfGrant = await delegate(evil.identity, { audience: hotelAgent.did, capabilities: [{ skill: 'hospitality.*' }], expiresAt: Date.now() + 60_000 })
    const run = await rejectionOf(outsider.tasks.submitAndWait(evil.identity, hotelAgent.did, { skill: 'hospitality.housekeeping.schedule', input: null, proofs: [selfGrant] }))
    expect(run).toBeInstanceOf(Error)
    expect(rotaRuns).toBe(0)
    expect(outsider.transport.getConnections(hotelPeer)).toEqual([])
    expect(hotel.node.transport.getPeers().map(p => p.toString())).not.toContain(outsider.transport.peerId.toString())
    expect(gateway.inner.node.getPeers().map(p => p.toString())).not.toContain(outsider.transport.peerId.toString())
  }, 120_000)

  it('the key closes the gateway\'s inner node (not its outer one) or the node behind gateways; a public node ignores the variables', () => {
    const psk = generateDomainKey()
    const peer = '12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo'
    const gw = initFromConfig(parseConfig({ domainPsk: psk, gateway: { exports: [{ skill: 'x' }] } }))
    expect(gw.gateway?.privateNetwork).toEqual({ psk })
    expect(gw.transport?.privateNetwork).toBeUndefined()
    const member = initFromConfig(parseConfig({ behindGateways: [{ outer: peer, inner: peer }] }), { env: { IOA_DOMAIN_PSK: psk } })
    expect(member.transport?.privateNetwork).toEqual({ psk })
    expect(initFromConfig(parseConfig({}), { env: { IOA_DOMAIN_PSK: psk } }).transport?.privateNetwork).toBeUndefined()
    // a key in a config that is not in a domain network is a mistake
    expect(errorOf(() => initFromConfig(parseConfig({ domainPsk: psk })))).toMatchObject({ name: 'ConfigError', field: 'domainPsk' })
  })

  it('has no loopback allow-list unless the config asks for one', () => {
    // no loopback allow-list unless the config asks for one
    expect(initFromConfig(parseConfig({})).transport?.allow).toEqual([])
    expect(initFromConfig(parseConfig({ limits: { allow: LOOPBACK } })).transport?.allow).toEqual(LOOPBACK)
  })
})
