import { fileURLToPath } from 'node:url'
import { delegate } from '@ioa/collab'
import { createIdentity } from '@ioa/interconnect'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { expectErrorCode, expectErrorName, until } from '../../../test/util.js'
import { createIoaNode, startExternalAgent, startFromConfig } from '../src/index.js'
import type { ExternalAgent, ExternalAgentInit, IoaNode, NodeLogEvent, StartedNode } from '../src/index.js'
import type { TaskEvent, Token } from '@ioa/collab'
import type { Did, HostedAgent, Identity } from '@ioa/interconnect'

const ECHO = fileURLToPath(new URL('./fixtures/echo-agent.mjs', import.meta.url))
const BROKEN = fileURLToPath(new URL('./fixtures/broken-agent.mjs', import.meta.url))
const LISTEN = ['/ip4/127.0.0.1/tcp/0']

/** a: hosts the external agents; b: the requesters (and the agent the relay calls) */
let a: IoaNode
let b: IoaNode
let user: Identity
let client: HostedAgent
let reverser: HostedAgent
/** user -> client, text.* */
let grant: Token
const running: ExternalAgent[] = []
const started: StartedNode[] = []

beforeAll(async () => {
  a = await createIoaNode({ listen: LISTEN, domain: 'tools.example' })
  b = await createIoaNode({ listen: LISTEN, bootstrap: [a.addresses()[0]], domain: 'people.example' })
  user = await createIdentity()
  client = await b.host({ key: 'client', name: 'Client', skills: [{ id: 'assistant.chat' }] })
  reverser = await b.host({
    key: 'reverser',
    name: 'Reverser',
    skills: [{ id: 'text.reverse' }],
    handlers: {
      'text.reverse': (input, ctx) => ({
        text: [...(input as { text: string }).text].reverse().join(''),
        caller: ctx.caller,
        root: ctx.chain.root,
        deadline: ctx.deadline,
        path: ctx.chain.path.map(t => ({ iss: t.payload.iss, aud: t.payload.aud, cap: t.payload.cap, exp: t.payload.exp }))
      })
    }
  })
  grant = await delegate(user, { audience: client.did, capabilities: [{ skill: 'text.*' }], expiresAt: Date.now() + 600_000 })
}, 60_000)

afterEach(async () => {
  for (const e of running.splice(0)) await e.stop().catch(() => {})
  for (const s of started.splice(0)) await s.stop().catch(() => {})
})

afterAll(async () => {
  await b?.stop().catch(() => {})
  await a?.stop().catch(() => {})
})

interface Echo {
  ext: ExternalAgent
  events: Array<{ event: string, data: Record<string, unknown> }>
  logs: string[]
}

let keys = 0

/** The echo agent on node a, discovered from node b */
async function startEcho (init: Partial<ExternalAgentInit> = {}): Promise<Echo> {
  const events: Echo['events'] = []
  const logs: string[] = []
  const ext = await startExternalAgent(a, {
    command: [process.execPath, ECHO],
    card: { key: `echo-${++keys}`, name: 'Echo', skills: [] },
    options: { prefix: '>' },
    onEvent: (event, data) => { events.push({ event, data }) },
    onLog: line => { logs.push(line) },
    ...init
  })
  running.push(ext)
  await reachable(a, ext.agent.did)
  return { ext, events, logs }
}

/** Wait until node b finds the agent by capability and resolves its id (both DHT records are out) */
async function reachable (host: IoaNode, did: Did): Promise<void> {
  await host.interconnect.announced()
  await until(async () => {
    const found = await b.discover({ capability: 'text.upper' }, { cache: false, timeout: 5_000 })
    if (!found.some(d => d.card.id === did)) return undefined
    return await b.interconnect.resolve(did, { cache: false, timeout: 5_000 }).then(() => true, () => undefined)
  }, { timeout: 20_000, interval: 200, what: 'agent discovered and resolved' })
}

/** Proofs for the client to ask `to` something under the user's grant, delegated on to `to` */
async function proofsFor (to: Did): Promise<Token[]> {
  const sub = await b.delegate(client, { audience: to, capabilities: [{ skill: 'text.*' }], expiresAt: Date.now() + 300_000, proofs: [grant] })
  return [sub, grant]
}

