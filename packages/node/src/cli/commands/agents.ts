/**
 * `ioa agents --peer <multiaddr>`: the agents a running node hosts, from
 * their signed cards (verified, bound to that peer).
 */
import { CLIENT_OPTIONS, clientDataDir, parseMultiaddr, peerOf, timeoutOf } from '../args.js'
import type { CommandSpec } from '../args.js'
import type { SignedCard } from '@ioa/interconnect'

export const agentsCommand: CommandSpec = {
  name: 'agents',
  summary: 'list the agents a running node hosts (verified cards)',
  usage: ['agents --peer <multiaddr> [--json]'],
  description: 'Connects to the peer, fetches its signed agent cards and prints those that verify\n(signature, validity period, bound to that peer). --json prints one array.',
  options: {
    peer: { type: 'string', value: '<multiaddr>', description: 'the node to ask, with /p2p/<peer id>' },
    'data-dir': CLIENT_OPTIONS['data-dir'],
    timeout: CLIENT_OPTIONS.timeout
  },
  examples: ['ioa agents --peer /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW…'],
  async run (args, ctx) {
    const peer = await parseMultiaddr(args.required('peer'), '--peer', true)
    const timeout = timeoutOf(args)
    const { withClient } = await import('../client.js')
    const cards = await withClient({ bootstrap: [peer], dataDir: clientDataDir(args, ctx), timeout, dht: false, signal: ctx.signal, out: ctx.out }, async ({ node }) => {
      return node.interconnect.fetchCards(peerOf(peer), {}, { signal: ctx.signal, timeout })
    })
    if (ctx.out.json) {
      ctx.out.emit(cards.map(agentJson))
      return 0
    }
    if (cards.length === 0) ctx.out.print('no agents')
    for (const { card } of cards) {
      ctx.out.print(`${card.name}  (${card.domain})`)
      ctx.out.print(`  did     ${card.id}`)
      ctx.out.print(`  skills  ${card.skills.map(s => s.id).join(', ')}`)
    }
    return 0
  }
}

/** An agent as `agents --json` prints it */
export function agentJson (signed: SignedCard): { did: string, name: string, domain: string, skills: string[], card: SignedCard['card'] } {
  const c = signed.card
  return { did: c.id, name: c.name, domain: c.domain, skills: c.skills.map(s => s.id), card: c }
}
