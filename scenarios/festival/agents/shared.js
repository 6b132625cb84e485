// What the festival agents share: their shipped data, one negotiation
// service per node (the venues node hosts two bidders), waiting on a
// condition, finding agents through the DHT, speaking when the floor is
// theirs, and printing a team's conversation on the timeline.
import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { createNegotiation } from '@ioa/collab'

/** A JSON file of the scenario folder (`options.data`, relative to scenarios/festival) */
export async function loadData (file) {
  return JSON.parse(await readFile(fileURLToPath(new URL(`../${String(file)}`, import.meta.url)), 'utf8'))
}

const negotiations = new WeakMap()

/** The node's negotiation service (`/ioa/negotiate/1.0.0`), started once for all its agents */
export function negotiationOf (node) {
  let held = negotiations.get(node)
  if (held == null) {
    const n = createNegotiation(node.interconnect)
    held = { n, started: n.start(), users: 0 }
    negotiations.set(node, held)
  }
  held.users++
  return {
    negotiation: async () => { await held.started; return held.n },
    release: async () => {
      if (--held.users === 0) await held.n.stop()
    }
  }
}

/** Resolve once `cond()` holds (checked every 50 ms), reject after `ms` or when `signal` aborts */
export async function waitUntil (cond, { ms = 20_000, signal, what = 'a condition' } = {}) {
  const end = Date.now() + ms
  while (!cond()) {
    signal?.throwIfAborted()
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`)
    await new Promise(resolve => setTimeout(resolve, 50))
  }
}

/** Agents offering `capability`, looked up until `atLeast` answer (`{ agent, peer, name }`) */
export async function find (node, capability, atLeast, signal, ms = 25_000) {
  const end = Date.now() + ms
  let found = []
  while (Date.now() < end) {
    signal?.throwIfAborted()
    found = await node.discover({ capability }, { cache: false, timeout: 5_000 }).catch(() => [])
    if (found.length >= atLeast) break
    await new Promise(resolve => setTimeout(resolve, 200))
  }
  if (found.length < atLeast) throw new Error(`found ${found.length} agent(s) for ${capability}, ${atLeast} needed`)
  return found.map(d => ({ agent: d.card.id, peer: d.peer, name: d.card.name })).sort((a, b) => a.name.localeCompare(b.name))
}

/**
 * In every team the agent joins, post its next line (from `lines`, in
 * order) whenever the flow policy gives it the floor in a discussion
 */
export function speakWhenAsked ({ node, agent, lines, log, signal }) {
  let spoken = 0
  const served = new Set()
  const serve = async (team) => {
    if (served.has(team.id)) return
    served.add(team.id)
    for await (const e of team.events({ signal, from: 0 })) {
      if (e.type === 'concluded') return
      if (e.type !== 'turn' || e.speaker !== agent.did || e.seq < team.length - 1) continue
      const line = lines[Math.min(spoken, lines.length - 1)]
      spoken++
      await team.say(line).catch(err => log('warning', { text: `could not speak: ${err.code ?? ''} ${err.message}` }))
    }
  }
  void (async () => {
    for await (const e of node.teams.events({ signal })) {
      if (e.type === 'team' && e.team.agent === agent.did) {
        serve(e.team).catch(err => { if (!signal.aborted) log('warning', { text: `team ${e.team.id.slice(0, 8)}: ${err.message}` }) })
      }
    }
  })().catch(err => { if (!signal.aborted) log('warning', { text: `team events ended: ${err.message}` }) })
}

const short = id => String(id).slice(0, 8)

/**
 * Print a team's conversation as this member sees it (one `said` event per
 * entry worth showing), naming members by their card names; resolves when
 * the team concludes
 */
export async function printConversation ({ team, log, names, signal, label }) {
  const who = did => names.get(did) ?? `${String(did).slice(8, 20)}…`
  const tag = label != null ? `[${label}] ` : ''
  for await (const e of team.events({ signal, from: 0 })) {
    if (e.type === 'state') log('team-state', { team: team.id, state: e.state, previous: e.previous, text: `${tag}— conversation: ${e.previous} → ${e.state} —` })
    if (e.type === 'concluded') {
      log('team-concluded', { team: team.id, outcome: e.outcome, summary: e.summary, text: `${tag}concluded (${e.outcome}): ${e.summary}` })
      return
    }
    if (e.type === 'assignment' && (e.phase === 'reassigned' || e.phase === 'lapsed')) {
      log('assignment-' + e.phase, { team: team.id, task: e.task, assignee: e.assignee, text: `${tag}task ${short(e.task)} ${e.phase} (${e.phase === 'reassigned' ? `now ${who(e.assignee)}` : e.error?.reason ?? ''})` })
    }
    if (e.type === 'roster') {
      const r = e.roster
      log('roster', { team: team.id, seq: e.seq, version: r.version, members: r.members.map(x => x.agent), text: `${tag}roster v${r.version}: ${r.members.map(x => `${who(x.agent)} (${x.role})`).join(', ')}` })
    }
    if (e.type !== 'message') continue
    const m = e.message.payload
    const b = m.body
    const from = who(m.from)
    switch (m.type) {
      case 'discuss':
      case 'propose':
        log('said', { team: team.id, seq: e.seq, from: m.from, text: `${tag}${from}: "${b.text}"` })
        break
      case 'assign':
        log('said', { team: team.id, seq: e.seq, from: m.from, text: `${tag}${from} assigns ${b.skill} (${b.mode}) to ${who(b.assignee)} — task ${short(b.task)}` })
        break
      case 'progress':
        log('said', { team: team.id, seq: e.seq, from: m.from, text: `${tag}${from} (task ${short(b.task)}): ${b.text}` })
        break
      case 'result':
        log('said', {
          team: team.id,
          seq: e.seq,
          from: m.from,
          text: `${tag}${from}: task ${short(b.task)} ${b.state}${b.error != null ? ` (${b.error.code}${b.error.reason != null ? `: ${b.error.reason}` : ''})` : ''}${typeof b.output?.text === 'string' ? ` — ${b.output.text}` : ''}`
        })
        break
      case 'pause':
        log('said', { team: team.id, seq: e.seq, from: m.from, text: `${tag}${from}: pause until tasks ${b.tasks.map(short).join(', ')} are done` })
        break
      case 'subteam':
        log('said', { team: team.id, seq: e.seq, from: m.from, text: `${tag}${from}: sub-team ${short(b.team)} ${b.state ?? ''}` })
        break
      case 'remove':
        log('said', { team: team.id, seq: e.seq, from: m.from, text: `${tag}${from} removes ${who(b.agent)}: ${b.reason ?? ''}` })
        break
      default:
        break
    }
  }
}
