/**
 * `ioa team watch <team>`: print a team's conversation live, read from a
 * member's node with the `watch` method of the team protocol
 * (`spec/teams.md` 5.10) on the authority of a watch token that a member
 * signed for the watcher's key.
 */
import { CLIENT_OPTIONS, clientDataDir, parseDuration, parseInteger, parseMultiaddr, peerOf } from '../args.js'
import { CliError, UsageError } from '../errors.js'
import { compact, toJson } from '../output.js'
import type { CommandSpec } from '../args.js'
import type { Output } from '../output.js'
import type { Entry, WatchItem } from '@ioa/collab'

/** Longest text shown on one human-readable line */
const MAX_LINE_TEXT = 400

export const teamWatchCommand: CommandSpec = {
  name: 'team watch',
  summary: 'print a team\'s conversation live, from a member\'s node',
  usage: ['team watch <team> --peer <multiaddr> --key <watcher key file> --proof <token|@file>... [--from <seq>] [--json]'],
  description: [
    'Connects to the member\'s node --peer (with /p2p/<peer id>) and prints the team\'s entries from',
    '--from (default 0) on, then each new one as it is ordered, until the team concludes (exit 0) or',
    'Ctrl-C (exit 0). One line per entry: seq, sender (role, from the rosters, and a short did),',
    'type, and the text or a summary. The watcher is not a member: its authority is a watch token that',
    'a member (or the convener) signed for the --key agent, e.g.',
    '  ioa delegate --key member.key --to <watcher did> --skill \'ioa.team.watch{team=<team>}\'',
    'passed with --proof (with the tokens it derives from, if any). With --json, one JSON object per',
    'entry: {"seq","epoch","from","role","type","id","ts","body"}, and {"truncated":<seq>} when the',
    'member\'s node repaired its log. --timeout bounds the connection and the silence between two',
    'items (the node sends a beat every second or so while the team is quiet).'
  ].join('\n'),
  positionals: 1,
  options: {
    peer: { type: 'string', value: '<multiaddr>', description: 'a member\'s node, with /p2p/<peer id>' },
    key: { type: 'string', value: '<file>', description: 'the watcher\'s key file: the audience of the watch token (signs the request)' },
    proof: { type: 'string', multiple: true, value: '<token|@file>', description: 'the watch token, and the tokens it derives from (repeatable)' },
    from: { type: 'string', value: '<seq>', description: 'the first entry to print (default 0)' },
    'data-dir': CLIENT_OPTIONS['data-dir'],
    timeout: { type: 'string', value: '<ms|duration>', description: 'how long to wait for the node, and for its next item, e.g. 10s (default 10s)' }
  },
  examples: [
    'ioa team watch t5u2…q --peer /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW… --key watcher.key --proof @watch.token',
    'ioa team watch t5u2…q --peer /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW… --key watcher.key --proof @watch.token --from 10 --json'
  ],
  async run (args, ctx) {
    const team = args.positional(0, 'team')
    const [{ TEAM_ID }, { readKeyFile }, { readTokens }] = await Promise.all([import('@ioa/collab/wire'), import('../keyfile.js'), import('../tokens.js')])
    if (!TEAM_ID.test(team)) throw new UsageError(`"${team.slice(0, 80)}" is not a team id (t and 26 base32 characters)`, 'team')
    const peer = await parseMultiaddr(args.required('peer'), '--peer', true)
    const key = await readKeyFile(args.required('key'), ctx.cwd)
    const proofs = await readTokens(args.strings('proof'), '--proof', ctx.cwd)
    if (proofs.length === 0) throw new UsageError('team watch: missing required option --proof (a watch token for --key)', '--proof')
    const leaf = proofs.find(t => t.payload.aud === key.identity.did)
    if (leaf == null) throw new UsageError(`--proof: no token is addressed to the watcher ${key.identity.did}`, '--proof', 'PRINCIPAL_MISMATCH')
    const fromText = args.string('from')
    const from = fromText != null ? parseInteger(fromText, '--from', 0, Number.MAX_SAFE_INTEGER) : 0
    const t = args.string('timeout')
    const timeout = t != null ? parseDuration(t, '--timeout', 600_000) : 10_000
    const out = ctx.out

    const [{ withClient }, { watchTeam }, { peerIdFromString }] = await Promise.all([import('../client.js'), import('@ioa/collab'), import('@libp2p/peer-id')])
    return withClient({ bootstrap: [peer], dht: false, dataDir: clientDataDir(args, ctx), timeout, signal: ctx.signal, out }, async ({ node }) => {
      const transport = node.transport
      const items = watchTeam(transport.services.messaging, transport.peerId, peerIdFromString(peerOf(peer)), {
        // from entry 0: the rosters before --from name the senders' roles (the log is bounded by the team's history budget)
        team, identity: key.identity, proofs: [leaf, ...proofs.filter(p => p !== leaf)], from: 0
      }, { timeout, signal: ctx.signal })
      out.progress(`watching team ${team} at ${peerOf(peer)} from entry ${from}`)
      const printer = new EntryPrinter(out, from)
      try {
        for await (const item of items) printer.item(item)
      } catch (err) {
        if (ctx.signal.aborted) return 0
        throw err
      }
      if (!printer.concluded) throw new CliError('WATCH_ENDED', `The watch of team ${team} ended before the team concluded`)
      return 0
    })
  }
}

