/**
 * Teams between separate nodes over TCP on 127.0.0.1 (`spec/teams.md`):
 * formation with accept and decline, the same order and history on every
 * member, non-members and forged messages refused, roster changes seen by
 * all in order, nested teams and the depth limit, catching up after a
 * restart, and takeover when the sequencer's node stops.
 */
import { spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { afterEach, describe, expect, it } from 'vitest'
import { MemoryDatastore } from 'datastore-core'
import { delay, expectErrorCode, rejectionOf, until } from '../../../test/util.js'
import { decodeToken, delegate, tokenCid } from '../src/auth/delegation.js'
import { createRevocation } from '../src/auth/revocation.js'
import { RevocationStore } from '../src/auth/revocation-store.js'
import { defaultMatcher } from '../src/teams/index.js'
import { teamChain } from '../src/teams/assignments/authority.js'
import { newId, signRecord } from '../src/teams/records.js'
import { FAST, goal, settled, startTeamPeer, startTeamPeers } from './teams-fixture.js'
import { createIdentity } from '@ioa/interconnect'
import type { Team } from '../src/teams/index.js'
import type { TeamRuntime } from '../src/teams/team.js'
import type { DiscoveredAgent } from '@ioa/interconnect'
import type { TeamPeer } from './teams-fixture.js'

let closers: Array<() => Promise<unknown>> = []
const COLLAB = fileURLToPath(new URL('..', import.meta.url))
const TEAMS_DIST = fileURLToPath(new URL('../dist/src/teams/index.js', import.meta.url))

afterEach(async () => {
  for (const c of closers.reverse()) await c().catch(() => {})
  closers = []
})

/** Form a team of peers[0] (convener) with every other peer, one role each */
async function formAll (peers: TeamPeer[], text = 'plan the event'): Promise<Team> {
  const [convener, ...others] = peers
  return await convener.teams.form(convener.agent.did, goal(text, ['team.member']), {
    roles: others.map((p, i) => ({ role: `r${i}`, capabilities: ['team.member'], candidates: [p.ref] }))
  })
}

function cids (team: Team): string[] {
  return team.history().map(e => `${e.seq}:${e.epoch}:${e.msg.payload.id}`)
}

describe('teams', () => {
  it('forms a team: invitees accept or decline, the roster is entry 0 on every member', async () => {
    const peers = await startTeamPeers(closers, 4, (i) => i === 3
      ? { init: { acceptor: () => ({ accept: false, decline: { code: 'BUSY', reason: 'fully booked' } }) } }
      : {})
    const [convener, a, b, busy] = peers
    const team = await convener.teams.form(convener.agent.did, goal('move the outdoor event', ['team.member']), {
      roles: [
        { role: 'venue', capabilities: ['team.member'], candidates: [busy.ref, a.ref] },
        { role: 'weather', capabilities: ['team.member'], candidates: [b.ref] }
      ]
    })
    expect(team.roster.members.map(m => m.agent).sort()).toEqual([convener.agent.did, a.agent.did, b.agent.did].sort())
    expect(team.roster.members.find(m => m.agent === a.agent.did)?.role).toBe('venue')
    expect(team.roster.successors[0]).toBe(convener.agent.did)
    await settled([a, b], team.id, 1)
    expect(busy.teams.team(team.id)).toBeUndefined()
    for (const p of [a, b]) {
      const t = p.teams.team(team.id) as Team
      expect(t.roster.version).toBe(1)
      expect(t.sequencer).toBe(convener.agent.did)
    }
  })

  it('a member node tells of its team once, when the roster makes it a member', async () => {
    const peers = await startTeamPeers(closers, 3)
    const seen: Array<{ team: string, hasRoster: boolean }> = []
    const controller = new AbortController()
    const reading = (async () => {
      for await (const e of peers[1].teams.events({ signal: controller.signal })) {
        if (e.type === 'team') seen.push({ team: e.team.id, hasRoster: (e.team as unknown as { hasRoster: boolean }).hasRoster })
      }
    })()
    const team = await formAll(peers)
    await settled(peers.slice(1), team.id, 1)
    await delay(300)
    controller.abort()
    await reading
    expect(seen).toEqual([{ team: team.id, hasRoster: true }])
  })

  it('a role nobody accepts fails the formation with the declines', async () => {
    const peers = await startTeamPeers(closers, 2, (i) => i === 1 ? { init: { acceptor: () => ({ accept: false, decline: { code: 'POLICY', reason: 'no' } }) } } : {})
    const err = await expectErrorCode(peers[0].teams.form(peers[0].agent.did, goal('x', ['team.member']), {
      roles: [{ role: 'r', capabilities: ['team.member'], candidates: [peers[1].ref] }]
    }), 'FORMATION_FAILED')
    expect(err.failures[0].tried[0]).toMatchObject({ agent: peers[1].agent.did, outcome: 'declined', code: 'POLICY' })
  })

  it('an invitee without the skill declines NOT_CAPABLE', async () => {
    const peers = await startTeamPeers(closers, 2, (i) => i === 1 ? { skills: ['cooking.soup'] } : {})
    const err = await expectErrorCode(formAll(peers), 'FORMATION_FAILED')
    expect(err.failures[0].tried[0].code).toBe('NOT_CAPABLE')
  })

  it('every member sees the same messages in the same order', async () => {
    const peers = await startTeamPeers(closers, 4)
    const team = await formAll(peers)
    await settled(peers, team.id, 1)
    const handles = peers.map(p => p.teams.team(team.id) as Team)
    await Promise.all(handles.map(async (t, i) => {
      for (let k = 0; k < 5; k++) await t.say(`member ${i} says ${k}`)
    }))
    await settled(peers, team.id, 21)
    const first = cids(handles[0])
    expect(first).toHaveLength(21)
    for (const t of handles) expect(cids(t)).toEqual(first)
    // each member's own messages keep their order
    const texts = handles[0].history().slice(1).map(e => e.msg.payload.body.text as string)
    for (let i = 0; i < 4; i++) {
      const mine = texts.filter(x => x.startsWith(`member ${i} `))
      expect(mine).toEqual([0, 1, 2, 3, 4].map(k => `member ${i} says ${k}`))
    }
    // entries are hash-chained
    const entries = handles[2].history()
    for (let s = 1; s < entries.length; s++) expect(entries[s].prev).toBeDefined()
  })

  it('refuses a non-member, a forged message and a message over the size limit', async () => {
    const peers = await startTeamPeers(closers, 3)
    const outsider = await startTeamPeer(closers, { name: 'outsider', dial: peers[0].node })
    const team = await formAll(peers.slice(0, 2))
    await settled(peers.slice(0, 2), team.id, 1)
    const member = peers[1].teams.team(team.id) as Team
    const messaging = outsider.node.services.messaging
    // a non-member signs its own message
    const own = await signRecord('message', { v: 1 as const, team: team.id, from: outsider.agent.did, id: newId(), type: 'discuss' as const, body: { text: 'let me in' }, ts: Date.now() }, outsider.agent.identity)
    await expectErrorCode(messaging.request(peers[0].node.peerId, '/ioa/team/1.0.0', 'post', { team: team.id, msg: own }), 'NOT_MEMBER')
    // the outsider forges a member's message: from the wrong peer, and with a key that is not the member's
    const liar = await createIdentity()
    const forged = await signRecord('message', { v: 1 as const, team: team.id, from: peers[1].agent.did, id: newId(), type: 'discuss' as const, body: { text: 'forged' }, ts: Date.now() }, liar)
    await expectErrorCode(messaging.request(peers[0].node.peerId, '/ioa/team/1.0.0', 'post', { team: team.id, msg: forged }), 'PEER_MISMATCH')
    const forgedFromPeer = await signRecord('message', { v: 1 as const, team: team.id, from: peers[1].agent.did, id: newId(), type: 'discuss' as const, body: { text: 'forged' }, ts: Date.now() }, liar)
    await expectErrorCode(peers[1].node.services.messaging.request(peers[0].node.peerId, '/ioa/team/1.0.0', 'post', { team: team.id, msg: forgedFromPeer }), 'INVALID_SIGNATURE')
    await expectErrorCode(member.say('x'.repeat(9000)), 'INVALID_MESSAGE')
    expect(member.length).toBe(1)
    // a non-member cannot subscribe either
    await expectErrorCode((async () => { for await (const _ of messaging.stream(peers[0].node.peerId, '/ioa/team/1.0.0', 'subscribe', { team: team.id, agent: outsider.agent.did, from: 0 })) { void _ } })(), 'NOT_MEMBER')
  })

  it('a member leaves, the convener removes and admits: every member sees the same roster versions at the same positions', async () => {
    const peers = await startTeamPeers(closers, 5)
    const team = await formAll(peers.slice(0, 4))
    await settled(peers.slice(0, 4), team.id, 1)
    const leaver = peers[3].teams.team(team.id) as Team
    await leaver.leave('done here')
    await team.remove(peers[2].agent.did, 'not needed')
    await team.admit(peers[4].ref, 'late', ['team.member'])
    await team.say('welcome')
    const stay = [peers[0], peers[1], peers[4]]
    await settled(stay, team.id, 8)
    const versions = (t: Team): Array<[number, number]> => t.history().filter(e => e.msg.payload.type === 'roster').map(e => [e.seq, (e.msg.payload.body.roster as { payload: { version: number } }).payload.version])
    const handles = stay.map(p => p.teams.team(team.id) as Team)
    expect(versions(handles[0])).toEqual([[0, 1], [2, 2], [4, 3], [6, 4]])
    for (const t of handles) expect(versions(t)).toEqual(versions(handles[0]))
    expect(handles[2].roster.members.map(m => m.agent).sort()).toEqual([peers[0].agent.did, peers[1].agent.did, peers[4].agent.did].sort())
    // the late joiner got the whole history
    expect(cids(handles[2])).toEqual(cids(handles[0]))
    // a removed member's posts are refused
    const removed = peers[2].teams.team(team.id) as Team
    await until(() => removed.length >= 5 || undefined, { timeout: 10_000 })
    await expectErrorCode(removed.say('still here?'), 'NOT_MEMBER')
  })

  it('events replay the history and go on live', async () => {
    const peers = await startTeamPeers(closers, 2)
    const team = await formAll(peers)
    await settled(peers, team.id, 1)
    const member = peers[1].teams.team(team.id) as Team
    await team.say('one')
    const seen: string[] = []
    const controller = new AbortController()
    const reading = (async () => {
      for await (const e of member.events({ from: 0, signal: controller.signal })) {
        seen.push(e.type === 'message' ? `${e.message.payload.type}` : e.type)
        if (e.type === 'concluded') break
      }
    })()
    await team.say('two')
    await team.conclude('all done')
    await reading
    expect(seen).toEqual(['roster', 'roster', 'joined', 'joined', 'discuss', 'discuss', 'conclude', 'concluded'])
    await expectErrorCode(team.say('after'), 'TEAM_CONCLUDED')
  })

  it('the sequencer concludes the conversation at the team\'s deadline; later posts are refused', async () => {
    const peers = await startTeamPeers(closers, 2)
    const team = await peers[0].teams.form(peers[0].agent.did, { text: 'quick', capabilities: ['team.member'], deadline: Date.now() + 2_500 }, {
      roles: [{ role: 'r', capabilities: ['team.member'], candidates: [peers[1].ref] }]
    })
    await settled(peers, team.id, 1)
    const member = peers[1].teams.team(team.id) as Team
    await until(() => member.concluded || undefined, { timeout: 15_000, what: 'concluded at the deadline' })
    const last = member.history().at(-1)
    expect(last?.msg.payload).toMatchObject({ type: 'conclude', from: peers[0].agent.did, body: { outcome: 'abandoned' } })
    await expectErrorCode(member.say('too late'), 'TEAM_CONCLUDED')
  })

  it('nested teams: a member forms a sub-team for its part; the root convener sees the tree; the depth limit holds', async () => {
    const peers = await startTeamPeers(closers, 4, () => ({ init: { maxDepth: 1 } }))
    const [root, lead, helper, deep] = peers
    const team = await formAll([root, lead])
    await settled([lead], team.id, 1)
    const leadTeam = lead.teams.team(team.id) as Team
    const sub = await leadTeam.formSubteam(goal('the venue part', ['team.member']), { roles: [{ role: 'helper', capabilities: ['team.member'], candidates: [helper.ref] }] })
    expect(sub.roster.parent).toEqual({ team: team.id, member: lead.agent.did })
    expect(sub.roster.depth).toBe(1)
    await settled([root], team.id, 2)
    const tree = await team.tree()
    expect(tree.subteams.map(s => s.team)).toEqual([sub.id])
    expect(tree.subteams[0].roster.members.map(m => m.agent).sort()).toEqual([lead.agent.did, helper.agent.did].sort())
    // a sub-sub-team would be at depth 2 > maxDepth 1
    await settled([helper], sub.id, 1)
    const helperSub = helper.teams.team(sub.id) as Team
    await expectErrorCode(helperSub.formSubteam(goal('deeper', ['team.member']), { roles: [{ role: 'x', capabilities: ['team.member'], candidates: [deep.ref] }] }), 'DEPTH_EXCEEDED')
    // the sub-team concludes: the parent conversation says so
    await sub.conclude('venue booked')
    await until(() => team.history().some(e => e.msg.payload.type === 'subteam' && e.msg.payload.body.state === 'concluded') || undefined, { timeout: 10_000 })
  })

  it('the sequencer node stops mid-conversation: the next successor takes over, no gap and no fork', async () => {
    const peers = await startTeamPeers(closers, 4)
    const team = await formAll(peers)
    await settled(peers, team.id, 1)
    const members = peers.slice(1).map(p => p.teams.team(team.id) as Team)
    for (let k = 0; k < 5; k++) await members[k % 3].say(`before ${k}`)
    await settled(peers.slice(1), team.id, 6)
    await peers[0].teams.stop()
    await peers[0].node.stop()
    // posts made during the takeover are retried until the new sequencer orders them
    await Promise.all(members.map(async (t, i) => { await t.say(`after ${i}`) }))
    await settled(peers.slice(1), team.id, 10)
    const first = cids(members[0])
    for (const t of members) expect(cids(t)).toEqual(first)
    expect(members[0].epoch).toBe(1)
    expect(members[0].sequencer).toBe(team.roster.successors[1])
    const types = members[0].history().map(e => e.msg.payload.type)
    expect(types.slice(0, 6)).toEqual(['roster', 'discuss', 'discuss', 'discuss', 'discuss', 'discuss'])
    expect(types[6]).toBe('epoch')
    expect(members[0].history().map(e => e.seq)).toEqual(first.map((_, i) => i))
  })

  it('a member that was away catches up; its history survives a restart from its datastore', async () => {
    const peers = await startTeamPeers(closers, 3)
    const team = await formAll(peers)
    await settled(peers, team.id, 1)
    await team.say('first')
    await settled(peers, team.id, 2)
    const away = peers[2]
    await away.teams.stop()
    await away.ic.stop()
    await away.node.stop()
    await team.say('while you were away')
    await team.say('and more')
    // restart the member from its datastore: same peer id, same agent key
    const back = await startTeamPeer(closers, { name: 'agent-2', datastore: away.datastore, dial: peers[0].node })
    expect(back.node.peerId.toString()).toBe(away.node.peerId.toString())
    await until(() => (back.teams.team(team.id)?.length ?? 0) >= 4 || undefined, { timeout: 20_000, what: 'catch up' })
    expect(cids(back.teams.team(team.id) as Team)).toEqual(cids(team))
    await delay(FAST.heartbeat as number)
  })
  it("the convener's proofs survive its restart: assignments after it still carry the team's authority", async () => {
    const peers = await startTeamPeers(closers, 2)
    const user = await createIdentity()
    const grant = await delegate(user, { audience: peers[0].agent.did, capabilities: [{ skill: 'team.*' }], expiresAt: Date.now() + 3_600_000 })
    const team = await peers[0].teams.form(peers[0].agent.did, goal('keep the grant', ['team.member']), {
      roles: [{ role: 'r0', capabilities: ['team.member'], candidates: [peers[1].ref] }],
      proofs: [grant]
    })
    await settled(peers, team.id, 1)
    const convener = peers[0]
    await convener.teams.stop()
    await convener.ic.stop()
    await convener.node.stop()
    const back = await startTeamPeer(closers, { name: 'agent-0', datastore: convener.datastore, dial: peers[1].node })
    const again = await until(() => back.teams.team(team.id), { timeout: 20_000, what: 'the team loaded again' }) as TeamRuntime
    const chain = teamChain(again)
    expect(chain).toHaveLength(1)
    expect((await tokenCid(chain[0])).toString()).toBe((await tokenCid(grant)).toString())
  })
})

describe('teams across processes', () => {
  it('the sequencer process is killed with SIGKILL mid-conversation: the members go on with no gap and no fork', async () => {
    const members = await startTeamPeers(closers, 3)
    const script = `
      import { createTransportNode } from '@ioa/transport'
      import { createInterconnect } from '@ioa/interconnect'
      import { multiaddr } from '@multiformats/multiaddr'
      import { createTeamService } from ${JSON.stringify(TEAMS_DIST)}
      const [addrs, refs, init] = [JSON.parse(process.argv[1]), JSON.parse(process.argv[2]), JSON.parse(process.argv[3])]
      const node = await createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'] })
      for (const a of addrs) await node.dial(multiaddr(a))
      const ic = await createInterconnect(node, { requestTimeout: 3000 })
      const agent = await ic.host({ key: 'convener', name: 'convener', skills: [{ id: 'team.member' }] })
      const teams = createTeamService(ic, init)
      await teams.start()
      const team = await teams.form(agent.did, { text: 'survive the kill', capabilities: ['team.member'], deadline: Date.now() + 3600000 }, {
        roles: refs.map((r, i) => ({ role: 'r' + i, capabilities: ['team.member'], candidates: [r] }))
      })
      process.stdout.write(JSON.stringify({ team: team.id }) + '\\n')
      for (let k = 0; ; k++) {
        const { seq } = await team.say('convener ' + k)
        process.stdout.write(JSON.stringify({ seq }) + '\\n')
        await new Promise(resolve => setTimeout(resolve, 50))
      }
    `
    const addrs = members.map(m => m.node.getMultiaddrs()[0].toString())
    const child = spawn(process.execPath, ['--input-type=module', '-e', script, JSON.stringify(addrs), JSON.stringify(members.map(m => m.ref)), JSON.stringify(FAST)], { cwd: COLLAB, stdio: ['ignore', 'pipe', 'inherit'] })
    closers.push(async () => { child.kill('SIGKILL') })
    const lines = createInterface({ input: child.stdout })
    let id: string | undefined
    let killed = false
    const acknowledged: string[] = []
    const posting: Array<Promise<void>> = []
    await new Promise<void>((resolve, reject) => {
      child.once('exit', (code) => { if (!killed) reject(new Error(`child exited with ${String(code)} before the kill`)) })
      lines.on('line', (line) => {
        const e = JSON.parse(line)
        if (e.team != null) {
          id = e.team
          // the members talk too, all through the kill
          for (const [i, m] of members.entries()) {
            posting.push((async () => {
              await until(() => m.teams.team(id as string) != null || undefined, { timeout: 20_000 })
              const t = m.teams.team(id as string) as Team
              for (let k = 0; k < 8; k++) {
                const msg = `member ${i} says ${k}`
                await t.say(msg)
                acknowledged.push(msg)
              }
            })())
          }
        }
        // kill once the members are in and talking
        if (e.seq >= 12 && acknowledged.length >= 6 && !killed) {
          killed = true
          child.kill('SIGKILL')
          resolve()
        }
      })
    })
    await Promise.all(posting)
    const handles = members.map(m => m.teams.team(id as string) as Team)
    await until(() => handles.every(t => t.length === handles[0].length && t.history().some(e => e.msg.payload.type === 'epoch')) || undefined, { timeout: 20_000, what: 'members agree after the takeover' })
    const first = cids(handles[0])
    for (const t of handles) expect(cids(t)).toEqual(first)
    const history = handles[0].history()
    expect(history.map(e => e.seq)).toEqual(history.map((_, i) => i))
    const texts = history.map(e => e.msg.payload.body.text as string | undefined)
    for (const msg of acknowledged) expect(texts.filter(t => t === msg)).toHaveLength(1)
    expect(acknowledged).toHaveLength(24)
    expect(handles[0].epoch).toBeGreaterThanOrEqual(1)
    const ids = history.map(e => e.msg.payload.id)
    expect(new Set(ids).size).toBe(ids.length)
  })
})

describe('teams: membership is authority', () => {
  it('a member whose token is revoked is removed, and every member sees the new roster', async () => {
    const store = await RevocationStore.open(new MemoryDatastore())
    const peers = await startTeamPeers(closers, 3, (i) => i === 0 ? { init: { revocations: store, revocationCheckInterval: 200 } } : {})
    const team = await formAll(peers)
    await settled(peers, team.id, 1)
    const victim = peers[2].teams.team(team.id) as Team & { invitation: { payload: { token: Uint8Array } } }
    const token = decodeToken(victim.invitation.payload.token)
    expect(team.roster.members.find(m => m.agent === peers[2].agent.did)?.token).toBe((await tokenCid(token)).toString())
    await store.add(await createRevocation(peers[0].agent.identity, token), { path: [token] })
    await settled(peers.slice(0, 2), team.id, 2)
    for (const p of peers.slice(0, 2)) {
      await until(() => (p.teams.team(team.id) as Team).roster.members.length === 2 || undefined, { timeout: 10_000 })
    }
    expect((peers[1].teams.team(team.id) as Team).roster.members.map(m => m.agent)).not.toContain(peers[2].agent.did)
    await until(() => victim.roster.members.every(m => m.agent !== peers[2].agent.did) || undefined, { timeout: 10_000, what: 'the removed member learns it' })
    await expectErrorCode(victim.say('am I still in?'), 'NOT_MEMBER')
  })

  it('members\' tokens derive from the convener\'s chain and never outlive it', async () => {
    const peers = await startTeamPeers(closers, 2)
    const user = await createIdentity()
    const grant = await delegate(user, { audience: peers[0].agent.did, capabilities: [{ skill: 'team.*' }], expiresAt: Date.now() + 600_000 })
    // the goal's deadline is later than the grant: the member's token stops with the grant
    const team = await peers[0].teams.form(peers[0].agent.did, goal('x', ['team.member']), {
      proofs: [grant], roles: [{ role: 'r', capabilities: ['team.member'], candidates: [peers[1].ref] }]
    })
    await settled(peers, team.id, 1)
    const member = peers[1].teams.team(team.id) as Team & { invitation: { payload: { token: Uint8Array, proofs: Uint8Array[] } } }
    const token = decodeToken(member.invitation.payload.token)
    expect(token.payload).toMatchObject({ iss: peers[0].agent.did, aud: peers[1].agent.did, exp: grant.payload.exp })
    expect(token.payload.prf).toEqual([(await tokenCid(grant)).toString()])
    expect(team.roster.members.find(m => m.agent === peers[1].agent.did)?.chain).toEqual([(await tokenCid(token)).toString(), (await tokenCid(grant)).toString()])
  })

  it('an invitation whose token escalates the convener\'s chain is refused with ESCALATION', async () => {
    const peers = await startTeamPeers(closers, 2)
    const user = await createIdentity()
    // the user grants the convener only team.lead; the convener invites for team.member
    const grant = await delegate(user, { audience: peers[0].agent.did, capabilities: [{ skill: 'team.lead' }], expiresAt: Date.now() + 3_600_000 })
    const err = await rejectionOf(peers[0].teams.form(peers[0].agent.did, goal('x', ['team.member']), {
      proofs: [grant], roles: [{ role: 'r', capabilities: ['team.member'], candidates: [peers[1].ref] }]
    }))
    expect(err.code).toBe('FORMATION_FAILED')
    expect(err.failures[0].tried[0].code).toBe('ESCALATION')
  })

  it('the default matcher ranks candidates by the relevance of their cards to the goal', async () => {
    const card = (id: string, description: string, score = 0): DiscoveredAgent => ({
      card: { id, name: id, description, skills: [{ id: 'venue.booking', tags: [] }] }, skills: [{ id: 'venue.booking', tags: [] }], score
    }) as unknown as DiscoveredAgent
    const ranked = await defaultMatcher(goal('an indoor concert hall for 500 people, in case of rain', ['venue.booking']), 'venue.booking', [
      card('did:a', 'beach huts and surf boards', 5),
      card('did:b', 'concert halls and indoor venues for large audiences', 0),
      card('did:c', 'garden parties', 1)
    ])
    expect(ranked.map(c => c.card.id)).toEqual(['did:b', 'did:a', 'did:c'])
  })
})

describe('teams: formation by discovery', () => {
  it('finds candidates by capability over the DHT, ranks them by the goal and invites the best', async () => {
    const peers = await startTeamPeers(closers, 5, (i) => ({
      name: ['organiser', 'beach', 'hall', 'weather', 'garden'][i],
      skills: [[], ['venue.booking'], ['venue.booking'], ['weather.forecast'], ['venue.booking']][i].length === 0 ? ['team.lead'] : [['team.lead'], ['venue.booking'], ['venue.booking'], ['weather.forecast'], ['venue.booking']][i]
    }))
    // richer cards: re-host with descriptions
    const described = ['', 'beach huts and surf boards by the sea', 'indoor concert halls for large audiences', 'hourly weather forecasts', 'garden parties under the trees']
    for (const [i, p] of peers.entries()) {
      if (i === 0) continue
      await p.ic.unhost(p.agent.did)
      p.agent = await p.ic.host({ key: `desc-${i}`, name: `agent ${i}`, description: described[i], skills: p.agent.card.card.skills.map(s => ({ id: s.id, description: described[i] })) })
      p.ref = { agent: p.agent.did, peer: p.node.peerId.toString() }
    }
    await Promise.all(peers.map(async p => { await p.ic.announced() }))
    const organiser = peers[0]
    await until(async () => (await organiser.ic.discoverAll({ capability: 'venue.booking' }, { timeout: 3_000, cache: false })).length >= 3 || undefined, { timeout: 30_000, what: 'three venues discoverable' })
    const team = await organiser.teams.form(organiser.agent.did, goal('the concert moves indoors because of rain: find a concert hall', ['venue.booking', 'weather.forecast']), { discoveryTimeout: 5_000 })
    const byRole = Object.fromEntries(team.roster.members.map(m => [m.role, m.agent]))
    expect(byRole['venue.booking']).toBe(peers[2].agent.did)
    expect(byRole['weather.forecast']).toBe(peers[3].agent.did)
    expect(team.roster.members).toHaveLength(3)
  })
})
