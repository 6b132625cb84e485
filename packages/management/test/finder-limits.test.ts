/**
 * The bounds of a management agent's discovery of its domain
 * (spec/management.md 1.6, 1.7): a watched node that reports more peers
 * than `maxCandidatesPerNode` adds only that many candidates, all of them
 * together at most `maxCandidates`; no more than `maxDials` dials run at
 * once; a peer is not dialled again within `retryAfter`; a peer its
 * reporter no longer lists is no candidate any more.
 */
import { defaultLogger } from '@libp2p/logger'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { describe, expect, it } from 'vitest'
import { ed25519KeyFromSeed, until } from '../../../test/util.js'
import { PeerFinder } from '../src/topology/finder.js'
import type { SnapshotPayload } from '../src/index.js'
import type { TransportNode } from '@ioa/transport'

async function peers (n: number, from: number): Promise<string[]> {
  const out: string[] = []
  for (let i = 0; i < n; i++) out.push(peerIdFromPrivateKey(await ed25519KeyFromSeed((from + i).toString(16).padStart(64, '0'))).toString())
  return out
}

const reporting = (peer: string, connected: string[]): SnapshotPayload => ({
  connections: connected.map((p, i) => ({ peer: p, direction: 'outbound', addr: `/ip4/127.0.0.1/tcp/${10_000 + i}` }))
} as unknown as SnapshotPayload)

describe('peer finder limits', () => {
  it('bounds candidates per reporting node and in all, and dials at once; retries only after retryAfter', async () => {
    let active = 0
    let most = 0
    const dialled: string[] = []
    const release: Array<() => void> = []
    const transport = {
      peerStore: { merge: async () => {}, all: async () => [] },
      dial: async (peer: { toString(): string }) => {
        dialled.push(peer.toString())
        active++
        most = Math.max(most, active)
        await new Promise<void>(resolve => release.push(resolve))
        active--
        throw Object.assign(new Error('unreachable'), { code: 'DIAL_FAILED' })
      }
    } as unknown as TransportNode
    const finder = new PeerFinder(transport, { maxDials: 3, maxCandidates: 30, maxCandidatesPerNode: 20, dialTimeout: 10_000, retryAfter: 60_000 }, defaultLogger().forComponent('test'), () => false)
    const many = await peers(50, 1)
    finder.offer('reporter-1', reporting('r1', many))
    expect(finder.size()).toBe(20)
    finder.offer('reporter-2', reporting('r2', many.slice(25)))
    // 20 from the first, 10 more from the second: the limit in all
    expect(finder.size()).toBe(30)
    // dials run three at a time until every candidate was tried once
    while (dialled.length < 30) {
      await until(() => release.length > 0, { what: 'a dial' })
      release.splice(0).forEach(r => { r() })
      await new Promise(resolve => setTimeout(resolve, 5))
    }
    await until(() => {
      release.splice(0).forEach(r => { r() })
      return active === 0
    }, { what: 'the dials to end' })
    expect(most).toBe(3)
    expect(new Set(dialled).size).toBe(30)
    // tried within retryAfter: a rescan dials none again
    finder.retry()
    finder.offer('reporter-1', reporting('r1', many))
    await new Promise(resolve => setTimeout(resolve, 20))
    expect(dialled).toHaveLength(30)
    // what a reporter no longer lists is forgotten; a reporter gone takes its candidates
    finder.offer('reporter-1', reporting('r1', many.slice(0, 5)))
    expect(finder.size()).toBe(15)
    finder.forget('reporter-2')
    expect(finder.size()).toBe(5)
    finder.stop()
  })
})
