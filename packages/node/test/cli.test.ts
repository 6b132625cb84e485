/**
 * The `ioa` tool, run as separate OS processes (`node packages/node/bin/ioa.js`,
 * the built package): one `ioa start --json` node hosting an echo agent, and
 * every client command against it over TCP.
 */
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { LevelDatastore } from 'datastore-level'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { LOOPBACK, until } from '../../../test/util.js'
import type { ChildProcess } from 'node:child_process'

const BIN = fileURLToPath(new URL('../bin/ioa.js', import.meta.url))
const ECHO_AGENT = fileURLToPath(new URL('./fixtures/cli/echo-agent.mjs', import.meta.url))

interface Run { code: number | null, stdout: string, stderr: string }
interface ErrorLine { code: string, message: string, field?: string }

let dir: string
let home: string
let node: ChildProcess | undefined
let nodeStderr = ''
const lines: any[] = []
let ready: any
let addr: string
let agentDid: string

/** Run `ioa …` in a child process; resolves when it exits */
async function ioa (args: string[], options: { home?: string, timeout?: number, env?: Record<string, string> } = {}): Promise<Run> {
  const env: Record<string, string | undefined> = { ...process.env, IOA_HOME: options.home ?? home }
  delete env.IOA_BOOTSTRAP
  delete env.IOA_KEY_PASSPHRASE
  Object.assign(env, options.env)
  const child = spawn(process.execPath, [BIN, ...args], { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (c: string) => { stdout += c })
  child.stderr.setEncoding('utf8').on('data', (c: string) => { stderr += c })
  const timer = setTimeout(() => child.kill('SIGKILL'), options.timeout ?? 30_000)
  const [code] = await once(child, 'close') as [number | null]
  clearTimeout(timer)
  return { code, stdout, stderr }
}

/** Start an ioa process, collect its JSON lines, SIGINT it once `match` matches one; resolves to that line */
async function interrupted (args: string[], match: (e: any) => boolean, env: Record<string, string> = {}): Promise<any> {
  const child = spawn(process.execPath, [BIN, ...args], { cwd: dir, env: { ...process.env, IOA_HOME: home, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  const seen: any[] = []
  createInterface({ input: child.stdout! }).on('line', line => { seen.push(JSON.parse(line)) })
  const hit = await until(() => seen.find(match), { timeout: 30_000, what: `a line of ioa ${args[0]}` })
  child.kill('SIGINT')
  await once(child, 'exit')
  return hit
}

/** The JSON document a one-shot command printed */
function json (run: Run): any {
  expect(run.code, run.stderr).toBe(0)
  return JSON.parse(run.stdout)
}

/** The JSON lines of a stream */
function jsonLines (text: string): any[] {
  return text.split('\n').filter(l => l.trim() !== '').map(l => JSON.parse(l))
}

/** The one `{"error":…}` line of a failed `--json` command */
function errorLine (run: Run): ErrorLine {
  const all = run.stderr.split('\n').filter(l => l.trim() !== '')
  expect(all, run.stderr).toHaveLength(1)
  return JSON.parse(all[0]).error
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'ioa-cli-'))
  home = join(dir, 'home')
  const config = join(dir, 'node.json')
  await writeFile(config, JSON.stringify({
    domain: 'demo.example',
    limits: { allow: LOOPBACK }, // dozens of client processes on 127.0.0.1 dial this node
    // a task nobody follows is canceled ABANDONED after 3 leases (3 s): the --follow test
    // leaves one unfollowed between two client processes, which can take longer under load
    tasks: { abandonAfter: 60_000 },
    agents: [{ key: 'echo', name: 'Echo agent', module: ECHO_AGENT, skills: [{ id: 'demo.echo', tags: ['test'] }, { id: 'demo.wait' }] }]
  }))
  node = spawn(process.execPath, [BIN, 'start', '--json', '--config', config], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] })
  node.stderr!.setEncoding('utf8').on('data', (c: string) => { nodeStderr += c })
  createInterface({ input: node.stdout! }).on('line', line => { lines.push(JSON.parse(line)) })
  ready = await until(() => lines[0], { timeout: 30_000, what: `the ready line (stderr: ${nodeStderr})` })
  addr = ready.addresses[0]
  agentDid = ready.agents[0].did
})

afterAll(async () => {
  if (node != null && node.exitCode == null && node.signalCode == null) {
    node.kill('SIGKILL')
    await once(node, 'exit')
  }
  await rm(dir, { recursive: true, force: true })
})

