/**
 * `ioa discover <capability>`: find agents by capability through the DHT,
 * printed as they are found (best first with --json).
 */
import { CLIENT_OPTIONS, bootstrapList, clientDataDir, parseInteger, timeoutOf } from '../args.js'
import { UsageError, asUsage } from '../errors.js'
import type { CommandSpec } from '../args.js'
import type { DiscoveredAgent, DiscoveryQuery } from '@ioa/interconnect'

/** Most results one lookup returns */
const MAX_LIMIT = 1000

export const discoverCommand: CommandSpec = {
  name: 'discover',
  summary: 'find agents by capability (a skill name or prefix)',
  usage: ['discover <capability> --bootstrap <multiaddr>... [--tag <tag>]... [--domain <domain>] [--limit <n>] [--timeout <ms>] [--json]'],
  description: 'Looks the capability up in the DHT and prints each agent as its card is fetched and verified:\nrank (order found), name, did, serving peer, round-trip time. --json prints one array, best score first.',
  positionals: 1,
  options: {
    ...CLIENT_OPTIONS,
    tag: { type: 'string', multiple: true, value: '<tag>', description: 'only skills with this tag (repeatable: all of them)' },
    domain: { type: 'string', value: '<domain>', description: 'only agents of this domain' },
    limit: { type: 'string', value: '<n>', description: `stop after n agents (1-${MAX_LIMIT})` }
  },
  examples: ['ioa discover travel.hotel --bootstrap /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW… --tag eu'],
  async run (args, ctx) {
    const capability = args.positional(0, 'capability')
    const [{ assertCapability }, { withClient }] = await Promise.all([import('@ioa/interconnect'), import('../client.js')])
    try {
      (assertCapability as (name: string) => void)(capability)
    } catch (err) {
      asUsage(err, 'capability')
    }
    const tags = args.strings('tag')
    if (tags.length > 16 || tags.some(t => t.length === 0 || t.length > 32)) throw new UsageError('--tag: at most 16 tags of 1-32 characters', '--tag')
    const domain = args.string('domain')
    const limitText = args.string('limit')
    const limit = limitText != null ? parseInteger(limitText, '--limit', 1, MAX_LIMIT) : undefined
    const query: DiscoveryQuery = { capability, ...(tags.length > 0 ? { tags } : {}), ...(domain != null ? { domain } : {}) }
    const timeout = timeoutOf(args)
    const out = ctx.out
    const found = await withClient({ bootstrap: await bootstrapList(args, ctx), dataDir: clientDataDir(args, ctx), timeout, signal: ctx.signal, out }, async ({ node }) => {
      const started = Date.now()
      out.progress(`looking up ${capability}…`)
      const results: DiscoveredAgent[] = []
      for await (const r of node.interconnect.discover(query, { timeout, limit, cache: false, signal: ctx.signal })) {
        results.push(r)
        if (!out.json) out.print(resultLine(results.length, r))
      }
      ctx.signal.throwIfAborted()
      out.progress(`${results.length} agent${results.length === 1 ? '' : 's'} (${Date.now() - started} ms)`)
      return results
    })
    if (out.json) {
      const ranked = [...found].sort((a, b) => b.score - a.score)
      out.emit(ranked.map((r, i) => discoveredJson(r, i + 1)))
    }
    return 0
  }
}

function resultLine (rank: number, r: DiscoveredAgent): string {
  const latency = r.latency != null ? `${Math.round(r.latency)} ms` : '-'
  return `${String(rank).padStart(2)}  ${r.card.name}  ${r.card.id}  peer ${r.peer}  ${latency}  score ${r.score.toFixed(2)}  [${r.skills.map(s => s.id).join(', ')}]`
}

/** A discovery result as `discover --json` prints it */
export function discoveredJson (r: DiscoveredAgent, rank: number): Record<string, unknown> {
  return {
    rank,
    did: r.card.id,
    name: r.card.name,
    domain: r.card.domain,
    skills: r.skills.map(s => s.id),
    peer: r.peer,
    latency: r.latency ?? null,
    score: r.score,
    source: r.source,
    card: r.card
  }
}
