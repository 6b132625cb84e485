/**
 * Private networks (pre-shared key) and the connection allow-list, over TCP
 * on 127.0.0.1 between separate libp2p nodes.
 */
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import {
  createTransportNode, generateDomainKey, IOA_DHT_PROTOCOL, loadDomainKey, parseDomainKey, privateDhtProtocol, readDomainKeyFile
} from '../src/index.js'
import { LOOPBACK, errorOf, expectErrorCode, fromHex, readSpecBlock, rejectionOf, until } from '../../../test/util.js'
import type { TransportNode, TransportNodeInit } from '../src/index.js'

const nodes: TransportNode[] = []
const dirs: string[] = []

async function makeNode (init: TransportNodeInit = {}): Promise<TransportNode> {
  const node = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'], ...init })
  nodes.push(node)
  return node
}

afterEach(async () => {
  await Promise.all(nodes.splice(0).map(async n => n.stop()))
  await Promise.all(dirs.splice(0).map(async d => rm(d, { recursive: true, force: true })))
})

interface PskVector { key: string, file: string, dhtProtocol: string }

describe('pre-shared keys', () => {
  it('parses the key file format and the bare hex key, and derives the DHT protocol id of the spec vectors', () => {
    const vectors = readSpecBlock<PskVector[]>('interconnect.md', 'psk-vectors')
    expect(vectors.length).toBeGreaterThan(0)
    for (const v of vectors) {
      const fromFile = parseDomainKey(v.file)
      expect(Buffer.from(fromFile.key).toString('hex')).toBe(v.key)
      expect(fromFile.dhtProtocol).toBe(v.dhtProtocol)
      expect(privateDhtProtocol(fromHex(v.key))).toBe(v.dhtProtocol)
      expect(parseDomainKey(v.key).file).toBe(v.file)
      expect(parseDomainKey(v.file.replace(/\n/g, '\r\n')).dhtProtocol).toBe(v.dhtProtocol)
    }
    const generated = generateDomainKey()
    expect(generated).toMatch(/^\/key\/swarm\/psk\/1\.0\.0\/\n\/base16\/\n[0-9a-f]{64}\n$/)
    expect(parseDomainKey(generated).file).toBe(generated)
    expect(generateDomainKey()).not.toBe(generated)
  })

  it('refuses malformed keys with InvalidDomainKeyError', async () => {
    const hex = 'ab'.repeat(32)
    for (const bad of [
      '', 'abc', 'ab'.repeat(31), 'zz'.repeat(32), '0'.repeat(64),
      `/key/swarm/psk/1.0.0/\n/base58/\n${hex}`, `/key/swarm/psk/2.0.0/\n/base16/\n${hex}`,
      `/key/swarm/psk/1.0.0/\n/base16/\n${hex}\nextra`, 'x'.repeat(2000)
    ]) {
      const err = errorOf(() => parseDomainKey(bad))
      expect(err.name, JSON.stringify(bad.slice(0, 40))).toBe('InvalidDomainKeyError')
      expect(err.code).toBe('INVALID_DOMAIN_KEY')
    }
    await expectErrorCode(loadDomainKey({}), 'INVALID_DOMAIN_KEY')
    const dir = await mkdtemp(join(tmpdir(), 'ioa-psk-'))
    dirs.push(dir)
    await expectErrorCode(readDomainKeyFile(join(dir, 'missing.key')), 'INVALID_DOMAIN_KEY')
    const file = join(dir, 'domain.key')
    await writeFile(file, generateDomainKey(), { mode: 0o600 })
    expect((await readDomainKeyFile(file)).exposed).toBe(false)
    await chmod(file, 0o644)
    expect((await readDomainKeyFile(file)).exposed).toBe(true)
    // a node with a bad key does not start
    await expectErrorCode(createTransportNode({ transports: ['tcp'], privateNetwork: { psk: 'not a key' } }), 'INVALID_DOMAIN_KEY')
  })
})

describe('private network over TCP', () => {
  it('members connect and share the key\'s DHT; a peer without the key, or with another key, is refused at connection time', async () => {
    const psk = generateDomainKey()
    const a = await makeNode({ privateNetwork: { psk } })
    const b = await makeNode({ privateNetwork: { psk }, bootstrap: [a.getMultiaddrs()[0].toString()] })
    const dht = parseDomainKey(psk).dhtProtocol
    expect(dht).not.toBe(IOA_DHT_PROTOCOL)
    await until(async () => (await a.peerStore.get(b.peerId).catch(() => undefined))?.protocols.includes(dht), { timeout: 20_000, what: 'identify of the member' })
    expect(a.getProtocols()).toContain(dht)
    expect(a.getProtocols()).not.toContain(IOA_DHT_PROTOCOL)

    const outsider = await makeNode()
    const other = await makeNode({ privateNetwork: { psk: generateDomainKey() } })
    for (const stranger of [outsider, other]) {
      const err = await rejectionOf(stranger.dial(a.getMultiaddrs(), { signal: AbortSignal.timeout(15_000) }))
      expect(err).toBeInstanceOf(Error)
      expect(stranger.getConnections(a.peerId)).toEqual([])
    }
    // the member never saw them as peers
    expect(a.getPeers().map(p => p.toString())).toEqual([b.peerId.toString()])
    // nor can a member reach out of its network
    await rejectionOf(a.dial(outsider.getMultiaddrs(), { signal: AbortSignal.timeout(15_000) }))
    expect(outsider.getPeers()).toEqual([])
  }, 60_000)
})

describe('connection allow-list', () => {
  /** Dial `server` from `count` fresh clients one after the other; how many connections it accepted */
  async function accepted (server: TransportNode, count: number): Promise<number> {
    let ok = 0
    for (let i = 0; i < count; i++) {
      const client = await makeNode({ listen: [] })
      const conn = await client.dial(server.getMultiaddrs(), { signal: AbortSignal.timeout(15_000) }).catch(() => undefined)
      if (conn != null) {
        // the server has counted it before the next dial
        await until(() => server.getConnections(client.peerId).length > 0 || conn.status !== 'open', { timeout: 10_000, what: 'the server side of the connection' })
        if (conn.status === 'open' && server.getConnections(client.peerId).length > 0) ok++
      }
    }
    return ok
  }

  it('by default, connections from 127.0.0.1 count against maxConnections', async () => {
    const server = await makeNode({ maxConnections: 2 })
    expect(await accepted(server, 4)).toBe(2)
    expect(server.getConnections().length).toBe(2)
  }, 60_000)

  it('addresses on the allow-list bypass maxConnections', async () => {
    const server = await makeNode({ maxConnections: 2, allow: LOOPBACK })
    expect(await accepted(server, 4)).toBe(4)
  }, 60_000)
})