describe('ioa start --json', () => {
  it('prints the ready line first, then the node events as JSON lines', async () => {
    expect(lines[0].type).toBe('ready')
    expect(ready.peerId).toMatch(/^12D3KooW/)
    expect(ready.addresses.length).toBeGreaterThan(0)
    for (const a of ready.addresses) expect(a).toMatch(new RegExp(`^/ip4/127\\.0\\.0\\.1/tcp/\\d+/p2p/${ready.peerId}$`))
    expect(ready.domain).toBe('demo.example')
    expect(ready.agents).toEqual([{ key: 'echo', did: expect.stringMatching(/^did:key:z6Mk/), name: 'Echo agent', skills: ['demo.echo', 'demo.wait'], kind: 'module' }])
    expect(ready.gateway).toBeNull()
    // the module's log call, made while the node started, comes after the ready line
    const loaded = await until(() => lines.find(l => l.type === 'event' && l.event === 'loaded'), { what: 'the loaded event' })
    expect(lines.indexOf(loaded)).toBeGreaterThan(0)
    expect(loaded).toEqual({ type: 'event', at: expect.any(Number), source: 'echo', event: 'loaded', data: { text: `echo agent ${agentDid} ready` } })
  })
})

describe('ioa key', () => {
  it('writes a 0600 key file, shows it, refuses to overwrite it and rejects a file whose did is not its seed\'s', async () => {
    const [created, human] = await Promise.all([
      ioa(['key', 'new', '--out', 'user.key', '--json']),
      ioa(['key', 'new', '--out', 'sender.key'])
    ])
    const user = json(created)
    expect(user).toEqual({ did: expect.stringMatching(/^did:key:z6Mk/), file: join(dir, 'user.key') })
    expect((await stat(join(dir, 'user.key'))).mode & 0o777).toBe(0o600)
    const file = JSON.parse(await readFile(join(dir, 'user.key'), 'utf8'))
    expect(file).toEqual({ type: 'ed25519', seed: expect.stringMatching(/^[0-9a-f]{64}$/), did: user.did })
    expect(human.code).toBe(0)
    const senderDid = human.stdout.split('\n')[0]
    expect(senderDid).toMatch(/^did:key:z6Mk/)

    const sender = JSON.parse(await readFile(join(dir, 'sender.key'), 'utf8'))
    await writeFile(join(dir, 'forged.key'), JSON.stringify({ ...file, did: sender.did }))
    const [shown, shownHuman, again, forged] = await Promise.all([
      ioa(['key', 'show', '--key', 'user.key', '--json']),
      ioa(['key', 'show', '--key', 'sender.key']),
      ioa(['key', 'new', '--out', 'user.key', '--json']),
      ioa(['key', 'show', '--key', 'forged.key', '--json'])
    ])
    expect(json(shown)).toMatchObject({ did: user.did, type: 'ed25519' })
    expect(shownHuman.stdout.trim()).toBe(senderDid)
    expect(again.code).toBe(2)
    expect(errorLine(again)).toMatchObject({ code: 'FILE_EXISTS', field: '--out' })
    expect(JSON.parse(await readFile(join(dir, 'user.key'), 'utf8')).seed).toBe(file.seed)
    expect(forged.code).toBe(2)
    expect(errorLine(forged)).toMatchObject({ code: 'INVALID_KEY_FILE', field: 'did' })
  })
})