async function ask (to: Did, skill: string, input: unknown, extra: { deadline?: number, proofs?: Token[], onEvent?: (e: TaskEvent) => void } = {}): Promise<unknown> {
  const done = await b.tasks.submitAndWait(client.identity, to, {
    skill,
    input,
    proofs: extra.proofs ?? await proofsFor(to),
    ...(extra.deadline != null ? { deadline: extra.deadline } : {})
  }, extra.onEvent != null ? { onEvent: extra.onEvent } : {})
  return done.result
}

describe('external agents over ioa-agent/1', () => {
  it('hosts the program with the skills of its hello and runs its tasks: results, progress, artifacts, errors', async () => {
    const { ext, events, logs } = await startEcho()
    expect(ext.pid).toBeGreaterThan(0)
    expect(ext.skills).toEqual(['text.upper', 'text.fail', 'text.slow', 'text.relay', 'text.crash', 'text.noise', 'text.huge', 'text.badcalls'])
    expect(ext.agent.card.card.name).toBe('Echo')
    expect(ext.agent.card.card.description).toBe('Upper-cases text, and misbehaves on request')
    expect(ext.agent.card.card.skills[0]).toMatchObject({ id: 'text.upper', tags: ['text'], inputSchema: { type: 'object', required: ['text'] } })
    // the welcome names the agent; the options come in the environment and the welcome
    const welcome = await until(() => events.find(e => e.event === 'welcome'), { what: 'welcome event' })
    expect(welcome.data).toEqual({ did: ext.agent.did, options: { prefix: '>' }, env: { prefix: '>' } })
    expect(logs).toContain('echo agent starting')

    const seen: TaskEvent[] = []
    const done = await b.tasks.submitAndWait(client.identity, ext.agent.did, {
      skill: 'text.upper', input: { text: 'hello' }, proofs: await proofsFor(ext.agent.did)
    }, { onEvent: e => { seen.push(e) } })
    expect(done.state).toBe('completed')
    expect(done.result).toEqual({ text: '>HELLO', caller: client.did, root: user.did })
    expect(done.messages).toContain('upper-casing')
    expect(done.artifacts).toEqual([{ kind: 'note', length: 5 }])
    expect(seen.some(e => e.type === 'artifact')).toBe(true)

    const err = await expectErrorCode(ask(ext.agent.did, 'text.fail', { text: 'nope' }), 'TEXT_REJECTED')
    expect(err.message).toBe('will not take "nope"')
    expect(ext.protocolErrors).toBe(0)
  }, 60_000)

  it('sends cancel on a deadline and on a cancel, and bounds concurrent tasks', async () => {
    const { ext, events } = await startEcho({ maxConcurrentTasks: 1 })
    const did = ext.agent.did

    await expectErrorCode(ask(did, 'text.slow', {}, { deadline: Date.now() + 1_500 }), 'DEADLINE_EXCEEDED')
    const onDeadline = await until(() => events.find(e => e.event === 'canceled'), { what: 'cancel after the deadline' })
    expect(onDeadline.data.reason).toBe('deadline')

    // a requester's cancel; meanwhile a second task finds the one slot taken
    const taskId = `slow-${Date.now()}`
    const first = b.tasks.submitAndWait(client.identity, did, { skill: 'text.slow', input: {}, proofs: await proofsFor(did), taskId })
    first.catch(() => {})
    await until(async () => {
      const t = await b.tasks.get(did, taskId).catch(() => undefined)
      return t?.messages.includes('started') || undefined
    }, { what: 'slow task started' })
    await expectErrorCode(ask(did, 'text.slow', { ms: 10 }), 'TOO_MANY_TASKS')
    await b.tasks.cancel(did, taskId)
    await expectErrorCode(first, 'CANCELED')
    const onCancel = await until(() => events.find(e => e.event === 'canceled' && e.data.task === taskId), { what: 'cancel message' })
    expect(onCancel.data.reason).toBe('canceled')

    // the slot is free again
    expect(await ask(did, 'text.slow', { ms: 10 })).toBe('slept')
  }, 60_000)

  it('relays a call to another agent under a token it delegates on, rooted at the original requester', async () => {
    const { ext } = await startEcho({ discoveryTimeout: 2_000 })
    const did = ext.agent.did
    await until(async () => {
      const found = await a.discover({ capability: 'text.reverse' }, { cache: false, timeout: 5_000 })
      return found.some(d => d.card.id === reverser.did) || undefined
    }, { timeout: 20_000, interval: 200, what: 'reverser discovered from node a' })

    const deadline = Date.now() + 30_000
    const out = await ask(did, 'text.relay', { skill: 'text.reverse', text: 'hello' }, { deadline }) as {
      relayed: { text: string, caller: Did, root: Did, deadline: number, path: Array<{ iss: Did, aud: Did, cap: unknown, exp: number }> }
      by: Did
    }
    expect(out.by).toBe(did)
    expect(out.relayed.text).toBe('olleh')
    expect(out.relayed.caller).toBe(did)
    expect(out.relayed.root).toBe(user.did)
    expect(out.relayed.deadline).toBeLessThanOrEqual(deadline)
    const [leaf, sub, root] = out.relayed.path
    expect(out.relayed.path).toHaveLength(3)
    // exactly the skill, no longer than the parent chain and the task
    expect(leaf).toMatchObject({ iss: did, aud: reverser.did, cap: [{ skill: 'text.reverse' }] })
    expect(leaf.exp).toBeLessThanOrEqual(Math.min(sub.exp, deadline))
    expect(sub).toMatchObject({ iss: client.did, aud: did })
    expect(root).toMatchObject({ iss: user.did, aud: client.did })

    // without a task: on the agent's own authority
    const own = await ask(did, 'text.relay', { skill: 'text.reverse', text: 'abc', own: true }) as { relayed: { text: string, root: Did, path: unknown[] } }
    expect(own.relayed).toMatchObject({ text: 'cba', root: did })
    expect(own.relayed.path).toHaveLength(1)

    // a chain that grants the client, not the agent, cannot be delegated on
    await expectErrorCode(ask(did, 'text.relay', { skill: 'text.reverse', text: 'x' }, { proofs: [grant] }), 'UNAUTHORIZED')
    // a chain that does not cover the skill
    const narrow = await b.delegate(client, { audience: did, capabilities: [{ skill: 'text.relay' }], expiresAt: Date.now() + 60_000, proofs: [grant] })
    await expectErrorCode(ask(did, 'text.relay', { skill: 'text.reverse', text: 'x' }, { proofs: [narrow, grant] }), 'UNAUTHORIZED')
    // nobody serves it
    await expectErrorCode(ask(did, 'text.relay', { skill: 'text.nobody', text: 'x' }), 'NO_PROVIDER')
    // malformed calls are answered (a bad field is also a protocol error, not the task's failure)
    const before = ext.protocolErrors
    const answers = await ask(did, 'text.badcalls', {}) as Record<string, string>
    expect(Object.entries(answers).map(([k, v]) => `${k.split('-').slice(0, 2).join('-')}:${v}`).sort()).toEqual(['bad-skill:INVALID_CALL', 'bad-task:UNKNOWN_TASK'])
    expect(ext.protocolErrors).toBe(before + 1)
  }, 90_000)

  it('fails running tasks with AGENT_EXITED when the program crashes, and unserves and unhosts it', async () => {
    const { ext, logs } = await startEcho()
    const did = ext.agent.did
    const err = await expectErrorCode(ask(did, 'text.crash', {}), 'AGENT_EXITED')
    expect(err.message).toMatch(/code 3/)
    expect(await ext.exited).toBe(3)
    expect(logs).toContain('crashing on purpose')
    expect(a.interconnect.agents().map(x => x.did)).not.toContain(did)
    // the skills are no longer served: a new task is refused, not hung
    const again = await b.tasks.submitAndWait(client.identity, did, { skill: 'text.upper', input: { text: 'x' }, proofs: await proofsFor(did) })
      .then(() => undefined, (e: { code?: string }) => e)
    // (the requester may still know the route: the node answers that nobody serves it there)
    expect(['NO_PROVIDER', 'UNKNOWN_AGENT']).toContain(again?.code)
    await ext.stop()
  }, 60_000)

  it('counts bad lines without crashing, fails the task of an oversized line, and kills the program at maxProtocolErrors', async () => {
    const { ext, logs } = await startEcho({ maxLineBytes: 65_536, maxProtocolErrors: 7 })
    const did = ext.agent.did
    expect(await ask(did, 'text.noise', { lines: 4 })).toBe('noisy')
    expect(ext.protocolErrors).toBe(4)
    expect(logs.filter(l => l.startsWith('protocol error: '))).toHaveLength(4)
    expect(logs.some(l => /Not JSON: not json at all/.test(l))).toBe(true)
    expect(logs.some(l => /Unknown message type "bogus"/.test(l))).toBe(true)
    expect(logs.some(l => /Unknown task no-such-task/.test(l))).toBe(true)

    const err = await expectErrorCode(ask(did, 'text.huge', { bytes: 100_000 }), 'LINE_TOO_LONG')
    expect(err.message).toMatch(/exceeds maxLineBytes \(65536\)/)
    expect(ext.protocolErrors).toBe(5)
    // still serving
    expect(await ask(did, 'text.upper', { text: 'ok' })).toMatchObject({ text: '>OK' })

    // two more bad lines reach the limit: the program is killed, its task fails
    const killed = await expectErrorCode(ask(did, 'text.noise', { lines: 4 }), 'AGENT_EXITED')
    expect(killed.message).toMatch(/7 protocol errors/)
    expect(await ext.exited).toBeNull()
    expect(a.interconnect.agents().map(x => x.did)).not.toContain(did)
  }, 60_000)

  it('stops a program: shutdown, then SIGTERM, then SIGKILL', async () => {
    const polite = await startEcho()
    const did = polite.ext.agent.did
    await polite.ext.stop()
    expect(await polite.ext.exited).toBe(0)
    expect(polite.events.some(e => e.event === 'shutdown')).toBe(true)
    expect(a.interconnect.agents().map(x => x.did)).not.toContain(did)

    const events: string[] = []
    const logs: string[] = []
    const controller = new AbortController()
    const stubborn = await startExternalAgent(a, {
      command: [process.execPath, ECHO],
      card: { key: 'stubborn', name: 'Stubborn', skills: [{ id: 'text.upper' }] },
      options: { stubborn: true },
      stopGrace: 300,
      signal: controller.signal,
      onEvent: e => { events.push(e) },
      onLog: l => { logs.push(l) }
    })
    running.push(stubborn)
    // the configured skills (a subset of the hello's) are the ones served
    expect(stubborn.skills).toEqual(['text.upper'])
    expect(stubborn.agent.card.card.skills.map(s => s.id)).toEqual(['text.upper'])
    const t0 = Date.now()
    controller.abort()
    expect(await stubborn.exited).toBeNull()
    await stubborn.stop()
    expect(Date.now() - t0).toBeGreaterThanOrEqual(550)
    expect(events).toContain('shutdown')
    expect(logs).toContain('ignoring SIGTERM')
    expect(a.interconnect.agents().map(x => x.did)).not.toContain(stubborn.agent.did)
  }, 60_000)

  it('merges a configured skill with the program\'s: the config overrides field by field, the hello\'s tags and schemas stay (discovered over TCP)', async () => {
    const { ext } = await startEcho({
      card: { key: `merged-${++keys}`, name: 'Echo', skills: [{ id: 'text.upper', description: 'Configured: upper-case a text' }, { id: 'text.slow', tags: ['configured'] }] }
    })
    expect(ext.skills).toEqual(['text.upper', 'text.slow'])
    const found = await b.discover({ capability: 'text.upper' }, { cache: false, timeout: 5_000 })
    const card = found.find(d => d.card.id === ext.agent.did)?.card
    expect(card?.skills).toEqual([
      // the hello's tags and input schema, the configured description
      { id: 'text.upper', description: 'Configured: upper-case a text', tags: ['text'], inputSchema: { type: 'object', required: ['text'] } },
      { id: 'text.slow', tags: ['configured'] }
    ])
  }, 60_000)

  it('fails a bad start with a typed error and kills the program', async () => {
    const start = async (mode: string, init: Partial<ExternalAgentInit> = {}): Promise<ExternalAgent> =>
      startExternalAgent(a, { command: [process.execPath, BROKEN, mode], card: { key: 'broken', name: 'Broken', skills: [] }, startTimeout: 2_000, ...init })

    const t0 = Date.now()
    await expectErrorName(start('silent', { startTimeout: 300 }), 'AgentStartTimeoutError')
    expect(Date.now() - t0).toBeLessThan(2_000)
    await expectErrorCode(start('garbage'), 'AGENT_PROTOCOL_ERROR')
    await expectErrorCode(start('version'), 'UNSUPPORTED_PROTOCOL')
    const exit = await expectErrorCode(start('exit'), 'AGENT_START_FAILED')
    expect(exit.message).toMatch(/code 2/)
    expect(exit.message).toMatch(/missing API key/)
    await expectErrorCode(start('oversized', { maxLineBytes: 65_536 }), 'LINE_TOO_LONG')
    await expectErrorCode(start('partial', { card: { key: 'broken', name: 'Broken', skills: [{ id: 'text.upper' }] } }), 'SKILL_MISMATCH')
    await expectErrorCode(startExternalAgent(a, { command: ['/nonexistent/agent-program'], card: { key: 'broken', name: 'Broken', skills: [] } }), 'AGENT_START_FAILED')
    const aborted = new AbortController()
    const pending = start('silent', { signal: aborted.signal })
    aborted.abort()
    await expectErrorCode(pending, 'AGENT_START_FAILED')
    await expect(start('silent', { maxLineBytes: 0 })).rejects.toThrow(RangeError)
    // nothing was left hosted
    expect(a.interconnect.agents().map(x => x.card.card.name)).not.toContain('Broken')
  }, 60_000)

  it('kills a program that leaves its input unread past maxPendingWriteBytes', async () => {
    const deaf = await startExternalAgent(a, {
      command: [process.execPath, BROKEN, 'deaf'],
      card: { key: 'deaf', name: 'Deaf', skills: [] },
      maxPendingWriteBytes: 100_000
    })
    running.push(deaf)
    const local = await a.host({ key: 'local-requester', name: 'Local', skills: [{ id: 'assistant.chat' }] })
    try {
      const token = await a.delegate(local, { audience: deaf.agent.did, capabilities: [{ skill: 'text.upper' }], expiresAt: Date.now() + 60_000 })
      const text = 'x'.repeat(50_000)
      const outcomes = await Promise.allSettled(Array.from({ length: 6 }, async () =>
        a.tasks.submitAndWait(local.identity, deaf.agent.did, { skill: 'text.upper', input: { text }, proofs: [token] })))
      for (const o of outcomes) {
        expect(o.status).toBe('rejected')
        const err = (o as PromiseRejectedResult).reason
        expect(err.code).toBe('AGENT_EXITED')
        expect(err.message).toMatch(/more than 100000 bytes of its input unread/)
      }
      expect(await deaf.exited).toBeNull()
    } finally {
      await a.interconnect.unhost(local.did)
    }
  }, 60_000)

  it('runs a config agent with a command through startFromConfig', async () => {
    const events: NodeLogEvent[] = []
    const node = await startFromConfig({
      listen: LISTEN,
      bootstrap: [a.addresses()[0]],
      agents: [{
        key: 'echo',
        name: 'Echo (config)',
        skills: [{ id: 'text.upper', description: 'Upper-case' }],
        command: [process.execPath, ECHO],
        options: { prefix: 'cfg:' }
      }]
    }, { onEvent: e => { events.push(e) } })
    started.push(node)
    const [echo] = node.agents
    expect(echo.kind).toBe('command')
    await reachable(node.node, echo.agent.did)

    expect(await ask(echo.agent.did, 'text.upper', { text: 'abc' })).toMatchObject({ text: 'cfg:ABC' })
    // only the configured skills are served
    await expectErrorCode(ask(echo.agent.did, 'text.fail', { text: 'x' }), 'NO_PROVIDER')
    await until(() => events.some(e => e.source === 'echo' && e.event === 'task-completed'), { what: 'task event' })
    expect(events.some(e => e.source === 'echo' && e.event === 'welcome' && e.data.did === echo.agent.did)).toBe(true)
    expect(events.some(e => e.source === 'echo' && e.event === 'stderr' && e.data.line === 'echo agent starting')).toBe(true)
  }, 60_000)
})
