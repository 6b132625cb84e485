/**
 * Watching a team's conversation from a peer that is not a member
 * (`spec/teams.md` 5.10), between separate nodes over TCP on 127.0.0.1: the
 * entries from a seq on, then live, with beats, ending after `conclude`; and
 * the refusals: a token for another team, a token not rooted at a member, a
 * request replayed from another peer, a forged request signature, too many
 * watchers from one peer. And the `watch-vectors` of section 12.
 */
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { afterEach, describe, expect, it } from 'vitest'
import * as dagCbor from '@ipld/dag-cbor'
import { identityFromPrivateKey } from '@ioa/interconnect'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { ed25519KeyFromSeed, expectErrorCode, fromHex, readSpecBlock, toHex, until } from '../../../test/util.js'
import { capabilityCovers, decodeToken, delegate, encodeToken, tokenCid, verifyChain } from '../src/auth/delegation.js'
import { WATCH_SKILL, watchTeam } from '../src/teams/index.js'
import { TEAM_PREFIXES, cidOf, parseWatch, recordSigningBytes, signRecord, verifyRecord } from '../src/teams/records.js'
import { goal, settled, startTeamPeer, startTeamPeers } from './teams-fixture.js'
import { createIdentity } from '@ioa/interconnect'
import type { Team, WatchItem } from '../src/teams/index.js'
import type { Capability, Token } from '../src/auth/delegation.js'
import type { WatchPayload } from '../src/teams/records.js'
import type { TeamPeer } from './teams-fixture.js'
import type { Identity } from '@ioa/interconnect'

let closers: Array<() => Promise<unknown>> = []

afterEach(async () => {
  for (const c of closers.reverse()) await c().catch(() => {})
  closers = []
})

async function formTeam (peers: TeamPeer[]): Promise<Team> {
  const [convener, ...others] = peers
  const team = await convener.teams.form(convener.agent.did, goal('move the outdoor event', ['team.member']), {
    roles: others.map((p, i) => ({ role: `r${i}`, capabilities: ['team.member'], candidates: [p.ref] }))
  })
  await settled(peers, team.id, 1)
  return team
}

async function watchToken (issuer: Identity, watcher: Identity, team: string): Promise<Token> {
  return await delegate(issuer, { audience: watcher.did, capabilities: [{ skill: WATCH_SKILL, constraints: { team } }], expiresAt: Date.now() + 600_000 })
}

/** Drain a watch into `items` in the background; resolves when it ends (with its error, if any) */
function drain (gen: AsyncGenerator<WatchItem>, items: WatchItem[]): Promise<unknown> {
  return (async () => { for await (const i of gen) items.push(i) })().then(() => undefined, (err: unknown) => err)
}

interface WatchVectors {
  watcher: { seed: string, did: string, peer: string }
  prefix: string
  token: { payload: Record<string, unknown>, token: string, cid: string }
  watch: { kind: 'watch', signer: string, payload: WatchPayload, signingBytes: string, signature: string, record: string, cid: string }
}

describe('spec/teams.md watch vectors', () => {
  it('the watch token and the watch record re-signed from their payloads have the vector bytes; the record parses and verifies; the chain grants this team only', async () => {
    const team = readSpecBlock<{ principals: Record<string, { seed: string, did: string }>, team: string }>('teams.md', 'team-vectors')
    const v = readSpecBlock<WatchVectors>('teams.md', 'watch-vectors')
    const key = await ed25519KeyFromSeed(v.watcher.seed)
    const watcher = identityFromPrivateKey(key)
    const car = identityFromPrivateKey(await ed25519KeyFromSeed(team.principals.car.seed))
    expect(watcher.did).toBe(v.watcher.did)
    expect(peerIdFromPrivateKey(key).toString()).toBe(v.watcher.peer)
    expect(toHex(new TextEncoder().encode(TEAM_PREFIXES.watch + '\n'))).toBe(v.prefix)
    // the token: the car agent (the convener) grants the watch of the vectors' team
    const p = v.token.payload as { cap: Capability[], exp: number, nonce: string }
    const token = await delegate(car, { audience: watcher.did, capabilities: p.cap, expiresAt: p.exp, nonce: p.nonce })
    expect(toHex(encodeToken(token))).toBe(v.token.token)
    expect((await tokenCid(token)).toString()).toBe(v.token.cid)
    expect(decodeToken(fromHex(v.token.token)).payload).toEqual(v.token.payload)
    const chain = await verifyChain(token, [], { now: p.exp - 1000 })
    expect(chain.root).toBe(team.principals.car.did)
    expect(chain.capabilities.some(c => capabilityCovers(c, { skill: WATCH_SKILL, constraints: { team: team.team } }))).toBe(true)
    expect(chain.capabilities.some(c => capabilityCovers(c, { skill: WATCH_SKILL, constraints: { team: 'taaaaaaaaaaaaaaaaaaaaaaaaaa' } }))).toBe(false)
    // the record
    expect(v.watch.payload).toMatchObject({ team: team.team, agent: watcher.did, peer: v.watcher.peer })
    const signed = await signRecord('watch', v.watch.payload, watcher)
    expect(toHex(recordSigningBytes('watch', v.watch.payload))).toBe(v.watch.signingBytes)
    expect(v.watch.signingBytes.startsWith(v.prefix)).toBe(true)
    expect(toHex(signed.sig)).toBe(v.watch.signature)
    expect(toHex(dagCbor.encode(signed))).toBe(v.watch.record)
    expect(await cidOf(signed)).toBe(v.watch.cid)
    const decoded = parseWatch(dagCbor.decode(fromHex(v.watch.record)))
    expect(decoded.payload).toEqual(signed.payload)
    expect(toHex(decoded.sig)).toBe(v.watch.signature)
    expect(await verifyRecord('watch', decoded, watcher.did)).toBe(true)
    expect(await verifyRecord('watch', decoded, car.did)).toBe(false)
    expect(await verifyRecord('claim', decoded, watcher.did)).toBe(false)
    // strict: an unknown key is refused
    expect(() => parseWatch({ ...decoded, payload: { ...decoded.payload, extra: 1 } })).toThrow(/unknown field/)
  })
})

