// The car assistant: turns the driver's goal into a plan (route → book a
// hotel near tonight's stop → pay), finds the agents for each step through
// the DHT, delegates to each an attenuated slice of the driver's authority,
// fails over when an agent fails, and reports every decision to the timeline.
import { declarativePlanner } from '@ioa/collab'

export const TONIGHT = 'book a hotel for tonight'

const planner = declarativePlanner({
  templates: {
    [TONIGHT]: {
      requires: ['position', 'destination'],
      output: 'pay',
      steps: [
        { id: 'route', capability: 'geo.route', input: { from: { $input: 'position' }, to: { $input: 'destination' } } },
        {
          id: 'book',
          capability: 'travel.hotel.book',
          input: { near: { $ref: 'route.stop' }, nights: { $input: 'nights' }, maxPrice: { $input: 'maxPrice' }, guest: { $input: 'guest' } },
          dependsOn: ['route']
        },
        {
          id: 'pay',
          capability: 'payment.pay',
          input: { amount: { $ref: 'book.amount' }, currency: { $ref: 'book.currency' }, payee: { $ref: 'book.payee' }, reference: { $ref: 'book.reservation' } },
          dependsOn: ['book']
        }
      ]
    }
  }
})

/** @type {import('@ioa/node').AgentModule} */
export default async function car ({ node, agent, options, log }) {
  const preferences = options.preferences ?? {}
  /** agent id → card name, learnt while ranking */
  const names = new Map()
  const nameOf = did => names.get(did) ?? `${did.slice(0, 16)}…`

  const orchestrator = node.orchestrator(agent, {
    planner,
    backoff: { initial: 100, max: 500 },
    discoveryTimeout: 4_000,
    confirmTimeout: 2_000,
    ranker: {
      // the driver's preferred brands first (budget first: its outage is met first)
      score: (c) => {
        names.set(c.card.id, c.card.name)
        return Number(preferences[c.card.name] ?? 0.5)
      }
    },
    // each link narrower: the payment agent may take no more than the booking costs
    attenuate: ({ skill, proposed, input }) => {
      if (skill !== 'payment.pay') return proposed
      const cap = Number(proposed.constraints?.maxAmount ?? Infinity)
      const amount = Number(input?.amount)
      return { ...proposed, constraints: { ...proposed.constraints, maxAmount: Math.min(cap, Number.isFinite(amount) ? amount : cap) } }
    }
  })

  const describe = (e) => {
    switch (e.type) {
      case 'plan': return `planned "${e.plan.goal.intent}": ${e.plan.steps.map(s => `${s.id} (${s.capability})`).join(' → ')}`
      case 'provider-selected': return `${e.stepId}: chose ${nameOf(e.provider)} of ${e.candidates} candidate(s) found in the DHT`
      case 'delegated': return `${e.stepId}: delegated ${e.capabilities.map(c => c.skill + (c.constraints?.maxAmount != null ? ` ≤ ${c.constraints.maxAmount} ${c.constraints.currency ?? ''}` : '')).join(', ')} to ${nameOf(e.provider)}`
      case 'step-status': return e.task.state === 'working' && e.task.progress?.length > 0 ? `${e.stepId}: ${nameOf(e.provider)} — ${String(e.task.progress.at(-1)?.message ?? e.task.progress.at(-1))}` : undefined
      case 'failover': return `${e.stepId}: ${nameOf(e.from)} failed (${e.error.code}: ${e.error.message}) → failing over to ${nameOf(e.to)}`
      case 'step-retry': return `${e.stepId}: every provider failed, retry round ${e.round} in ${e.delay} ms`
      case 'step-completed': return `${e.stepId}: done by ${e.providers.map(nameOf).join(', ')}`
      case 'step-failed': return `${e.stepId}: failed (${e.error.code})`
      case 'completed': return 'goal reached'
      case 'failed': return `goal failed: ${e.error.code} ${e.error.message}`
      default: return undefined
    }
  }

  return {
    handlers: {
      'vehicle.assistant.goal': async (input, ctx) => {
        const goal = { intent: String(input?.intent ?? ''), input: { ...(input?.input ?? {}) } }
        // the most the driver allowed to pay is the hotel's price limit
        const pay = ctx.chain.path[0]?.payload.cap.find(c => c.skill === 'payment.pay')
        if (goal.input.maxPrice == null && pay?.constraints?.maxAmount != null) goal.input.maxPrice = pay.constraints.maxAmount
        log('goal', { text: `goal from ${ctx.chain.root === ctx.caller ? 'the driver' : ctx.caller.slice(0, 16)}: "${goal.intent}" (max ${goal.input.maxPrice ?? '?'} EUR)`, intent: goal.intent, maxPrice: goal.input.maxPrice })
        const started = Date.now()
        const out = await orchestrator.runToCompletion(goal, {
          proofs: [...ctx.chain.path],
          deadline: ctx.deadline,
          signal: ctx.signal,
          // the run's spans and its subtasks continue the goal's trace
          trace: ctx.trace,
          onEvent: (e) => {
            const text = describe(e)
            if (text == null) return
            ctx.progress(text)
            const data = { text, step: e.stepId }
            if (e.type === 'failover') Object.assign(data, { from: e.from, fromName: nameOf(e.from), to: e.to, toName: nameOf(e.to), code: e.error.code })
            if (e.type === 'provider-selected') Object.assign(data, { provider: e.provider, providerName: nameOf(e.provider), candidates: e.candidates })
            if (e.type === 'delegated') Object.assign(data, { provider: e.provider, capabilities: e.capabilities })
            log(e.type, data)
          }
        })
        if (out.state !== 'completed') {
          const err = out.error ?? { code: 'GOAL_FAILED', message: 'The goal was not reached' }
          throw Object.assign(new Error(err.message), { code: err.code })
        }
        const steps = Object.fromEntries(Object.entries(out.steps).map(([id, s]) => [id, { providers: s.providers.map(nameOf), attempts: s.attempts }]))
        return {
          booking: out.steps.book.result,
          payment: out.steps.pay.result,
          stop: out.steps.route.result?.stop,
          steps,
          ms: Date.now() - started
        }
      }
    }
  }
}