describe('looking agents up', () => {
  it('ioa agents lists the verified cards of a node', async () => {
    const [asJson, human] = await Promise.all([
      ioa(['agents', '--peer', addr, '--json']),
      ioa(['agents', '--peer', addr, '--data-dir', join(dir, 'agents-home')])
    ])
    const agents = json(asJson)
    expect(agents).toHaveLength(1)
    expect(agents[0]).toMatchObject({ did: agentDid, name: 'Echo agent', domain: 'demo.example', skills: ['demo.echo', 'demo.wait'] })
    expect(agents[0].card.peer).toBe(ready.peerId)
    expect(human.code).toBe(0)
    expect(human.stdout).toContain(agentDid)
    expect(human.stdout).toContain('demo.echo')
  })

  it('ioa discover finds the agent by capability, with tag and domain filters', async () => {
    const [found, human, none] = await Promise.all([
      ioa(['discover', 'demo', '--bootstrap', addr, '--tag', 'test', '--json']),
      ioa(['discover', 'demo.echo', '--bootstrap', addr, '--domain', 'demo.example', '--data-dir', join(dir, 'discover-home')]),
      ioa(['discover', 'demo', '--bootstrap', addr, '--tag', 'nope', '--json', '--data-dir', join(dir, 'discover-home-2')])
    ])
    const results = json(found)
    expect(results).toHaveLength(1)
    expect(results[0]).toMatchObject({ rank: 1, did: agentDid, name: 'Echo agent', domain: 'demo.example', skills: ['demo.echo'], peer: ready.peerId })
    expect(typeof results[0].score).toBe('number')
    expect(human.code, human.stderr).toBe(0)
    expect(human.stdout).toMatch(new RegExp(`^ 1  Echo agent  ${agentDid}  peer ${ready.peerId}`, 'm'))
    expect(human.stderr).toContain('looking up demo.echo')
    expect(json(none)).toEqual([])
  })

  it('ioa card resolves and verifies a card, and exits 1 with UNKNOWN_AGENT for an agent nobody hosts', async () => {
    const other = JSON.parse(await readFile(join(dir, 'sender.key'), 'utf8')).did
    const [card, human, missing] = await Promise.all([
      ioa(['card', agentDid, '--bootstrap', addr, '--json']),
      ioa(['card', agentDid, '--bootstrap', addr, '--data-dir', join(dir, 'card-home')]),
      ioa(['card', other, '--bootstrap', addr, '--timeout', '5s', '--json', '--data-dir', join(dir, 'card-home-2')])
    ])
    const c = json(card)
    expect(c).toMatchObject({ did: agentDid, verified: true, peers: [ready.peerId] })
    expect(c.card).toMatchObject({ id: agentDid, name: 'Echo agent', peer: ready.peerId })
    expect(c.sig).toMatch(/^[A-Za-z0-9_-]{86}$/)
    expect(human.stdout).toContain('signature ok')
    expect(human.stdout).toContain(`bound to ${ready.peerId}`)
    expect(missing.code).toBe(1)
    expect(errorLine(missing).code).toBe('UNKNOWN_AGENT')
  })
})

