/**
 * The LLM planner against a fake model.
 *
 * NO REAL MODEL IS CALLED. Each test starts a local `node:http` server on
 * loopback that plays an OpenAI-compatible `POST /v1/chat/completions`
 * endpoint and answers with canned completions: a valid plan, garbage, an
 * invalid plan (a cycle), an HTTP error, or nothing for a long time.
 */
import { createServer } from 'node:http'
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import type { DiscoveredAgent, DiscoveryQuery } from '@ioa/interconnect'
import { DEFAULT_SYSTEM_PROMPT, llmPlanner } from '../../src/planning/planners/index.js'
import type { LlmPlannerInit } from '../../src/planning/planners/index.js'
import { CAR_CAPABILITIES, CAR_GOAL, plannerSuite } from './suite.js'
import { rejectionOf } from '../../../../test/util.js'

/** What a good model would answer for the car goal */
const CAR_PLAN = {
  steps: [
    { id: 'route', capability: 'geo.route', input: { from: { $input: 'from' }, to: { $input: 'to' } }, dependsOn: [] },
    { id: 'search', capability: 'travel.hotel.search', input: { near: { $ref: 'route.stopArea' }, budget: { $input: 'budget' } }, dependsOn: ['route'] },
    { id: 'book', capability: 'travel.hotel.booking', input: { hotelId: { $ref: 'search.hotelId' } }, dependsOn: ['search'] },
    { id: 'pay', capability: 'payment.pay', input: { bookingId: { $ref: 'book.bookingId' }, amount: { $ref: 'book.amount' } }, dependsOn: ['book'] }
  ],
  output: 'pay'
}

interface Received { method?: string, url?: string, headers: IncomingMessage['headers'], body: any }
type Behaviour = (req: Received, res: ServerResponse) => void

/** A chat completion whose first choice says `content` */
function completion (content: string, finishReason = 'stop'): string {
  return JSON.stringify({
    id: 'chatcmpl-fake',
    object: 'chat.completion',
    created: 0,
    model: 'fake-model',
    choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: finishReason }]
  })
}

function reply (res: ServerResponse, status: number, body: string): void {
  res.writeHead(status, { 'content-type': 'application/json' })
  res.end(body)
}

/** The fake model of the shared suite: the car plan for the car goal, an error otherwise */
const suiteModel: Behaviour = (req, res) => {
  const user = JSON.parse(req.body.messages[1].content)
  if (user.goal.intent === CAR_GOAL.intent) reply(res, 200, completion(JSON.stringify(CAR_PLAN)))
  else reply(res, 200, completion(JSON.stringify({ error: 'no capability listed can do this' })))
}

let server: Server
let url: string
let behaviour: Behaviour = suiteModel
const received: Received[] = []
const timers = new Set<ReturnType<typeof setTimeout>>()

