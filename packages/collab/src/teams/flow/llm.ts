/**
 * The `llm` speaker policy (`spec/teams.md` 10.4): the sequencer shows an
 * OpenAI-compatible chat completions endpoint the goal, the members, the
 * state and the last entries, and the model answers with one JSON object
 * `{ "speaker": <did:key or role>, "reason"?: text, "conclude"?: boolean }`.
 * A slow, failing or malformed answer throws; the sequencer then decides by
 * round-robin and the decision entry says so (driver.ts).
 */
import { defaultLogger } from '@libp2p/logger'
import { anySignal } from 'any-signal'
import { extractJson, readBounded } from '../../planning/planners/llm.js'
import type { LlmPolicyInit, SpeakerContext, SpeakerDecision, SpeakerPolicy } from './policy.js'
import type { Did } from '@ioa/interconnect'
import type { Logger } from '@libp2p/interface'

/** The system prompt of the `llm` policy unless `systemPrompt` is given */
export const SPEAKER_SYSTEM_PROMPT = `You moderate the group conversation of a team of agents. The user message is a JSON object: {"goal": string, "members": [{"agent": did, "role": string}], "state": string, "turn": number, "maxTurns": number, "after": did (whose turn ended, who left, or who stayed silent), "why": "turn" | "left" | "skip", "history": [{"seq", "from", "role", "type", "text"?}]}.
Choose who speaks next. Answer with one JSON object and nothing else: {"speaker": "<the agent's did or its role>", "reason": "<short reason>"}, or {"conclude": true, "reason": "<short reason>"} when the goal is reached.`

function textOf (body: Record<string, unknown>): string | undefined {
  return typeof body.text === 'string' ? body.text.slice(0, 1_000) : typeof body.summary === 'string' ? body.summary.slice(0, 1_000) : undefined
}

export class LlmSpeakerPolicy implements SpeakerPolicy {
  private readonly init: LlmPolicyInit
  private readonly endpoint: string
  private readonly log: Logger

  constructor (init: LlmPolicyInit) {
    if (typeof init.url !== 'string' || init.url === '') throw new TypeError('The llm policy needs a url')
    if (typeof init.model !== 'string' || init.model === '') throw new TypeError('The llm policy needs a model')
    for (const key of ['timeout', 'maxResponseBytes', 'historyEntries', 'maxTokens'] as const) {
      const v = init[key]
      if (v !== undefined && (!Number.isInteger(v) || v < 1 || v > 2_147_483_647)) throw new TypeError(`The llm policy's ${key} must be an integer from 1 to 2147483647`)
    }
    this.init = init
    this.endpoint = `${init.url.replace(/\/+$/, '')}/chat/completions`
    this.log = (init.logger ?? defaultLogger()).forComponent('ioa:collab:teams:flow:llm')
  }

  /** The chat messages for a decision */
  messages (ctx: SpeakerContext): Array<{ role: 'system' | 'user', content: string }> {
    const roleOf = (a: Did): string => ctx.roster.members.find(m => m.agent === a)?.role ?? 'former member'
    const history = ctx.history.slice(-(this.init.historyEntries ?? 20)).map(e => {
      const m = e.msg.payload
      const item: Record<string, unknown> = { seq: e.seq, from: m.from, role: roleOf(m.from), type: m.type }
      const text = textOf(m.body)
      if (text != null) item.text = text
      return item
    })
    const user = {
      goal: ctx.roster.goal.text,
      members: ctx.roster.successors.map(a => ({ agent: a, role: roleOf(a) })),
      state: ctx.state.phase,
      turn: ctx.state.turn,
      maxTurns: ctx.state.params.maxTurns,
      after: ctx.trigger.after,
      why: ctx.trigger.kind,
      history
    }
    return [
      { role: 'system', content: this.init.systemPrompt ?? SPEAKER_SYSTEM_PROMPT },
      { role: 'user', content: JSON.stringify(user) }
    ]
  }

  async decide (ctx: SpeakerContext): Promise<SpeakerDecision> {
    const timeout = this.init.timeout ?? 10_000
    const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json' }
    if (this.init.apiKey != null) headers.authorization = `Bearer ${this.init.apiKey}`
    const signal = anySignal([ctx.signal, AbortSignal.timeout(timeout)])
    let text: string
    try {
      const res = await (this.init.fetch ?? globalThis.fetch)(this.endpoint, {
        method: 'POST',
        headers,
        body: JSON.stringify({ model: this.init.model, messages: this.messages(ctx), response_format: { type: 'json_object' }, temperature: 0, max_tokens: this.init.maxTokens ?? 256 }),
        signal
      })
      if (!res.ok) throw new Error(`the model endpoint answered HTTP ${res.status}`)
      text = await readBounded(res, this.init.maxResponseBytes ?? 65_536, this.log)
    } catch (err: any) {
      if (signal.aborted && ctx.signal.aborted !== true) throw new Error(`the model did not answer within ${timeout} ms`, { cause: err })
      throw err
    } finally {
      signal.clear()
    }
    return this.parse(text, ctx)
  }

  /** The decision in a chat completion; throws when there is none */
  parse (text: string, ctx: SpeakerContext): SpeakerDecision {
    let answer: unknown
    try {
      const content = (JSON.parse(text) as { choices?: Array<{ message?: { content?: unknown } }> })?.choices?.[0]?.message?.content
      if (typeof content !== 'string') throw new Error('no message content')
      answer = extractJson(content)
    } catch (err: any) {
      throw new Error(`the model's answer is not a JSON decision (${String(err?.message).slice(0, 100)})`, { cause: err })
    }
    if (answer == null || typeof answer !== 'object' || Array.isArray(answer)) throw new Error('the model\'s answer is not a JSON object')
    const a = answer as Record<string, unknown>
    const reason = typeof a.reason === 'string' ? a.reason.slice(0, 200) : undefined
    if (a.conclude === true) return { conclude: true, reason }
    if (typeof a.speaker !== 'string') throw new Error('the model named no speaker')
    // a did:key, or a role of the roster
    const speaker = ctx.roster.members.find(m => m.agent === a.speaker)?.agent ??
      ctx.roster.successors.find(s => ctx.roster.members.find(m => m.agent === s)?.role === a.speaker)
    if (speaker == null) throw new Error(`the model named ${String(a.speaker).slice(0, 80)}, who is not a member`)
    return { speaker, reason }
  }
}
