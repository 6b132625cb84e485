// Rhône Transit: its part of the festival team is the shuttle plan. It
// forms a nested team of two bus operators, gives each a route as an async
// assignment (the other operator as the fallback), and when an operator goes
// silent (its process killed: the task's lease lapses) the route is
// reassigned by rule and the silent member removed from the sub-team; the
// sub-team concludes with the plan, which is the assignment's result.
import { parseAssignmentContext } from '@ioa/collab'
import { find, loadData, printConversation, speakWhenAsked } from './shared.js'

/** @type {import('@ioa/node').AgentModule} */
export default async function transport ({ node, agent, options, log, signal }) {
  const data = await loadData(options.data ?? './data/transport.json')
  speakWhenAsked({ node, agent, lines: data.lines, log, signal })
  return {
    handlers: {
      'transport.plan': async (input, ctx) => {
        const ref = parseAssignmentContext(ctx.task.contextId)
        const parent = ref != null ? node.teams.team(ref.team) : undefined
        if (parent == null) throw new Error('transport.plan runs as an assignment of a team')
        ctx.progress('forming a sub-team of bus operators')
        const operators = await find(node, 'transport.bus', 2, ctx.signal)
        const names = new Map([[agent.did, agent.card.card.name], ...operators.map(o => [o.agent, o.name])])
        const byName = n => operators.find(o => o.name === n)
        const sub = await parent.formSubteam({ text: `shuttle buses to ${input?.venue ?? 'the venue'} on ${input?.date ?? 'the new date'}`, capabilities: ['transport.bus'], deadline: parent.roster.deadline }, {
          roles: data.routes.map(r => ({ role: `route-${r.id.toLowerCase()}`, capabilities: ['transport.bus'], candidates: [{ agent: byName(r.operator).agent, peer: byName(r.operator).peer }] })),
          signal: ctx.signal
        }).catch(err => {
          for (const f of err.failures ?? []) log('warning', { text: `no member for ${f.role}: ${f.tried.map(x => `${names.get(x.agent) ?? x.agent} ${x.outcome} ${x.code} ${x.reason}`).join('; ')}` })
          throw err
        })
        log('subteam-formed', { team: sub.id, parent: parent.id, members: sub.roster.members.map(m => m.agent), text: `formed the nested team ${sub.id.slice(0, 8)} with ${operators.map(o => o.name).join(' and ')}` })
        const printed = printConversation({ team: sub, log, names, signal, label: 'buses' })
        await sub.say(`Two routes to ${input?.venue ?? 'the venue'}: ${data.routes.map(r => `${r.id} ${r.from} → ${r.to} (${r.operator})`).join('; ')}`)
        const runs = []
        for (const r of data.routes) {
          runs.push(await node.assignments.assign(sub, {
            mode: 'async',
            assignee: byName(r.operator).agent,
            skill: 'transport.bus',
            input: { route: r.id },
            // the other operator takes the route if this one goes silent
            candidates: operators.map(o => o.agent),
            signal: ctx.signal
          }))
        }
        const outcomes = await Promise.all(runs.map(a => a.done))
        // an operator whose task had to be taken back is silent: it leaves the sub-team's roster
        const silent = [...new Set(outcomes.flatMap(o => o.assignees.slice(0, -1)))]
        for (const s of silent) {
          await sub.remove(s, 'silent: its task lease lapsed, the route was reassigned')
          log('member-removed', { team: sub.id, agent: s, text: `removed ${names.get(s) ?? s} from the nested team (silent)` })
        }
        const ok = outcomes.every(o => o.state === 'completed')
        const routes = outcomes.map(o => ({ route: o.output?.route, operator: o.output?.operator, departures: o.output?.departures, assignees: o.assignees }))
        const summary = ok
          ? `shuttles planned: ${routes.map(r => `route ${r.route} by ${r.operator}`).join(', ')}${silent.length > 0 ? ` (${silent.map(s => names.get(s)).join(', ')} went silent and was replaced)` : ''}`
          : `shuttle plan incomplete: ${outcomes.filter(o => o.state !== 'completed').map(o => o.error?.code).join(', ')}`
        await sub.conclude(summary, ok ? 'done' : 'failed')
        await printed.catch(() => {})
        if (!ok) throw new Error(summary)
        return { subteam: sub.id, routes, removed: silent, text: summary }
      }
    }
  }
}
