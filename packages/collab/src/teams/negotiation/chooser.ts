/**
 * The default chooser (`spec/teams.md` 6.4): the lowest price, then the
 * lowest eta, then the first to arrive. Prices are compared within one
 * currency only, that of the first priced proposal to arrive; proposals in
 * another currency, and those without a price, come after (no conversion:
 * pass your own `Chooser` for that).
 */
import type { Chooser, ReceivedProposal } from './api.js'

/** Sort key of a proposal; smaller is better */
function rank (p: ReceivedProposal, currency: string | undefined): [number, number, number, number] {
  const price = p.proposal.payload.price
  const priced = price != null && price.currency === currency
  return [
    priced ? 0 : (price != null ? 1 : 2),
    priced ? price.amount : 0,
    p.proposal.payload.eta ?? Number.POSITIVE_INFINITY,
    p.arrival
  ]
}

function compare (a: number[], b: number[]): number {
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1
  }
  return 0
}

/** The proposals best first, as the default chooser ranks them */
export function rankProposals (proposals: readonly ReceivedProposal[]): ReceivedProposal[] {
  const byArrival = [...proposals].sort((a, b) => a.arrival - b.arrival)
  const currency = byArrival.find(p => p.proposal.payload.price != null)?.proposal.payload.price?.currency
  return byArrival.map(p => ({ p, key: rank(p, currency) })).sort((a, b) => compare(a.key, b.key)).map(x => x.p)
}

/** The default chooser: the best of `rankProposals`, or none when there is no proposal */
export const defaultChooser: Chooser = (proposals) => rankProposals(proposals)[0]
