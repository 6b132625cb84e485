/**
 * `ioa team watch` as a separate OS process (`node packages/node/bin/ioa.js`)
 * against a team of three nodes started by the test over TCP: the JSON lines
 * of the entries from a seq on, then live, until the team concludes (exit 0);
 * the human lines of the whole conversation; a refused watch (exit 1 with the
 * code) and a usage error (exit 2).
 */
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { delegate } from '@ioa/collab'
import { multiaddr } from '@multiformats/multiaddr'
import { encodeToken } from '@ioa/collab/wire'
import { until } from '../../../test/util.js'
import { createIoaNode } from '../src/index.js'
import { scratch } from './fixtures/scratch.js'
import type { Team } from '@ioa/collab'
import type { HostedAgent } from '@ioa/interconnect'

const BIN = fileURLToPath(new URL('../bin/ioa.js', import.meta.url))
const { nodes, tempDir } = scratch('team-watch-cli-')

interface Run { code: number | null, stdout: string, stderr: string }

function ioa (args: string[], cwd: string): { lines: string[], done: Promise<Run> } {
  const env: Record<string, string | undefined> = { ...process.env, IOA_HOME: join(cwd, 'home') }
  delete env.IOA_BOOTSTRAP
  delete env.IOA_KEY_PASSPHRASE
  const child = spawn(process.execPath, [BIN, ...args], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] })
  const lines: string[] = []
  let stdout = ''
  let stderr = ''
  createInterface({ input: child.stdout }).on('line', (l) => { lines.push(l); stdout += l + '\n' })
  child.stderr.setEncoding('utf8').on('data', (c: string) => { stderr += c })
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000)
  const done = (async () => {
    const [code] = await once(child, 'close') as [number | null]
    clearTimeout(timer)
    return { code, stdout, stderr }
  })()
  return { lines, done }
}

async function tokenFile (dir: string, name: string, issuer: HostedAgent, watcher: string, team: string): Promise<string> {
  const token = await delegate(issuer.identity, { audience: watcher, capabilities: [{ skill: 'ioa.team.watch', constraints: { team } }], expiresAt: Date.now() + 600_000 })
  await writeFile(join(dir, name), Buffer.from(encodeToken(token)).toString('base64url') + '\n')
  return `@${name}`
}

describe('ioa team watch', () => {
  it('prints a conversation live from a member\'s node, as JSON lines and as text; refuses a token for another team', async () => {
    const dir = await tempDir()
    const organiser = await createIoaNode()
    nodes.push(organiser)
    const boot = [organiser.addresses()[0]]
    const [venueNode, weatherNode] = await Promise.all([createIoaNode({ bootstrap: boot }), createIoaNode({ bootstrap: boot })])
    nodes.push(venueNode, weatherNode)
    const convener = await organiser.host({ key: 'organiser', name: 'Organiser', skills: [{ id: 'event.plan' }] })
    const venue = await venueNode.host({ key: 'venue', name: 'Venue', skills: [{ id: 'venue.booking' }] })
    const weather = await weatherNode.host({ key: 'weather', name: 'Weather', skills: [{ id: 'weather.forecast' }] })
    // the organiser knows the members' addresses before it invites them
    for (const n of [venueNode, weatherNode]) await organiser.transport.dial(multiaddr(n.addresses()[0]))
    const team = await organiser.teams.form(convener.did, { text: 'move the concert indoors', capabilities: ['venue.booking', 'weather.forecast'] }, {
      roles: [
        { role: 'venue', capabilities: ['venue.booking'], candidates: [{ agent: venue.did, peer: venueNode.transport.peerId.toString() }] },
        { role: 'weather', capabilities: ['weather.forecast'], candidates: [{ agent: weather.did, peer: weatherNode.transport.peerId.toString() }] }
      ]
    })
    await until(() => (venueNode.teams.team(team.id)?.length ?? 0) >= 1 || undefined, { timeout: 20_000, what: 'the venue node holds the team' })
    const member = venueNode.teams.team(team.id) as Team
    await team.say('The forecast says storms on Friday evening')

    // the watcher's key, a member's token for it
    const key = ioa(['key', 'new', '--out', 'watcher.key', '--json'], dir)
    const made = await key.done
    expect(made.code, made.stderr).toBe(0)
    const watcherDid = JSON.parse(made.stdout).did as string
    const proof = await tokenFile(dir, 'watch.token', venue, watcherDid, team.id)
    const peer = venueNode.addresses()[0]

    const live = ioa(['team', 'watch', team.id, '--peer', peer, '--key', 'watcher.key', '--proof', proof, '--from', '1', '--json'], dir)
    const seqs = (): number[] => live.lines.map(l => JSON.parse(l).seq)
    await until(() => seqs().includes(1) || undefined, { timeout: 30_000, what: 'the watcher prints entry 1' })
    await member.say('Hall B is free tonight, it holds four hundred people')
    await team.say('Then we move the concert to hall B')
    await until(() => seqs().length >= 3 || undefined, { timeout: 30_000, what: 'live entries' })
    await team.conclude('moved to hall B')
    const run = await live.done
    expect(run.code, run.stderr).toBe(0)
    const entries = run.stdout.trim().split('\n').map(l => JSON.parse(l))
    expect(entries.map(e => e.seq)).toEqual([1, 2, 3, 4])
    expect(entries.map(e => e.type)).toEqual(['discuss', 'discuss', 'discuss', 'conclude'])
    expect(entries[1]).toMatchObject({ from: venue.did, role: 'venue', type: 'discuss', body: { text: 'Hall B is free tonight, it holds four hundred people' } })
    expect(entries[3].body).toMatchObject({ summary: 'moved to hall B', outcome: 'done' })

    // the whole conversation, as text: the rosters give the senders' roles
    const text = await ioa(['team', 'watch', team.id, '--peer', peer, '--key', 'watcher.key', '--proof', proof], dir).done
    expect(text.code, text.stderr).toBe(0)
    const lines = text.stdout.trimEnd().split('\n')
    expect(lines).toHaveLength(5)
    expect(lines[0]).toMatch(/^ {3}0 {2}convener .*roster .*version 1, 3 members$/)
    expect(lines[2]).toMatch(/^ {3}2 {2}venue .*discuss .*Hall B is free tonight, it holds four hundred people$/)
    expect(lines[4]).toMatch(/^ {3}4 {2}convener .*conclude .*done: moved to hall B$/)

    // a token for another team is refused by the member's node: exit 1 with the code
    const other = await tokenFile(dir, 'other.token', venue, watcherDid, 'taaaaaaaaaaaaaaaaaaaaaaaaaa')
    const refused = await ioa(['team', 'watch', team.id, '--peer', peer, '--key', 'watcher.key', '--proof', other, '--json'], dir).done
    expect(refused.code).toBe(1)
    expect(JSON.parse(refused.stderr.trim().split('\n').at(-1) as string).error.code).toBe('UNAUTHORIZED')
    // usage errors: exit 2, naming the field
    const usage = await ioa(['team', 'watch', 'not-a-team', '--peer', peer, '--key', 'watcher.key', '--proof', proof, '--json'], dir).done
    expect(usage.code).toBe(2)
    expect(JSON.parse(usage.stderr.trim().split('\n').at(-1) as string).error).toMatchObject({ field: 'team' })
    const noProof = await ioa(['team', 'watch', team.id, '--peer', peer, '--key', 'watcher.key'], dir).done
    expect(noProof.code).toBe(2)
  })
})
