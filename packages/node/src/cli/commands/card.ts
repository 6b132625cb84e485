/**
 * `ioa card <did>`: resolve an agent's signed card through the DHT, verify
 * it (signature, validity period, binding to the serving peer) and print it
 * with the peers that serve it.
 */
import { CLIENT_OPTIONS, bootstrapList, clientDataDir, parseDid, timeoutOf } from '../args.js'
import { toJson } from '../output.js'
import type { CommandSpec } from '../args.js'

export const cardCommand: CommandSpec = {
  name: 'card',
  summary: 'resolve, verify and print an agent\'s card',
  usage: ['card <did> --bootstrap <multiaddr>... [--json]'],
  description: 'Finds the peers that serve the agent\'s card, verifies it (signature by the did\'s key, validity\nperiod, bound to the peer that served it) and prints it. Exit 1 with UNKNOWN_AGENT when no peer\nserves a card that verifies.',
  positionals: 1,
  options: { ...CLIENT_OPTIONS },
  examples: ['ioa card did:key:z6Mk… --bootstrap /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW…'],
  async run (args, ctx) {
    const did = await parseDid(args.positional(0, 'did'), 'did')
    const timeout = timeoutOf(args)
    const [{ verifyCard }, { withClient }] = await Promise.all([import('@ioa/interconnect'), import('../client.js')])
    const out = ctx.out
    const { signed, peers } = await withClient({ bootstrap: await bootstrapList(args, ctx), dataDir: clientDataDir(args, ctx), timeout, signal: ctx.signal, out }, async ({ node }) => {
      out.progress(`resolving ${did}…`)
      const found = await node.interconnect.resolve(did, { timeout, cache: false, signal: ctx.signal })
      // resolve verified it as served by peers[0]; check again here, as the user asked for it
      return { signed: await verifyCard({ card: found.signed.card, sig: found.signed.sig }, { servedBy: found.peers[0] }), peers: found.peers }
    })
    const card = signed.card
    if (out.json) {
      out.emit({ did: card.id, verified: true, card, sig: signed.sig, peers })
      return 0
    }
    const now = Date.now()
    out.print(`${card.name}  (${card.domain}, version ${card.version})`)
    out.print(`  did          ${card.id}`)
    if (card.description !== '') out.print(`  description  ${card.description}`)
    out.print(`  verified     signature ok, valid until ${new Date(card.expiresAt).toISOString()} (${Math.round((card.expiresAt - now) / 60_000)} min), bound to ${card.peer}`)
    out.print(`  peer         ${card.peer}`)
    for (const a of card.addrs) out.print(`  address      ${a}`)
    for (const g of card.gateways ?? []) out.print(`  gateway      ${g}`)
    out.print(`  availability ${toJson(card.availability)}`)
    out.print('  skills')
    for (const s of card.skills) {
      out.print(`    ${s.id}${s.name != null && s.name !== '' ? `  ${s.name}` : ''}${s.tags != null && s.tags.length > 0 ? `  [${s.tags.join(', ')}]` : ''}`)
      if (s.description != null && s.description !== '') out.print(`      ${s.description}`)
    }
    out.print(`  served by    ${peers.join(', ')}`)
    return 0
  }
}