/** Lines of a watch: roles learned from the roster entries */
class EntryPrinter {
  private readonly out: Output
  private readonly from: number
  private readonly roles = new Map<string, string>()
  concluded = false

  constructor (out: Output, from: number) {
    this.out = out
    this.from = from
  }

  item (item: WatchItem): void {
    if ('truncated' in item) {
      if (this.out.json) this.out.emit({ truncated: item.truncated.from })
      else this.out.print(`-- the member's log was repaired: entries from ${item.truncated.from} are replaced`)
      return
    }
    if (!('entry' in item)) return
    const entry = item.entry
    const m = entry.msg.payload
    if (m.type === 'roster') {
      const members = (m.body.roster as { payload?: { members?: Array<{ agent: string, role: string }> } }).payload?.members ?? []
      for (const member of members) this.roles.set(member.agent, member.role)
    }
    if (m.type === 'conclude') this.concluded = true
    if (entry.seq < this.from) return
    const role = this.roles.get(m.from)
    if (this.out.json) {
      this.out.emit({ seq: entry.seq, epoch: entry.epoch, from: m.from, ...(role != null ? { role } : {}), type: m.type, id: m.id, ts: m.ts, ...(m.re != null ? { re: m.re } : {}), body: m.body })
      return
    }
    const who = `${role ?? '?'} ${short(m.from)}`
    this.out.print(`${String(entry.seq).padStart(4)}  ${who.padEnd(24)}  ${m.type.padEnd(11)}  ${summary(entry)}`)
  }
}

function short (did: string): string {
  return did.length > 20 ? `${did.slice(8, 14)}…${did.slice(-4)}` : did
}

function clip (text: string): string {
  const s = text.replace(/\s+/g, ' ').trim()
  return s.length > MAX_LINE_TEXT ? s.slice(0, MAX_LINE_TEXT - 1) + '…' : s
}

/** The text of an entry, or a summary of its body */
export function summary (entry: Entry): string {
  const { type, body: b } = entry.msg.payload
  const s = (v: unknown): string => typeof v === 'string' ? v : toJson(v)
  switch (type) {
    case 'discuss': return clip(s(b.text))
    case 'propose': return clip(s(b.text)) + (b.plan != null ? ' [plan]' : '')
    case 'vote': return `on ${s(b.proposal)}: ${s(b.choice)}`
    case 'vote-result': return `on ${s(b.proposal)}: ${s(b.outcome)} (yes ${s(b.yes)}, no ${s(b.no)}, abstain ${s(b.abstain)})`
    case 'assign': return `${s(b.mode)} ${s(b.task)} → ${short(s(b.assignee))} (${s(b.skill)})`
    case 'progress': return `${s(b.task)} ${s(b.state)}${b.text != null ? ': ' + clip(s(b.text)) : ''}`
    case 'result': return `${s(b.task)} ${s(b.state)}${b.error != null ? ' ' + compact(b.error, 120) : ''}`
    case 'pause': return `waits for ${(b.tasks as unknown[]).map(s).join(', ')}`
    case 'conclude': return `${s(b.outcome)}: ${clip(s(b.summary))}`
    case 'subteam': return `${s(b.team)} ${s(b.state)}`
    case 'leave': return b.reason != null ? clip(s(b.reason)) : ''
    case 'remove': return `${short(s(b.agent))}${b.reason != null ? ': ' + clip(s(b.reason)) : ''}`
    case 'admit': return `${s(b.role)}`
    case 'roster': {
      const p = (b.roster as { payload?: { version?: number, members?: unknown[] } }).payload
      return `version ${s(p?.version)}, ${p?.members?.length ?? 0} members`
    }
    case 'epoch': return `epoch ${s(b.epoch)}, sequencer ${short(s(b.sequencer))}`
    default: return compact(b, 200)
  }
}