describe('delegation, tasks and revocation', () => {
  let userToken: { token: string, cid: string, payload: any }
  let senderDid: string
  let userDid: string
  let taskId: string

  it('ioa delegate signs a token and refuses chains that escalate or are not addressed to the issuer', async () => {
    senderDid = JSON.parse(await readFile(join(dir, 'sender.key'), 'utf8')).did
    userDid = JSON.parse(await readFile(join(dir, 'user.key'), 'utf8')).did
    const before = Date.now()
    userToken = json(await ioa(['delegate', '--key', 'user.key', '--to', senderDid, '--skill', 'demo.*', '--constraint', 'maxAmount=10', '--constraint', 'note=hi', '--expires', '30m', '--out', 'user.token', '--json']))
    expect(userToken.token).toMatch(/^[A-Za-z0-9_-]+$/)
    expect(userToken.cid).toMatch(/^bafy/)
    expect(userToken.payload).toMatchObject({ v: 1, iss: userDid, aud: senderDid, cap: [{ skill: 'demo.*', constraints: { maxAmount: 10, note: 'hi' } }], prf: [] })
    expect(userToken.payload.exp).toBeGreaterThanOrEqual(before + 30 * 60_000)
    expect(userToken.payload.exp).toBeLessThanOrEqual(Date.now() + 30 * 60_000)
    expect((await readFile(join(dir, 'user.token'), 'utf8')).trim()).toBe(userToken.token)

    const third = 'did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK'
    const [sub, escalated, tooLong, notMine] = await Promise.all([
      ioa(['delegate', '--key', 'sender.key', '--to', third, '--skill', 'demo.echo', '--constraint', 'maxAmount=5', '--constraint', 'note=hi', '--proof', '@user.token']),
      ioa(['delegate', '--key', 'sender.key', '--to', third, '--skill', '*', '--constraint', 'maxAmount=5', '--proof', '@user.token', '--json']),
      ioa(['delegate', '--key', 'sender.key', '--to', third, '--skill', 'demo.echo', '--constraint', 'maxAmount=5', '--expires', '2h', '--proof', userToken.token, '--json']),
      ioa(['delegate', '--key', 'user.key', '--to', third, '--skill', 'demo.echo', '--proof', '@user.token', '--json'])
    ])
    expect(sub.code, sub.stderr).toBe(0)
    expect(sub.stdout.trim()).toMatch(/^[A-Za-z0-9_-]+$/)
    expect(escalated.code).toBe(2)
    expect(errorLine(escalated).code).toBe('ESCALATION')
    expect(tooLong.code).toBe(2)
    expect(errorLine(tooLong)).toMatchObject({ code: 'ESCALATION', message: expect.stringContaining('expires after') })
    expect(notMine.code).toBe(2)
    expect(errorLine(notMine).code).toBe('PRINCIPAL_MISMATCH')
    // the ESCALATION names the constraint (issue 11 item 14)
    expect(errorLine(await ioa(['delegate', '--key', 'sender.key', '--to', third, '--skill', 'demo.echo', '--constraint', 'maxAmount=50', '--constraint', 'note=hi', '--proof', '@user.token', '--json'])).message)
      .toMatch(/maxAmount is 50, the proof allows at most 10/)
  })

  it('ioa delegate takes constraints per skill: --skill \'name{key=value,…}\' (issue 11 item 6)', async () => {
    const third = 'did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK'
    const [own, bad] = await Promise.all([
      ioa(['delegate', '--key', 'user.key', '--to', third, '--skill', 'shop.order{maxAmount=500,currency=["EUR","USD"]}', '--skill', 'shop.catalog', '--skill', 'shop.refund{maxAmount=50}', '--constraint', 'region=eu', '--constraint', 'maxAmount=900', '--json']),
      ioa(['delegate', '--key', 'user.key', '--to', third, '--skill', 'shop.order{maxAmount=500', '--json'])
    ])
    expect(json(own).payload.cap).toEqual([
      { skill: 'shop.order', constraints: { region: 'eu', maxAmount: 500, currency: ['EUR', 'USD'] } },
      { skill: 'shop.catalog', constraints: { region: 'eu', maxAmount: 900 } },
      { skill: 'shop.refund', constraints: { region: 'eu', maxAmount: 50 } }
    ])
    expect(bad.code).toBe(2)
    expect(errorLine(bad)).toMatchObject({ field: '--skill' })
  })

  it('ioa submit follows a task to completion and ioa task shows it to the submitting peer only', async () => {
    const run = await ioa(['submit', '--key', 'sender.key', '--to', agentDid, '--skill', 'demo.echo', '--input', '{"hello":"world"}', '--proof', '@user.token', '--deadline', '30s', '--bootstrap', addr, '--json'])
    expect(run.code, run.stderr).toBe(0)
    const events = jsonLines(run.stdout)
    expect(events[0]).toEqual({ type: 'task', taskId: expect.any(String), to: agentDid, skill: 'demo.echo', at: expect.any(Number) })
    taskId = events[0].taskId
    const statuses = events.filter(e => e.type === 'status')
    // (task protocol 2.0.0: a task that ends within the executor's hold-back is streamed as its final state alone)
    expect(statuses[0].task).toMatchObject({ id: taskId, state: expect.stringMatching(/^(submitted|working|completed)$/) })
    expect(statuses.some(e => e.task.messages.includes('working on it'))).toBe(true)
    expect(events.at(-1)).toEqual({ type: 'result', taskId, state: 'completed', result: { echoed: { hello: 'world' } } })
    // the node that ran it reported it on its own event stream
    const done = await until(() => lines.find(l => l.event === 'task-completed' && l.data.taskId === taskId), { what: 'the node\'s task-completed event' })
    expect(done).toMatchObject({ type: 'event', source: 'echo', data: { agent: agentDid, skill: 'demo.echo', caller: senderDid, root: userDid } })

    // another client (another data directory, so another peer) may not read it
    const [snapshot, stranger] = await Promise.all([
      ioa(['task', taskId, '--to', agentDid, '--bootstrap', addr, '--json']),
      ioa(['task', taskId, '--to', agentDid, '--bootstrap', addr, '--json', '--data-dir', join(dir, 'stranger-home')])
    ])
    expect(json(snapshot)).toMatchObject({ id: taskId, skill: 'demo.echo', state: 'completed', messages: ['working on it'], result: { echoed: { hello: 'world' } } })
    const shown = await ioa(['task', taskId, '--to', agentDid, '--bootstrap', addr])
    expect(shown.code, shown.stderr).toBe(0)
    expect(shown.stdout).toContain(`task ${taskId}  demo.echo  completed`)
    expect(stranger.code).toBe(1)
    expect(errorLine(stranger).code).toBe('UNAUTHORIZED')
  })

  it('ioa submit accepts an invocation chain: a token the sender issued to --to, proven by the user\'s (issue 11 item 5)', async () => {
    const invocation = json(await ioa(['delegate', '--key', 'sender.key', '--to', agentDid, '--skill', 'demo.echo', '--constraint', 'maxAmount=5', '--constraint', 'note=hi', '--proof', '@user.token', '--expires', '10m', '--out', 'invocation.token', '--json']))
    expect(invocation.payload).toMatchObject({ iss: senderDid, aud: agentDid })
    const [byDid, byCapability] = await Promise.all([
      ioa(['submit', '--key', 'sender.key', '--to', agentDid, '--skill', 'demo.echo', '--input', '{"amount":1,"audience":true}', '--proof', '@invocation.token', '--proof', '@user.token', '--bootstrap', addr, '--json']),
      ioa(['submit', '--key', 'sender.key', '--capability', 'demo', '--skill', 'demo.echo', '--input', '{"amount":2,"audience":true}', '--proof', '@user.token', '--proof', '@invocation.token', '--bootstrap', addr, '--json', '--data-dir', join(dir, 'invocation-home')])
    ])
    for (const [run, amount] of [[byDid, 1], [byCapability, 2]] as const) {
      expect(run.code, run.stderr).toBe(0)
      const events = jsonLines(run.stdout)
      expect(events.at(-1)).toMatchObject({ type: 'result', state: 'completed', result: { echoed: { amount, audience: true } } })
      // the executor is the chain's audience: it may delegate further
      expect(events.some(e => e.type === 'status' && e.task.messages.includes(`audience ${agentDid}`)), run.stdout).toBe(true)
    }
    const id = jsonLines(byDid.stdout)[0].taskId
    const done = await until(() => lines.find(l => l.event === 'task-completed' && l.data.taskId === id), { what: 'the invoked task\'s task-completed event' })
    expect(done.data).toMatchObject({ caller: senderDid, root: userDid })
    // a token the sender issued to another agent is not for this one
    const elsewhere = await ioa(['submit', '--key', 'sender.key', '--to', 'did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK', '--skill', 'demo.echo', '--proof', '@invocation.token', '--bootstrap', addr, '--json'])
    expect(elsewhere.code).toBe(2)
    expect(errorLine(elsewhere)).toMatchObject({ code: 'PRINCIPAL_MISMATCH', field: '--proof' })
  })

  it('ioa task --follow streams a task again after its submitter stopped following, and --cancel cancels it', async () => {
    // a task that runs until canceled; its submitter stops following (the task goes on)
    const working = await interrupted(['submit', '--key', 'sender.key', '--to', agentDid, '--skill', 'demo.wait', '--bootstrap', addr, '--json'],
      e => e.type === 'status' && e.task.state === 'working')
    const id: string = working.task.id
    // following it again streams its current state
    const again = await interrupted(['task', id, '--to', agentDid, '--follow', '--bootstrap', addr, '--json'], e => e.type === 'status')
    expect(again.task).toMatchObject({ id, state: 'working', messages: ['waiting'] })

    const canceled = await ioa(['task', id, '--to', agentDid, '--cancel', '--bootstrap', addr, '--json'])
    expect(canceled.code, canceled.stderr).toBe(0)
    expect(json(canceled)).toMatchObject({ id, state: 'canceled' })
    const ended = await ioa(['task', id, '--to', agentDid, '--follow', '--bootstrap', addr, '--json'])
    expect(ended.code).toBe(1)
    expect(jsonLines(ended.stdout).at(-1)).toMatchObject({ type: 'result', taskId: id, state: 'canceled', error: { code: 'CANCELED' } })

    const both = await ioa(['task', id, '--to', agentDid, '--follow', '--cancel', '--bootstrap', addr])
    expect(both.code).toBe(2)
  })

  it('ioa submit finds the provider by capability and, without proofs, signs its own grant (human output)', async () => {
    const run = await ioa(['submit', '--key', 'sender.key', '--capability', 'demo', '--skill', 'demo.echo', '--input', '[1,2]', '--bootstrap', addr])
    expect(run.code, run.stderr).toBe(0)
    expect(run.stdout).toMatch(/^task [0-9a-f-]{36} {2}demo\.echo → did:key:/)
    expect(run.stdout).toMatch(/\+\d+\.\d\ds {2}(working|completed) {2}working on it/)
    expect(run.stdout).toContain('completed')
    expect(run.stdout).toContain('"echoed": [\n    1,\n    2\n  ]')
    expect(run.stderr).toContain(`chose Echo agent ${agentDid}`)
  })

  it('ioa revoke publishes a revocation the node enforces: the token is REVOKED afterwards', async () => {
    const wrongKey = await ioa(['revoke', '--key', 'sender.key', '--token', '@user.token', '--bootstrap', addr, '--json'])
    expect(wrongKey.code).toBe(2)
    expect(errorLine(wrongKey)).toMatchObject({ code: 'NOT_AN_ISSUER', field: '--key' })

    const revoked = json(await ioa(['revoke', '--key', 'user.key', '--token', '@user.token', '--bootstrap', addr, '--json']))
    expect(revoked).toEqual({ revocation: expect.stringMatching(/^bafy/), token: userToken.cid, issuer: userDid, peers: 1, delivered: 1, skipped: 0 })

    const refused = await ioa(['submit', '--key', 'sender.key', '--to', agentDid, '--skill', 'demo.echo', '--input', '1', '--proof', '@user.token', '--bootstrap', addr, '--json'])
    expect(refused.code).toBe(1)
    expect(errorLine(refused).code).toBe('REVOKED')
    expect(jsonLines(refused.stdout).at(-1)).toMatchObject({ type: 'result', state: null, error: { code: 'REVOKED' } })
  })
})

