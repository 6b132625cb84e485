/**
 * The default matcher of team formation (`spec/teams.md` 2.2): candidates
 * for a capability ranked by BM25 relevance of their card (name,
 * description, the matching skills' names, descriptions and tags) to the
 * goal's text, then by the interconnect's score (agent history), then by
 * agent id. `minisearch` is loaded on first use, so importing the layer does
 * not pay for it.
 */
import type { Matcher } from './api.js'
import type { DiscoveredAgent } from '@ioa/interconnect'
import type MiniSearch from 'minisearch'

interface MiniSearchModule { default: typeof MiniSearch }

let loading: Promise<MiniSearchModule> | undefined

async function miniSearch (): Promise<MiniSearchModule> {
  loading ??= import('minisearch')
  return await loading
}

interface Doc {
  id: number
  text: string
}

/** The text of a candidate that the goal is matched against */
function cardText (c: DiscoveredAgent): string {
  const parts = [c.card.name, c.card.description]
  for (const s of c.skills) {
    parts.push(s.id.replace(/[.-]/g, ' '), s.name ?? '', s.description ?? '', ...(s.tags ?? []))
  }
  return parts.join(' ')
}

/** BM25 over the cards, then the interconnect's score, then agent id */
export const defaultMatcher: Matcher = async (goal, _capability, candidates) => {
  if (candidates.length <= 1) return [...candidates]
  const { default: MiniSearch } = await miniSearch()
  const index = new MiniSearch<Doc>({ fields: ['text'], storeFields: [] })
  index.addAll(candidates.map((c, id) => ({ id, text: cardText(c) })))
  const relevance = new Map<number, number>()
  for (const hit of index.search(goal.text, { prefix: true, fuzzy: 0.1, combineWith: 'OR' })) {
    relevance.set(hit.id as number, hit.score)
  }
  return candidates
    .map((c, i) => ({ c, r: relevance.get(i) ?? 0 }))
    .sort((a, b) => (b.r - a.r) || (b.c.score - a.c.score) || (a.c.card.id < b.c.card.id ? -1 : a.c.card.id > b.c.card.id ? 1 : 0))
    .map(x => x.c)
}
