/**
 * The local agent protocol `ioa-agent/1` (JSON lines on stdio), the node's
 * side of its codec: how values become JSON, how a hello is checked, how
 * errors and cancels are put in messages. Spec: `spec/node-agents.md`.
 */
import { DeadlineExceededError } from '@ioa/collab'
import { CARD_LIMITS, SkillSchema } from '@ioa/interconnect'
import { CanceledError, ERROR_CODE_PATTERN } from '@ioa/transport'
import { AgentProtocolError, SkillMismatchError, UnsupportedProtocolError } from '../errors.js'
import type { SkillInit } from '@ioa/interconnect'

/** The protocol name programs say in their hello (version 1, which every program speaks) */
export const AGENT_PROTOCOL = 'ioa-agent/1'

/** Version 2: version 1 and teams (invitations, the conversation, posts); `spec/node-agents.md` 16 */
export const AGENT_PROTOCOL_V2 = 'ioa-agent/2'

/** The versions this node speaks, newest first */
export const AGENT_PROTOCOLS: readonly string[] = Object.freeze([AGENT_PROTOCOL_V2, AGENT_PROTOCOL])

/** Most versions a hello may list */
const MAX_VERSIONS = 8

/** Longest call id, event name and error message (characters) */
export const MAX_ID = 128
export const MAX_EVENT = 64
export const MAX_MESSAGE = 1_024

/** Strict UTF-8 for the program's protocol lines; lenient for its stderr and oversized heads */
export const utf8 = new TextDecoder('utf-8', { fatal: true })
export const lenient = new TextDecoder('utf-8')

/** What a program's hello says */
export interface Hello {
  /** The version the node chose: the newest both speak */
  protocol: string
  name?: string
  description?: string
  skills?: SkillInit[]
}

export function isObject (v: unknown): v is Record<string, unknown> {
  return v != null && typeof v === 'object' && !Array.isArray(v)
}

/** DAG-CBOR values as JSON: bytes as `{"/":{"bytes":"<base64>"}}` (DAG-JSON), big integers as numbers or strings */
export function replacer (_key: string, value: unknown): unknown {
  if (value instanceof Uint8Array) return { '/': { bytes: Buffer.from(value).toString('base64').replace(/=+$/, '') } }
  if (typeof value === 'bigint') return Number.isSafeInteger(Number(value)) ? Number(value) : value.toString()
  return value
}

/** The code of an error for a message: its own when it is UPPER_SNAKE_CASE, else `fallback` */
export function errorCode (err: unknown, fallback: string): string {
  const code = (err as { code?: unknown } | undefined)?.code
  return typeof code === 'string' && ERROR_CODE_PATTERN.test(code) ? code : fallback
}

/** The message of an error for a message, bounded */
export function errorMessage (err: unknown): string {
  const m = (err as { message?: unknown } | undefined)?.message
  return (typeof m === 'string' ? m : String(err)).slice(0, MAX_MESSAGE)
}

/** The `reason` of a cancel message, from the reason a task's signal was aborted with */
export function cancelReason (reason: unknown): string {
  const code = (reason as { code?: unknown } | undefined)?.code
  if (code === DeadlineExceededError.code) return 'deadline'
  if (code === CanceledError.code) return 'canceled'
  if (code === 'INTERRUPTED') return 'interrupted'
  return 'ended'
}

/** A hello message checked; unknown fields are ignored */
export function parseHello (msg: Record<string, unknown>): Hello {
  const hello: Hello = { protocol: negotiate(msg) }
  if (msg.name != null) {
    if (typeof msg.name !== 'string' || msg.name.length === 0 || msg.name.length > CARD_LIMITS.maxName) throw new AgentProtocolError(`hello.name must be a string of 1-${CARD_LIMITS.maxName} characters`)
    hello.name = msg.name
  }
  if (msg.description != null) {
    if (typeof msg.description !== 'string' || msg.description.length > CARD_LIMITS.maxText) throw new AgentProtocolError(`hello.description must be a string of at most ${CARD_LIMITS.maxText} characters`)
    hello.description = msg.description
  }
  if (msg.skills != null) {
    if (!Array.isArray(msg.skills) || msg.skills.length > CARD_LIMITS.maxSkills) throw new AgentProtocolError(`hello.skills must be a list of at most ${CARD_LIMITS.maxSkills} skills`)
    hello.skills = msg.skills.map((s: unknown, i) => {
      if (!isObject(s)) throw new AgentProtocolError(`hello.skills.${i} must be an object`)
      const { id, name, description, tags, inputSchema, outputSchema, examples } = s
      const picked = Object.fromEntries(Object.entries({ id, name, description, tags, inputSchema, outputSchema, examples }).filter(([, v]) => v != null))
      const parsed = SkillSchema.safeParse(picked)
      if (!parsed.success) {
        const issue = parsed.error.issues[0]
        throw new AgentProtocolError(`hello.skills.${i}${issue.path.length > 0 ? '.' + issue.path.join('.') : ''}: ${issue.message}`)
      }
      return picked as SkillInit
    })
    const ids = new Set(hello.skills.map(s => s.id))
    if (ids.size !== hello.skills.length) throw new AgentProtocolError('hello.skills names a skill twice')
  }
  return hello
}

/**
 * The version of a hello: the newest of `AGENT_PROTOCOLS` among its
 * `protocol` and its `versions` (spec 16.1); none in common throws
 * UnsupportedProtocolError
 */
export function negotiate (msg: Record<string, unknown>): string {
  const offered: unknown[] = [msg.protocol]
  if (msg.versions != null) {
    if (!Array.isArray(msg.versions) || msg.versions.length === 0 || msg.versions.length > MAX_VERSIONS || msg.versions.some(v => typeof v !== 'string' || v.length > 64)) {
      throw new AgentProtocolError(`hello.versions must be a list of 1-${MAX_VERSIONS} protocol names`)
    }
    offered.push(...msg.versions)
  }
  const chosen = AGENT_PROTOCOLS.find(v => offered.includes(v))
  if (chosen == null) {
    throw new UnsupportedProtocolError(`The program speaks ${JSON.stringify(offered.filter(v => v != null))?.slice(0, 80)}, this node ${AGENT_PROTOCOLS.join(', ')}`)
  }
  return chosen
}

/**
 * The skills to serve: the configured ones (each named in the hello, when it
 * names any), else the hello's. A configured skill that the hello names too
 * is the hello's skill with the configured fields laid over it, field by
 * field: the program's tags, schemas and examples stay unless the
 * configuration sets them.
 */
export function skillsOf (configured: SkillInit[], hello: Hello): SkillInit[] {
  if (configured.length === 0) {
    if (hello.skills == null || hello.skills.length === 0) throw new SkillMismatchError('Neither the card nor the hello names a skill')
    return hello.skills
  }
  if (hello.skills == null) return configured
  const offered = new Map(hello.skills.map(s => [s.id, s]))
  const missing = configured.filter(s => !offered.has(s.id)).map(s => s.id)
  if (missing.length > 0) throw new SkillMismatchError(`The program does not serve the configured skill${missing.length > 1 ? 's' : ''} ${missing.join(', ')}`)
  return configured.map(s => overlay(offered.get(s.id), s))
}

/** `base` with every field `over` sets (not `undefined`) replaced by `over`'s */
function overlay (base: SkillInit | undefined, over: SkillInit): SkillInit {
  const out: Record<string, unknown> = { ...base }
  for (const [key, value] of Object.entries(over)) {
    if (value !== undefined) out[key] = value
  }
  return out as unknown as SkillInit
}