describe('bad input', () => {
  it('exits 2 naming the unknown flag, the bad config field, the missing flag or argument, the bad multiaddr', async () => {
    await writeFile(join(dir, 'bad-field.json'), JSON.stringify({ agents: [{ key: 'bad key!', name: 'x', skills: [{ id: 'a.b' }] }] }))
    await writeFile(join(dir, 'bad-name.json'), JSON.stringify({ lisen: ['/ip4/127.0.0.1/tcp/0'] }))
    const runs = await Promise.all([
      ioa(['discover', 'demo', '--bootstrp', addr]),
      ioa(['discover', 'demo', '--bootstrp', addr, '--json']),
      ioa(['start', '--config', 'bad-field.json', '--json']),
      ioa(['start', '--config', 'bad-name.json']),
      ioa(['delegate', '--key', 'user.key', '--skill', 'demo.echo', '--json']),
      ioa(['discover', '--bootstrap', addr]),
      ioa(['discover', 'demo']),
      ioa(['agents', '--peer', '/ip4/127.0.0.1/tcp/1', '--json']),
      ioa(['frobnicate']),
      ioa(['key', 'frob', '--json']),
      ioa(['submit', '--key', 'sender.key', '--skill', 'demo.echo', '--bootstrap', addr, '--json']),
      ioa(['discover', 'demo', '--limit', 'many', '--bootstrap', addr, '--json'])
    ])
    for (const r of runs) expect(r.code, r.stderr).toBe(2)
    const [unknownFlag, unknownFlagJson, badField, badName, missingFlag, missingArg, noBootstrap, badAddr, unknownCommand, unknownSub, neither, badLimit] = runs
    expect(unknownFlag.stderr).toMatch(/^ioa: .*unknown option --bootstrp/)
    expect(unknownFlag.stdout).toBe('')
    expect(errorLine(unknownFlagJson)).toEqual({ code: 'USAGE', message: expect.stringContaining('--bootstrp'), field: '--bootstrp' })
    expect(errorLine(badField)).toMatchObject({ code: 'INVALID_CONFIG', field: 'agents.0.key' })
    expect(badName.stderr).toContain('unknown field "lisen"')
    expect(errorLine(missingFlag)).toMatchObject({ field: '--to', message: expect.stringContaining('--to') })
    expect(missingArg.stderr).toContain('<capability>')
    expect(noBootstrap.stderr).toContain('--bootstrap')
    expect(errorLine(badAddr)).toMatchObject({ code: 'INVALID_MULTIADDR', field: '--peer' })
    expect(unknownCommand.stderr).toContain('unknown command "frobnicate"')
    expect(errorLine(unknownSub).message).toContain('ioa key frob')
    expect(errorLine(neither).message).toContain('--capability')
    expect(errorLine(badLimit).field).toBe('--limit')
  })

  it('exits 1 with BOOTSTRAP_UNREACHABLE when no bootstrap peer answers, and DATA_DIR_LOCKED when the data directory is in use', async () => {
    const lockedDir = join(dir, 'locked-home')
    const holder = new LevelDatastore(lockedDir)
    await holder.open()
    try {
      const [unreachable, human, locked] = await Promise.all([
        ioa(['discover', 'demo', '--bootstrap', `/ip4/127.0.0.1/tcp/1/p2p/${ready.peerId}`, '--json', '--data-dir', join(dir, 'unreachable-home')]),
        ioa(['card', agentDid, '--bootstrap', `/ip4/127.0.0.1/tcp/1/p2p/${ready.peerId}`, '--data-dir', join(dir, 'unreachable-home-2')]),
        ioa(['agents', '--peer', addr, '--json', '--data-dir', lockedDir])
      ])
      expect(unreachable.code).toBe(1)
      expect(errorLine(unreachable)).toMatchObject({ code: 'BOOTSTRAP_UNREACHABLE' })
      expect(human.code).toBe(1)
      expect(human.stderr.trim().split('\n').at(-1)).toMatch(/^ioa: No bootstrap peer reachable .*\(BOOTSTRAP_UNREACHABLE\)$/)
      expect(locked.code).toBe(1)
      expect(errorLine(locked)).toMatchObject({ code: 'DATA_DIR_LOCKED', field: '--data-dir' })
    } finally {
      await holder.close()
    }
  })

  it('prints the help of ioa and of every command with --help or -h (exit 0)', async () => {
    const commands = ['start', 'key new', 'key show', 'key list', 'key passphrase', 'agents', 'discover', 'card', 'delegate', 'revoke', 'submit', 'task', 'team watch']
    const runs = await Promise.all([
      ioa(['--help']),
      ioa(['key', '--help']),
      ...commands.map((c, i) => ioa([...c.split(' '), i % 2 === 0 ? '--help' : '-h']))
    ])
    for (const r of runs) expect(r.code, r.stderr).toBe(0)
    const [main, key, ...each] = runs
    for (const c of commands) expect(main.stdout).toContain(`  ${c} `)
    expect(key.stdout).toContain('ioa key new')
    expect(key.stdout).toContain('ioa key show')
    each.forEach((r, i) => {
      expect(r.stdout).toContain(`ioa ${commands[i]} — `)
      expect(r.stdout).toContain('Usage:')
      expect(r.stdout).toContain('--json')
    })
  })
})

