// Pieces shared by the variants of the `discovery` group (bench/discovery.js)
// and its worker processes (bench/discovery-worker.js): the agent layout, the
// interconnect options, the recall bookkeeping and the rows.
import { percentile } from './measure.js'

/** Agents per node */
export const PER_NODE = 20
const CATEGORIES = 10
const SKILLS_PER_CATEGORY = 10

/** Loopback exempt from libp2p's inbound rate limit (5 per second per host): 50 nodes on one host */
export const LOOPBACK = ['/ip4/127.0.0.1', '/ip6/::1']

/**
 * The skill of agent `a` (0-19) on a node of layout `layout` (0 to size - 1)
 * in a network of `size` nodes (even): each agent has one skill; every skill
 * is held by 10 agents on 2 nodes (each node hosts 5 agents of each of 4
 * skills). For 50 nodes: 1,000 agents, 100 skills. A node that joins in
 * place of one that left takes the leaver's layout (the same skills).
 */
export function skillOf (layout, a, size) {
  const n = (layout % (size / 2)) * 4 + Math.floor(a / 5)
  return `bench.c${n % CATEGORIES}.s${Math.floor(n / CATEGORIES) % SKILLS_PER_CATEGORY}`
}

/** The skills of a network of `size` nodes (100 for 50), in a fixed order */
export function allSkills (size) {
  const out = new Set()
  for (let layout = 0; layout < size; layout++) for (let a = 0; a < PER_NODE; a++) out.add(skillOf(layout, a, size))
  return [...out]
}

/**
 * `createInterconnect` options of every benchmark node: lookups by
 * capability only (agent-id records are not needed here).
 */
export function interconnectInit () {
  const init = { domain: 'bench.example', announceAgentIds: false, announceConcurrency: 2 }
  // IOA_BENCH_GOSSIP=0: ours on the DHT alone (no capability snapshots over gossipsub)
  if (process.env.IOA_BENCH_GOSSIP === '0') init.gossip = false
  return init
}

export async function mapLimit (items, limit, fn) {
  const out = new Array(items.length)
  let next = 0
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const i = next++
      out[i] = await fn(items[i], i)
    }
  }))
  return out
}

export function row (name, value, unit, baseline, target) {
  return { name, value, unit, baseline, ratio: baseline != null && baseline !== 0 ? value / baseline : null, ...(target != null ? { target } : {}) }
}

/**
 * Poll `read()` ({ sizes, self, peers }: per node its routing table size,
 * whether its first self-query has ended, its connected peers) every `every`
 * ms until every first self-query has ended, every table holds at least the
 * node's connected peers (their identify is done) and no size has changed
 * for `quiet` ms, or `max` ms have passed; `pending`: nodes behind
 */
export async function settleTables (read, { quiet = 3_000, max = 60_000, every = 500 } = {}) {
  const t0 = Date.now()
  let last = ''
  let since = Date.now()
  for (;;) {
    const { sizes, self, peers } = await read()
    const key = JSON.stringify(sizes)
    if (key !== last) { last = key; since = Date.now() }
    const pending = Object.keys(sizes).filter(i => !self[i] || sizes[i] < peers[i]).length
    const stable = pending === 0 && Date.now() - since >= quiet
    if (stable || Date.now() - t0 >= max) return { sizes: Object.values(sizes), stable, pending, ms: Date.now() - t0 }
    await new Promise(resolve => setTimeout(resolve, every))
  }
}

/** Run both kinds of one lookup, the baseline first on even rounds `l`, ours first on odd ones */
export async function interleaved (l, runBare, runOurs) {
  for (const run of l % 2 === 0 ? [runBare, runOurs] : [runOurs, runBare]) await run()
}

/** min / median / max of some numbers, as text */
export function spread (values) {
  const s = [...values].sort((a, b) => a - b)
  return s.length === 0 ? '-' : `${s[0]} / ${s[(s.length - 1) >> 1]} / ${s[s.length - 1]}`
}

/**
 * Times and recall of one variant: `add` takes one lookup's answer (ours:
 * agent ids; bare: provider peer ids) against what was expected; `rows(suffix)`
 * gives the variant's rows, `<path>.<metric>.<suffix>`
 */
export function tally () {
  const ours = []
  const bare = []
  const c = { found: 0, expected: 0, bareFound: 0, bareExpected: 0 }
  const add = (times, foundKey, expectedKey) => (ms, got, want) => {
    times.push(ms)
    c[expectedKey] += want.size
    const hit = [...want].filter(x => got.has(x)).length
    c[foundKey] += hit
    return hit
  }
  return {
    ours: add(ours, 'found', 'expected'),
    bare: add(bare, 'bareFound', 'bareExpected'),
    get counts () { return { ...c, lookups: ours.length } },
    /** One line of the figures so far (progress: a run cut short still shows them) */
    summary () {
      const o = [...ours].sort((a, b) => a - b)
      const b = [...bare].sort((a, b) => a - b)
      return `ours median ${percentile(o, 50).toFixed(0)} ms, p95 ${percentile(o, 95).toFixed(0)} ms, found ${c.found}/${c.expected} agents; ` +
        `bare median ${percentile(b, 50).toFixed(0)} ms, p95 ${percentile(b, 95).toFixed(0)} ms, found ${c.bareFound}/${c.bareExpected} holder peers`
    },
    rows (suffix) {
      ours.sort((a, b) => a - b)
      bare.sort((a, b) => a - b)
      const pct = (n, d) => d === 0 ? 0 : (100 * n) / d
      return [
        row(`interconnect.lookup.median.${suffix}`, percentile(ours, 50), 'ms', percentile(bare, 50)),
        row(`interconnect.lookup.p95.${suffix}`, percentile(ours, 95), 'ms', percentile(bare, 95), { max: 1.5 }),
        row(`bare.lookup.median.${suffix}`, percentile(bare, 50), 'ms', percentile(bare, 50)),
        row(`bare.lookup.p95.${suffix}`, percentile(bare, 95), 'ms', percentile(bare, 95)),
        row(`interconnect.recall.${suffix}`, pct(c.found, c.expected), '%', 100, { minValue: 99 }),
        // share of the holder peers the bare DHT lookup returned (the DHT's own recall: the baseline we beat)
        row(`bare.recall.${suffix}`, pct(c.bareFound, c.bareExpected), '%', 100)
      ]
    }
  }
}