beforeAll(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      let body: unknown
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'))
      } catch {
        body = undefined
      }
      const r: Received = { method: req.method, url: req.url, headers: req.headers, body }
      received.push(r)
      behaviour(r, res)
    })
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`
})

afterEach(() => {
  behaviour = suiteModel
  received.length = 0
  for (const t of timers) clearTimeout(t)
  timers.clear()
})

afterAll(async () => {
  server.closeAllConnections()
  await new Promise<void>(resolve => server.close(() => { resolve() }))
})

function planner (init: Partial<LlmPlannerInit> = {}): ReturnType<typeof llmPlanner> {
  return llmPlanner({ url, model: 'fake-model', capabilities: CAR_CAPABILITIES, ...init })
}

plannerSuite('llm (fake OpenAI-compatible endpoint)', () => planner())

describe('llm planner', () => {
  it('sends the goal and the capabilities as an OpenAI chat completion request and returns the validated plan', async () => {
    const plan = await planner({ apiKey: 'sk-test', maxTokens: 2000 }).plan(CAR_GOAL, {})
    expect(plan.steps.map(s => s.id)).toEqual(['route', 'search', 'book', 'pay'])
    expect(plan.output).toBe('pay')
    expect(plan.goal).toEqual(CAR_GOAL)

    expect(received).toHaveLength(1)
    const req = received[0]
    expect(req.method).toBe('POST')
    expect(req.url).toBe('/v1/chat/completions')
    expect(req.headers.authorization).toBe('Bearer sk-test')
    expect(req.headers['content-type']).toBe('application/json')
    expect(req.body).toMatchObject({ model: 'fake-model', response_format: { type: 'json_object' }, max_tokens: 2000, temperature: 0 })
    expect(req.body.messages[0]).toEqual({ role: 'system', content: DEFAULT_SYSTEM_PROMPT })
    expect(req.body.messages[1].role).toBe('user')
    const user = JSON.parse(req.body.messages[1].content)
    expect(user).toEqual({
      goal: {
        intent: CAR_GOAL.intent,
        inputSchema: {
          type: 'object',
          properties: { from: { type: 'string' }, to: { type: 'string' }, budget: { type: 'integer' } },
          required: ['from', 'to', 'budget']
        },
        want: CAR_GOAL.want
      },
      capabilities: CAR_CAPABILITIES.map(name => ({ name }))
    })
    // the goal's values stay with the caller unless asked for
    expect(req.body.messages[1].content).not.toContain('Amsterdam')
  })

  it('shares input values, a custom system prompt, and no key when so configured', async () => {
    await planner({ includeInputValues: true, systemPrompt: 'Plan.' }).plan(CAR_GOAL, {})
    const req = received[0]
    expect(req.headers.authorization).toBeUndefined()
    expect(req.body.max_tokens).toBeUndefined()
    expect(req.body.messages[0].content).toBe('Plan.')
    expect(JSON.parse(req.body.messages[1].content).goal.input).toEqual(CAR_GOAL.input)
  })

  it('describes discovered skills, with their schemas, when it has ctx.discover', async () => {
    const discover = async (q: DiscoveryQuery): Promise<DiscoveredAgent[]> => [{
      skills: CAR_CAPABILITIES.filter(c => c.startsWith(q.capability)).map(id => ({
        id, tags: [], description: `does ${id}`, inputSchema: { type: 'object' }, outputSchema: { type: 'object' }
      }))
    } as unknown as DiscoveredAgent]
    const plan = await planner({ capabilities: ['geo', 'travel.hotel', 'payment'] }).plan(CAR_GOAL, { discover })
    expect(plan.steps).toHaveLength(4)
    const user = JSON.parse(received[0].body.messages[1].content)
    expect(user.capabilities).toEqual(CAR_CAPABILITIES.map(name => ({
      name, description: `does ${name}`, inputSchema: { type: 'object' }, outputSchema: { type: 'object' }
    })))
  })

  it('accepts a fenced JSON answer and fills in missing input and dependsOn', async () => {
    behaviour = (_req, res) => {
      const plan = { steps: [{ id: 'only', capability: 'geo.route' }] }
      reply(res, 200, completion('```json\n' + JSON.stringify(plan) + '\n```'))
    }
    const plan = await planner().plan(CAR_GOAL, {})
    expect(plan.steps).toEqual([{ id: 'only', capability: 'geo.route', input: {}, dependsOn: [] }])
  })

  it('uses the fetch it is given', async () => {
    const calls: string[] = []
    const fetch: typeof globalThis.fetch = async (input, init) => {
      calls.push(String(input))
      return await globalThis.fetch(input, init)
    }
    await planner({ fetch, url: url + '/' }).plan(CAR_GOAL, {})
    expect(calls).toEqual([`${url}/chat/completions`])
  })

  describe('never returns an invalid plan', () => {
    it('garbage content -> PlannerFailedError', async () => {
      behaviour = (_req, res) => { reply(res, 200, completion('Sure! First you drive, then you book a hotel.')) }
      const err = await rejectionOf(planner().plan(CAR_GOAL, {}))
      expect(err.name).toBe('PlannerFailedError')
      expect(err.message).toMatch(/not JSON/)
    })

    it('a plan with a cycle -> PlannerFailedError naming the cycle', async () => {
      behaviour = (_req, res) => {
        const plan = structuredClone(CAR_PLAN)
        plan.steps[0].dependsOn = ['pay']
        reply(res, 200, completion(JSON.stringify(plan)))
      }
      const err = await rejectionOf(planner().plan(CAR_GOAL, {}))
      expect(err.name).toBe('PlannerFailedError')
      expect(err.message).toMatch(/invalid/)
      expect(err.message).toMatch(/cycle route -> pay -> book -> search -> route/)
      expect(err.cause?.name).toBe('InvalidPlanError')
    })

    it('a reference to a step that is not a dependency -> PlannerFailedError naming the field', async () => {
      behaviour = (_req, res) => {
        const plan = structuredClone(CAR_PLAN)
        plan.steps[3].dependsOn = []
        reply(res, 200, completion(JSON.stringify(plan)))
      }
      const err = await rejectionOf(planner().plan(CAR_GOAL, {}))
      expect(err.name).toBe('PlannerFailedError')
      expect(err.message).toMatch(/steps\[3\]\.input\.bookingId\.\$ref/)
    })

    it('unknown keys, or a capability that was not offered -> PlannerFailedError', async () => {
      behaviour = (_req, res) => {
        const plan = structuredClone(CAR_PLAN) as any
        plan.steps[0].description = 'route the car'
        reply(res, 200, completion(JSON.stringify(plan)))
      }
      expect((await rejectionOf(planner().plan(CAR_GOAL, {}))).message).toMatch(/Unrecognized key/)

      behaviour = (_req, res) => {
        const plan = structuredClone(CAR_PLAN)
        plan.steps[3].capability = 'payment.crypto.send'
        reply(res, 200, completion(JSON.stringify(plan)))
      }
      const err = await rejectionOf(planner().plan(CAR_GOAL, {}))
      expect(err.name).toBe('PlannerFailedError')
      expect(err.message).toMatch(/not offered/)
      // a capability below an offered prefix is fine
      const plan = await planner({ capabilities: ['geo', 'travel', 'payment'] }).plan(CAR_GOAL, {})
      expect(plan.steps[3].capability).toBe('payment.crypto.send')
    })

    it('the model declining -> PlannerFailedError with its reason', async () => {
      behaviour = (_req, res) => { reply(res, 200, completion(JSON.stringify({ error: 'no hotel capability' }))) }
      const err = await rejectionOf(planner().plan(CAR_GOAL, {}))
      expect(err.name).toBe('PlannerFailedError')
      expect(err.message).toMatch(/no hotel capability/)
    })

    it('no completion, a cut-off answer, or an HTTP error -> PlannerFailedError', async () => {
      behaviour = (_req, res) => { reply(res, 200, '{"object":"list"}') }
      expect((await rejectionOf(planner().plan(CAR_GOAL, {}))).message).toMatch(/no message content/)

      behaviour = (_req, res) => { reply(res, 200, completion('{"steps": [{"id": "rou', 'length')) }
      expect((await rejectionOf(planner().plan(CAR_GOAL, {}))).message).toMatch(/cut off/)

      behaviour = (_req, res) => { reply(res, 500, '{"error":{"message":"model overloaded"}}') }
      const err = await rejectionOf(planner().plan(CAR_GOAL, {}))
      expect(err.name).toBe('PlannerFailedError')
      expect(err.message).toMatch(/HTTP 500.*model overloaded/)
    })

    it('an answer larger than maxResponseBytes -> PlannerFailedError', async () => {
      behaviour = (_req, res) => { reply(res, 200, completion('x'.repeat(10_000))) }
      const err = await rejectionOf(planner({ maxResponseBytes: 1000 }).plan(CAR_GOAL, {}))
      expect(err.name).toBe('PlannerFailedError')
      expect(err.message).toMatch(/larger than 1000 bytes/)
    })

    it('an endpoint that does not answer in time -> PlannerFailedError', async () => {
      behaviour = (_req, res) => {
        timers.add(setTimeout(() => { reply(res, 200, completion(JSON.stringify(CAR_PLAN))) }, 5_000))
      }
      const started = Date.now()
      const err = await rejectionOf(planner({ timeout: 200 }).plan(CAR_GOAL, {}))
      expect(err.name).toBe('PlannerFailedError')
      expect(err.message).toMatch(/within 200 ms/)
      expect(Date.now() - started).toBeLessThan(3_000)
    })

    it('an unreachable endpoint -> PlannerFailedError', async () => {
      const closed = createServer()
      await new Promise<void>(resolve => closed.listen(0, '127.0.0.1', resolve))
      const port = (closed.address() as AddressInfo).port
      await new Promise<void>(resolve => closed.close(() => { resolve() }))
      const err = await rejectionOf(planner({ url: `http://127.0.0.1:${port}/v1` }).plan(CAR_GOAL, {}))
      expect(err.name).toBe('PlannerFailedError')
      expect(err.message).toMatch(/request failed/)
    })
  })

  it('stops with the abort reason when the signal aborts during the request', async () => {
    behaviour = (_req, res) => {
      timers.add(setTimeout(() => { reply(res, 200, completion(JSON.stringify(CAR_PLAN))) }, 5_000))
    }
    const controller = new AbortController()
    const reason = new Error('driver changed their mind')
    const p = planner().plan(CAR_GOAL, { signal: controller.signal })
    setTimeout(() => { controller.abort(reason) }, 50)
    await expect(p).rejects.toBe(reason)
  })

  it('needs a url and a model', () => {
    expect(() => llmPlanner({ url: '', model: 'm' })).toThrow(TypeError)
    expect(() => llmPlanner({ url, model: '' })).toThrow(TypeError)
  })
})