describe('keys at rest, over processes', () => {
  it('ioa start encrypts its data directory with the passphrase file, keeps its ids across restarts, refuses a wrong or missing passphrase (exit 2); ioa key list reads it, ioa key passphrase changes it', async () => {
    const agents = [{ key: 'keeper', name: 'Keeper', skills: [{ id: 'demo.keep' }] }]
    await writeFile(join(dir, 'node.pass'), 'the passphrase of the cli test\n', { mode: 0o600 })
    await writeFile(join(dir, 'keys.json'), JSON.stringify({ dataDir: 'encrypted-state', keyStore: { passphraseFile: 'node.pass' }, agents }))
    await writeFile(join(dir, 'keys-env.json'), JSON.stringify({ dataDir: 'encrypted-state', agents }))
    const isReady = (e: any): boolean => e.type === 'ready'
    const first = await interrupted(['start', '--json', '--config', 'keys.json'], isReady)
    const second = await interrupted(['start', '--json', '--config', 'keys.json'], isReady)
    expect(second.peerId).toBe(first.peerId)
    expect(second.agents[0].did).toBe(first.agents[0].did)

    // one process at a time holds the directory: these run in turn
    const wrong = await ioa(['start', '--json', '--config', 'keys-env.json'], { env: { IOA_KEY_PASSPHRASE: 'a wrong passphrase, long enough' } })
    expect(wrong.code).toBe(2)
    expect(errorLine(wrong)).toMatchObject({ code: 'WRONG_PASSPHRASE', field: '$IOA_KEY_PASSPHRASE' })
    const missing = await ioa(['start', '--json', '--config', 'keys-env.json'])
    expect(missing.code).toBe(2)
    expect(errorLine(missing)).toMatchObject({ code: 'PASSPHRASE_REQUIRED' })
    const fresh = await ioa(['start', '--json', '--data-dir', 'new-state'])
    expect(fresh.code).toBe(2)
    expect(errorLine(fresh)).toMatchObject({ code: 'PASSPHRASE_REQUIRED' })

    const listed = json(await ioa(['key', 'list', '--data-dir', 'encrypted-state', '--passphrase-file', 'node.pass', '--json']))
    expect(listed).toEqual({ dataDir: join(dir, 'encrypted-state'), encrypted: true, peerId: first.peerId, agents: [{ key: 'keeper', did: first.agents[0].did }] })
    const locked = await ioa(['key', 'list', '--data-dir', 'encrypted-state', '--json'])
    expect(locked.code).toBe(2)
    expect(errorLine(locked)).toMatchObject({ code: 'PASSPHRASE_REQUIRED' })
    // a new passphrase: the old one is refused from then on
    await writeFile(join(dir, 'new.pass'), 'the new passphrase of the cli test\n', { mode: 0o600 })
    const rotated = json(await ioa(['key', 'passphrase', '--data-dir', 'encrypted-state', '--passphrase-file', 'node.pass', '--new-passphrase-file', 'new.pass', '--json']))
    expect(rotated).toEqual({ dataDir: join(dir, 'encrypted-state'), keys: 2 })
    const stale = await ioa(['start', '--json', '--config', 'keys.json'])
    expect(stale.code).toBe(2)
    expect(errorLine(stale)).toMatchObject({ code: 'WRONG_PASSPHRASE', field: 'keyStore.passphraseFile' })
    // the environment variable works as well as the file
    const env = await interrupted(['start', '--json', '--config', 'keys-env.json'], isReady, { IOA_KEY_PASSPHRASE: 'the new passphrase of the cli test' })
    expect(env.peerId).toBe(first.peerId)
    expect(env.agents[0].did).toBe(first.agents[0].did)
  }, 120_000)

  it('the client commands work with a client home encrypted by $IOA_KEY_PASSPHRASE, and refuse it without', async () => {
    const encryptedHome = join(dir, 'encrypted-home')
    const env = { IOA_KEY_PASSPHRASE: 'the passphrase of the client home' }
    const cards = json(await ioa(['agents', '--peer', addr, '--json'], { home: encryptedHome, env }))
    expect(cards.map((c: any) => c.did)).toEqual([agentDid])
    const listed = json(await ioa(['key', 'list', '--json'], { home: encryptedHome, env }))
    expect(listed).toMatchObject({ encrypted: true, peerId: expect.stringMatching(/^12D3KooW/), agents: [] })
    const refused = await ioa(['agents', '--peer', addr, '--json'], { home: encryptedHome })
    expect(refused.code).toBe(2)
    expect(errorLine(refused)).toMatchObject({ code: 'PASSPHRASE_REQUIRED' })
    // a plaintext home is listed as such, and left as it is
    const plainHome = join(dir, 'plain-home')
    expect(json(await ioa(['agents', '--peer', addr, '--json'], { home: plainHome })).map((c: any) => c.did)).toEqual([agentDid])
    const plain = json(await ioa(['key', 'list', '--json'], { home: plainHome }))
    expect(plain).toMatchObject({ encrypted: false, peerId: expect.stringMatching(/^12D3KooW/) })
  }, 60_000)
})

