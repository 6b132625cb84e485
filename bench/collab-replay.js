/**
 * Benchmark of envelope verification while the replay cache is full
 * (issue 9, item 3a): `verifyEnvelope` throughput of one legitimate sender
 * (a signed envelope with a one-link delegation chain, the sender's own
 * `did:key`) against a replay cache that already holds 100,000 unexpired
 * entries of other senders, for
 *
 * - `replay.held-100k`: the replay cache of @ioa/collab;
 * - `replay.held-100k.before`: the algorithm before the fix, kept below as
 *   `BeforeReplayCache` (one insertion-ordered map; when full, a full scan
 *   for expired entries on every insert, then eviction of the oldest with a
 *   node-wide floor), measured in the same run;
 * - `replay.empty`: an empty replay cache (the baseline).
 *
 * The same envelopes go through each cache (separate caches, so they are
 * not replays there). Rows are envelopes per second; `ratio` is against the
 * empty cache.
 *
 *   npx tsc -b && node --import ./scripts/polyfill.js bench/collab-replay.js [--quick]
 */
import { pathToFileURL } from 'node:url'
import { createIdentity } from '@ioa/interconnect'
import { delegate } from '@ioa/collab'
import { ReplayCache, createEnvelope, verifyEnvelope } from '@ioa/collab/wire'

const PROFILES = {
  default: { envelopes: 4_000, held: 100_000, rounds: 3 },
  quick: { envelopes: 600, held: 100_000, rounds: 2 }
}

/**
 * The replay cache before issue 9 (3a), for comparison only: a full scan of
 * every entry on each insert once full, and one floor for every sender
 */
class BeforeReplayCache {
  constructor ({ maxEntries = 100_000, clockSkew = 30_000 } = {}) {
    this.maxEntries = maxEntries
    this.maxEntriesPerPeer = Infinity
    this.clockSkew = clockSkew
    this.entries = new Map()
    this.floor = -Infinity
  }

  get size () { return this.entries.size }

  has (from, nonce, iat, now = Date.now()) {
    const e = this.entries.get(`${from}\n${nonce}`)
    if (e != null && e.expires >= now) return true
    return iat <= this.floor
  }

  take (from, nonce, iat, exp, now = Date.now()) {
    if (this.has(from, nonce, iat, now)) return 'replay'
    if (this.entries.size >= this.maxEntries) {
      for (const [k, e] of this.entries) if (e.expires < now) this.entries.delete(k)
    }
    while (this.entries.size >= this.maxEntries) {
      const [oldestKey, oldest] = this.entries.entries().next().value
      this.entries.delete(oldestKey)
      this.floor = Math.max(this.floor, oldest.iat)
      if (iat <= this.floor) return 'replay'
    }
    const key = `${from}\n${nonce}`
    this.entries.delete(key)
    this.entries.set(key, { expires: exp + this.clockSkew, iat })
    return 'taken'
  }
}

/** Fill a cache with `n` live entries of other senders, issued a little before the measured envelopes */
function fill (cache, n, now, iat) {
  for (let i = 0; i < n; i++) cache.take(`did:key:zFlood${i % 5_000}`, `nonce-${i}`, iat, now + 300_000, now, `peer-${i % 16}`)
  if (cache.size !== n) throw new Error(`cache holds ${cache.size}, not ${n}`)
}

const round1 = x => Math.round(x * 10) / 10

/**
 * @param {{ quick?: boolean, progress?: (msg: string) => void }} [options]
 */
export async function benchReplayCache ({ quick = false, progress = () => {} } = {}) {
  const profile = quick ? PROFILES.quick : PROFILES.default
  const [root, sender, executor] = await Promise.all([createIdentity(), createIdentity(), createIdentity()])
  const token = await delegate(root, { audience: sender.did, capabilities: [{ skill: 'bench.work' }], expiresAt: Date.now() + 3_600_000 })
  const body = { input: { n: 1 } }
  const envelopes = []
  for (let i = 0; i < profile.envelopes; i++) {
    envelopes.push(await createEnvelope(sender, { to: executor.did, skill: 'bench.work', task: `t-${i}`, body, proofs: [token], expiresAt: Date.now() + 300_000 }))
  }
  progress(`collab-replay: ${envelopes.length} envelopes signed`)
  // the entries held were issued before every measured envelope (so the old node-wide floor does not refuse them)
  const heldIat = envelopes[0].payload.iat - 10_000

  const variants = {
    empty: () => new ReplayCache(),
    'held-100k': () => { const c = new ReplayCache({ maxEntries: profile.held }); fill(c, profile.held, Date.now(), heldIat); return c },
    'held-100k.before': () => { const c = new BeforeReplayCache({ maxEntries: profile.held }); fill(c, profile.held, Date.now(), heldIat); return c }
  }
  // warm up the verification path (JIT) before anything is timed
  const warm = new ReplayCache()
  for (const env of envelopes.slice(0, 200)) await verifyEnvelope(env, body, { self: executor.did, replayCache: warm })
  const rates = Object.fromEntries(Object.keys(variants).map(k => [k, []]))
  const work = []
  for (let r = 0; r < profile.rounds; r++) {
    const names = Object.keys(variants)
    for (let k = 0; k < names.length; k++) {
      const name = names[(r + k) % names.length]
      const cache = variants[name]()
      const visited = cache.stats?.visited ?? 0
      const start = performance.now()
      for (const env of envelopes) await verifyEnvelope(env, body, { self: executor.did, replayCache: cache, peer: 'bench-peer' })
      const ms = performance.now() - start
      rates[name].push(envelopes.length * 1000 / ms)
      if (name === 'held-100k') work.push((cache.stats.visited - visited) / envelopes.length)
    }
    progress(`collab-replay: round ${r + 1}/${profile.rounds}`)
  }
  const median = xs => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]
  const empty = median(rates.empty)
  const row = (name, value) => ({ name, value: round1(value), unit: 'envelopes/s', baseline: round1(empty), ratio: Math.round(value / empty * 1000) / 1000 })
  return [
    row('replay.empty', empty),
    row('replay.held-100k', median(rates['held-100k'])),
    row('replay.held-100k.before', median(rates['held-100k.before'])),
    { name: 'replay.held-100k.visited-per-envelope', value: Math.round(median(work) * 1000) / 1000, unit: 'entries', baseline: null, ratio: null }
  ]
}

if (process.argv[1] != null && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const quick = process.argv.includes('--quick')
  const rows = await benchReplayCache({ quick, progress: msg => process.stderr.write(msg + '\n') })
  for (const r of rows) console.log(JSON.stringify(r))
}