describe('team watch', () => {
  it('a watcher with a member\'s token reads the log from a seq on, then live, until the conversation concludes', async () => {
    const peers = await startTeamPeers(closers, 3)
    const team = await formTeam(peers)
    const outsider = await startTeamPeer(closers, { name: 'watcher', dial: peers[1].node })
    const member = peers[1].teams.team(team.id) as Team
    await team.say('Hall B is free tonight, it holds four hundred people')
    await member.say('The forecast says storms on Friday evening')
    await settled(peers, team.id, 3)
    const watcher = await createIdentity()
    const token = await watchToken(peers[1].agent.identity, watcher, team.id)
    const items: WatchItem[] = []
    const m = outsider.node.services.messaging
    const done = drain(watchTeam(m, outsider.node.peerId, peers[1].node.peerId, { team: team.id, identity: watcher, proofs: [token], from: 1 }, { timeout: 10_000 }), items)
    await until(() => items.filter(i => 'entry' in i).length >= 2 || undefined, { timeout: 20_000, what: 'the stored entries' })
    const entries = (): number[] => items.flatMap(i => 'entry' in i ? [i.entry.seq] : [])
    expect(entries()).toEqual([1, 2])
    // live entries, and beats in between (heartbeat 300 ms in the fixture)
    await team.say('Then we move the concert to Saturday afternoon')
    await until(() => entries().length >= 3 || undefined, { timeout: 20_000, what: 'a live entry' })
    await until(() => items.some(i => 'beat' in i) || undefined, { timeout: 20_000, what: 'a beat' })
    await team.conclude('moved to Saturday')
    expect(await done).toBeUndefined()
    const last = items.filter(i => 'entry' in i).at(-1) as { entry: { msg: { payload: { type: string } } } }
    expect(last.entry.msg.payload.type).toBe('conclude')
    expect(entries()).toEqual([1, 2, 3, 4])
  })

  it('beats keep coming while garbage collections run (the wait for an entry is not lost with its timeout signal)', async () => {
    // on Node 20 AbortSignal.any([s, AbortSignal.timeout(ms)]) never aborts once a GC collected the timeout signal
    // (nodejs/node#57736): a watch that waited on such a signal sent no beat after a GC, and its watcher timed out
    setFlagsFromString('--expose-gc')
    const gc = runInNewContext('gc') as () => void
    const peers = await startTeamPeers(closers, 2)
    const team = await formTeam(peers)
    const outsider = await startTeamPeer(closers, { name: 'watcher', dial: peers[0].node })
    const watcher = await createIdentity()
    const token = await watchToken(peers[1].agent.identity, watcher, team.id)
    const items: WatchItem[] = []
    const controller = new AbortController()
    const done = drain(watchTeam(outsider.node.services.messaging, outsider.node.peerId, peers[0].node.peerId, { team: team.id, identity: watcher, proofs: [token] }, { timeout: 5_000, signal: controller.signal }), items)
    await until(() => items.some(i => 'beat' in i) || undefined, { timeout: 20_000, what: 'the first beat' })
    const beats = (): number => items.filter(i => 'beat' in i).length
    const before = beats()
    // a collection every 50 ms for 2 s (the fixture's heartbeat is 300 ms): the beats go on
    for (let i = 0; i < 40; i++) {
      gc()
      await new Promise(resolve => setTimeout(resolve, 50))
    }
    expect(beats() - before).toBeGreaterThanOrEqual(3)
    controller.abort()
    await done
  })

  it('the watch ends when the member whose token it holds leaves the team', async () => {
    const peers = await startTeamPeers(closers, 3)
    const team = await formTeam(peers)
    const outsider = await startTeamPeer(closers, { name: 'watcher', dial: peers[0].node })
    const watcher = await createIdentity()
    // peers[2]'s member grants the watch; the convener's node serves it
    const token = await watchToken(peers[2].agent.identity, watcher, team.id)
    const items: WatchItem[] = []
    const done = drain(watchTeam(outsider.node.services.messaging, outsider.node.peerId, peers[0].node.peerId, { team: team.id, identity: watcher, proofs: [token] }, { timeout: 10_000 }), items)
    await until(() => items.length > 0 || undefined, { timeout: 20_000, what: 'the watch runs' })
    await team.remove(peers[2].agent.did, 'done with the venue')
    const err = await done as { code?: string }
    expect(err?.code).toBe('NOT_MEMBER')
    // it saw the roster change before it ended
    expect(items.some(i => 'entry' in i && i.entry.msg.payload.type === 'remove')).toBe(true)
  })

  it('refuses a token for another team, one not rooted at a member, a replayed or forged request and too many watchers', async () => {
    const peers = await startTeamPeers(closers, 3, (i) => i === 1 ? { init: { maxWatchersPerPeer: 1 } } : {})
    const team = await formTeam(peers)
    const outsider = await startTeamPeer(closers, { name: 'watcher', dial: peers[1].node })
    const third = await startTeamPeer(closers, { name: 'third', dial: peers[1].node })
    const watcher = await createIdentity()
    const m = outsider.node.services.messaging
    const at = peers[1].node.peerId
    const watch = (proofs: Token[], from = 0): AsyncGenerator<WatchItem> => watchTeam(m, outsider.node.peerId, at, { team: team.id, identity: watcher, proofs, from }, { timeout: 10_000 })
    const first = async (gen: AsyncGenerator<unknown>): Promise<unknown> => { for await (const i of gen) return i }

    // a token for another team
    await expectErrorCode(first(watch([await watchToken(peers[0].agent.identity, watcher, 'taaaaaaaaaaaaaaaaaaaaaaaaaa')])), 'UNAUTHORIZED')
    // a token the watcher (or any non-member) issued itself
    const stranger = await createIdentity()
    await expectErrorCode(first(watch([await watchToken(stranger, watcher, team.id)])), 'NOT_MEMBER')
    // a token addressed to someone else
    await expectErrorCode(first(watch([await watchToken(peers[0].agent.identity, stranger, team.id)])), 'PRINCIPAL_MISMATCH')
    // from beyond the log
    await expectErrorCode(first(watch([await watchToken(peers[0].agent.identity, watcher, team.id)], 99)), 'INVALID_TEAM_RECORD')

    const token = await watchToken(peers[0].agent.identity, watcher, team.id)
    // the signed request replayed by another peer
    const payload = { v: 1 as const, team: team.id, agent: watcher.did, peer: outsider.node.peerId.toString(), from: 0, ts: Date.now() }
    const signed = await signRecord('watch', payload, watcher)
    const replay = third.node.services.messaging.stream(at, '/ioa/team/1.0.0', 'watch', { watch: signed, proofs: [encodeToken(token)] })
    await expectErrorCode(first(replay), 'PEER_MISMATCH')
    // a request not signed by the token's audience
    const forged = await signRecord('watch', { ...payload, peer: third.node.peerId.toString() }, stranger)
    await expectErrorCode(first(third.node.services.messaging.stream(at, '/ioa/team/1.0.0', 'watch', { watch: forged, proofs: [encodeToken(token)] })), 'INVALID_SIGNATURE')

    // one watch stream per peer on that node: the second is refused while the first runs
    const items: WatchItem[] = []
    const ac = new AbortController()
    const done = drain(watchTeam(m, outsider.node.peerId, at, { team: team.id, identity: watcher, proofs: [token] }, { timeout: 10_000, signal: ac.signal }), items)
    await until(() => items.length > 0 || undefined, { timeout: 20_000, what: 'the first watch' })
    await expectErrorCode(first(watch([token])), 'TOO_MANY_WATCHERS')
    ac.abort()
    await done
    // once it ended, the peer may watch again
    await until(async () => (await first(watch([token])).catch(() => undefined)) != null || undefined, { timeout: 20_000, what: 'a watch after the first ended' })
  })
})
