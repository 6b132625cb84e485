/**
 * An external agent run against stubbed components (ExternalAgentComponents),
 * not a node: what it asks of the node and what it logs; and the written-out
 * error classes of the node package.
 */
import { fileURLToPath } from 'node:url'
import { defaultLogger } from '@libp2p/logger'
import { describe, expect, it } from 'vitest'
import {
  AgentExitedError, AgentProtocolError, AgentStartError, AgentStartTimeoutError, AgentTaskError, ConfigError, ExternalAgentError, KeyStoreError,
  LayerError, LineTooLongError, SkillMismatchError, TooManyTasksError, UnsupportedProtocolError, startExternalAgent
} from '../src/index.js'
import type { ExternalAgentComponents } from '../src/index.js'
import type { SkillContext, SkillHandler } from '@ioa/collab'
import type { HostedAgent } from '@ioa/interconnect'

const ECHO = fileURLToPath(new URL('./fixtures/echo-agent.mjs', import.meta.url))
const DID = 'did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK'

function stubs (): { components: ExternalAgentComponents, handlers: Record<string, SkillHandler>, calls: string[] } {
  const handlers: Record<string, SkillHandler> = {}
  const calls: string[] = []
  const components = {
    logger: defaultLogger(),
    host: async (init: { name?: string, skills?: Array<{ id: string }> }) => {
      calls.push(`host ${init.name ?? ''} ${(init.skills ?? []).map(s => s.id).join(',')}`)
      return { did: DID, card: { card: { name: init.name, domain: 'local' } } } as unknown as HostedAgent
    },
    serve: async (_agent: HostedAgent, h: Record<string, SkillHandler>) => {
      calls.push(`serve ${Object.keys(h).join(',')}`)
      Object.assign(handlers, h)
    },
    discover: async () => [],
    delegate: async () => { throw new Error('not used') },
    tasks: {
      submitAndWait: async () => { throw new Error('not used') },
      cancel: async () => {},
      unserve: (_did: string, skill: string) => { calls.push(`unserve ${skill}`) }
    },
    interconnect: {
      unhost: async (did: string) => { calls.push(`unhost ${did}`) }
    }
  } as unknown as ExternalAgentComponents
  return { components, handlers, calls }
}

function ctx (id: string): SkillContext {
  return {
    task: { id },
    caller: DID,
    chain: { root: DID, audience: DID, path: [] },
    deadline: Date.now() + 10_000,
    capability: { skill: 'text.upper' },
    signal: new AbortController().signal,
    progress: () => {},
    artifact: () => {}
  } as unknown as SkillContext
}

describe('external agent on stubbed components', () => {
  it('hosts and serves through the components, runs a task, and unserves and unhosts on stop', async () => {
    const { components, handlers, calls } = stubs()
    const ext = await startExternalAgent(components, {
      command: [process.execPath, ECHO],
      card: { key: 'echo', name: 'Echo', skills: [{ id: 'text.upper' }] }
    })
    try {
      expect(calls).toEqual(['host Echo text.upper', 'serve text.upper'])
      expect(ext.skills).toEqual(['text.upper'])
      const out = await handlers['text.upper']({ text: 'abc' }, ctx('00000000-0000-4000-8000-000000000001'))
      expect(JSON.stringify(out)).toContain('ABC')
    } finally {
      await ext.stop()
    }
    expect(calls.slice(2)).toContain('unserve text.upper')
    expect(calls.at(-1)).toBe(`unhost ${DID}`)
  }, 30_000)

  it('fails a start that the components refuse with the components\' error, after killing the program', async () => {
    const { components } = stubs()
    const refusing = { ...components, host: async () => { throw new ConfigError('no hosting here', 'agents.0') } }
    const err = await startExternalAgent(refusing, { command: [process.execPath, ECHO], card: { key: 'echo', name: 'Echo', skills: [] } }).catch(e => e)
    expect(err).toBeInstanceOf(ConfigError)
    expect(err).toMatchObject({ name: 'ConfigError', code: 'INVALID_CONFIG', field: 'agents.0' })
  }, 30_000)
})

describe('error classes of the node package', () => {
  it('have a static name and code, which their instances carry', () => {
    const classes = [
      [AgentStartError, 'AgentStartError', 'AGENT_START_FAILED'],
      [AgentStartTimeoutError, 'AgentStartTimeoutError', 'AGENT_START_TIMEOUT'],
      [UnsupportedProtocolError, 'UnsupportedProtocolError', 'UNSUPPORTED_PROTOCOL'],
      [SkillMismatchError, 'SkillMismatchError', 'SKILL_MISMATCH'],
      [AgentProtocolError, 'AgentProtocolError', 'AGENT_PROTOCOL_ERROR'],
      [LineTooLongError, 'LineTooLongError', 'LINE_TOO_LONG'],
      [AgentExitedError, 'AgentExitedError', 'AGENT_EXITED'],
      [TooManyTasksError, 'TooManyTasksError', 'TOO_MANY_TASKS']
    ] as const
    for (const [C, name, code] of classes) {
      expect(C.name).toBe(name)
      expect(C.code).toBe(code)
      const e = new C()
      expect(e).toBeInstanceOf(ExternalAgentError)
      expect(e).toMatchObject({ name, code })
      expect(e.message).not.toBe('')
    }
    expect(new AgentTaskError('TEXT_REJECTED', 'no')).toMatchObject({ name: 'AgentTaskError', code: 'TEXT_REJECTED', message: 'no' })
    expect(new ConfigError('bad', 'listen')).toMatchObject({ name: 'ConfigError', code: ConfigError.code, field: 'listen' })
    expect(ConfigError.code).toBe('INVALID_CONFIG')
    expect(new LayerError('x')).toMatchObject({ name: 'LayerError', code: 'LAYER_FAILED' })
    expect(new KeyStoreError('WRONG_PASSPHRASE', 'x', { field: '$IOA_KEY_PASSPHRASE' })).toMatchObject({ name: 'KeyStoreError', code: 'WRONG_PASSPHRASE', field: '$IOA_KEY_PASSPHRASE' })
  })
})