describe('ioa start, stopping', () => {
  it('stops cleanly on SIGTERM: a stopped line, exit 0', async () => {
    const exited = once(node!, 'exit')
    node!.kill('SIGTERM')
    const [code] = await exited
    expect(code).toBe(0)
    await until(() => lines.at(-1)?.type === 'stopped', { timeout: 2_000, what: 'the stopped line' })
    expect(lines.filter(l => l.type === 'ready')).toHaveLength(1)
  })
})

describe('ioa start --log', () => {
  it('--log ioa:node* writes the node\'s debug lines to stderr; stdout stays JSON lines only', async () => {
    const env: Record<string, string | undefined> = { ...process.env, IOA_HOME: home }
    delete env.DEBUG
    const child = spawn(process.execPath, [BIN, 'start', '--json', '--log', 'ioa:node*'], { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', (c: string) => { stdout += c })
    child.stderr.setEncoding('utf8').on('data', (c: string) => { stderr += c })
    await until(() => stdout.includes('"type":"ready"'), { timeout: 30_000, what: `the ready line (stderr: ${stderr})` })
    const exited = once(child, 'exit')
    child.kill('SIGTERM')
    const [code] = await exited
    expect(code).toBe(0)
    const out = jsonLines(stdout)
    expect(out[0].type).toBe('ready')
    expect(out.at(-1).type).toBe('stopped')
    expect(out.every(l => l.type === 'ready' || l.type === 'event' || l.type === 'stopped')).toBe(true)
    expect(stderr).toMatch(/ioa:node started 12D3KooW/)
    expect(stderr).toMatch(/ioa:node stopped/)
    // a namespace outside the pattern stays off
    expect(stderr).not.toMatch(/libp2p:/)
  }, 60_000)

  it('--log without namespaces is a usage error naming --log (exit 2)', async () => {
    const run = await ioa(['start', '--log', '', '--json'])
    expect(run.code).toBe(2)
    expect(errorLine(run)).toMatchObject({ code: 'USAGE', field: '--log' })
  })
})
