// The TCP variants of the `discovery` group: the 50 nodes x 1,000 agents of
// the memory variant over TCP on 127.0.0.1, spread over WORKERS OS processes
// (bench/discovery-worker.js, node i in worker i % WORKERS, so that most
// links of the ring-plus-chords cross processes); this process only steers.
// One network, three phases of lookups, in this order:
//
//   tcp    a quiet machine (whatever else runs on it)
//   load   beside a CPU load of one core: a child process that spins, started
//          before the phase's first lookup and stopped after its last
//   churn  20 % churn during the lookups: 10 of the 50 nodes leave (stop) and
//          10 new ones join (start with 3 bootstrap peers, host the leaver's
//          20 agents' skills under new keys, announce), one leave and one
//          join at a time, spread over the first half of the lookups, while
//          the lookups go on (a newcomer counts from the moment its
//          announcements are done; the phase does not wait for the last ones)
//
// A lookup is issued from a live node of another worker each time (worker
// l % WORKERS for lookup l). Its expected set is fixed when it starts: the
// agents hosted on the nodes alive then (not leaving) whose announcements had
// finished then (`announced()` resolved). Bare findProviders is expected to
// return those agents' nodes. Under churn the rows `*.recall.churn.stayed`
// count only the nodes that were still alive when the lookup ended.
import { spawn } from 'node:child_process'
import { startChild } from './child.js'
import { PER_NODE, allSkills, interleaved, mapLimit, settleTables, spread, tally } from './discovery-common.js'

export const WORKERS = 4
const TIMEOUT = 30_000

/** A worker with commands in flight at once (answers matched by id) */
function startWorker (index) {
  const waiting = new Map()
  let nextId = 0
  const child = startChild(new URL('./discovery-worker.js', import.meta.url), [String(index)], (e) => {
    const w = waiting.get(e.id)
    if (w == null) return false
    waiting.delete(e.id)
    if (e.error != null) w.reject(new Error(`worker ${index}: ${e.error}`))
    else w.resolve(e)
    return true
  })
  return {
    index,
    call (cmd, args = {}) {
      const id = nextId++
      return new Promise((resolve, reject) => {
        waiting.set(id, { resolve, reject })
        child.send({ id, cmd, ...args })
      })
    },
    stop: () => child.stop()
  }
}

/** A process that keeps one core busy until `stop()` */
export function startLoad () {
  const child = spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' })
  return {
    async stop () {
      if (child.exitCode != null || child.signalCode != null) return
      const exited = new Promise(resolve => child.once('exit', resolve))
      child.kill('SIGKILL')
      await exited
    }
  }
}

/** `settleTables` over the workers' nodes */
async function stableTables (workers, { quiet = 3_000, max = 60_000, every = 500 } = {}) {
  return settleTables(async () => {
    const answers = await Promise.all(workers.map(w => w.call('tables')))
    const merge = (key) => Object.assign({}, ...answers.map(r => r[key]))
    return { sizes: merge('tables'), self: merge('self'), peers: merge('peers') }
  }, { quiet, max, every })
}

export async function tcpVariants ({ size, quick, progress, phases }) {
  const lookups = quick ? 6 : 20
  const skills = allSkills(size)
  const workers = []
  /** node index -> { worker, layout, peer, state: 'joining' | 'up' | 'leaving', agents: [{ did, skill }], leftAt?, upAt? } */
  const net = new Map()
  const rows = []
  let load
  try {
    progress(`starting ${size} TCP nodes in ${WORKERS} worker processes`)
    for (let w = 0; w < WORKERS; w++) workers.push(startWorker(w))
    const addrs = {}
    await Promise.all(workers.map(async (w) => {
      const mine = [...Array(size).keys()].filter(i => i % WORKERS === w.index)
      const r = await w.call('start', { nodes: mine })
      for (const i of mine) net.set(i, { worker: w, layout: i, state: 'up', agents: [], peer: peerOf(r.addrs[i]) })
      Object.assign(addrs, r.addrs)
    }))
    // the memory variant's topology: a ring plus chords
    const t1 = performance.now()
    const failed = (await Promise.all(workers.map(w => w.call('dial', {
      pairs: [...net.keys()].filter(i => i % WORKERS === w.index).flatMap(i => [(i + 1) % size, (i + 7) % size].map(j => [i, addrs[j]]))
    })))).reduce((a, r) => a + r.failed, 0)
    progress(`ring + chords dialled in ${((performance.now() - t1) / 1000).toFixed(1)} s (${failed} dials failed)`)
    await settle(workers, progress)

    progress(`hosting ${size * PER_NODE} agents`)
    await mapLimit([...net.keys()], 8, async (i) => {
      const n = net.get(i)
      n.agents = (await n.worker.call('host', { i, layout: n.layout, size })).agents
    })
    progress('waiting for announcements')
    const t2 = performance.now()
    const late = (await Promise.allSettled(workers.map(w => w.call('announced')))).filter(r => r.status === 'rejected').length
    progress(`announcements done in ${((performance.now() - t2) / 1000).toFixed(1)} s${late > 0 ? ` (${late} workers still announcing after 600 s: measured as they are)` : ''}`)
    for (const n of net.values()) n.upAt = performance.now()

    const ctx = { net, workers, skills, progress, addrs, size }
    if (phases.includes('tcp')) {
      rows.push(...(await lookupPhase(ctx, { name: 'tcp', lookups, offset: 0 })).rows('tcp'))
    }
    if (phases.includes('load')) {
      load = startLoad()
      progress('CPU load of one core started (a spinning child process)')
      rows.push(...(await lookupPhase(ctx, { name: 'load', lookups, offset: 11 })).rows('load'))
      await load.stop()
      load = undefined
      progress('CPU load stopped')
    }
    if (phases.includes('churn')) {
      rows.push(...await churnPhase(ctx, { lookups: quick ? 6 : 20, offset: 23 }))
    }
    return rows
  } finally {
    await load?.stop()
    await Promise.all(workers.map(w => w.stop()))
  }
}

function peerOf (addrs) {
  return addrs[0].slice(addrs[0].lastIndexOf('/p2p/') + 5)
}

/** Wait for every node's first self-query and stable routing tables; print their sizes */
async function settle (workers, progress) {
  const { sizes, stable, ms, pending } = await stableTables(workers)
  progress(`routing tables ${stable ? 'stable' : `not settled (${pending} nodes with their self-query pending or fewer table entries than connected peers)`} after ${(ms / 1000).toFixed(1)} s: smallest / median / largest ${spread(sizes)} peers`)
}

/** The agents and holder peers of `skill` on the nodes that count now */
function expectedNow (net, skill) {
  const agents = new Map()
  const peers = new Map()
  for (const [i, n] of net) {
    if (n.state !== 'up') continue
    for (const a of n.agents) {
      if (a.skill !== skill) continue
      agents.set(a.did, i)
      peers.set(n.peer, i)
    }
  }
  return { agents, peers }
}

/** A live node of worker `w` (or of any worker when that one has none), the `k`-th of them */
function askerOf (net, w, k) {
  const live = [...net.entries()].filter(([, n]) => n.state === 'up')
  const of = live.filter(([, n]) => n.worker.index === w)
  const pool = of.length > 0 ? of : live
  return pool[k % pool.length]
}

/**
 * One lookup of `skill` both ways (interleaved: bare first on even rounds),
 * into `t`; `after(node index)` says whether a node stopped counting while
 * the lookup ran (for the `.stayed` figures)
 */
async function lookupBoth (ctx, t, l, skill, stayed) {
  const { net, progress } = ctx
  const [i, n] = askerOf(net, l % WORKERS, Math.floor(l / WORKERS) * 3 + l)
  const runBare = async () => {
    const want = expectedNow(net, skill)
    const r = await n.worker.call('bare', { i, skill, timeout: TIMEOUT })
    t.bare(r.ms, new Set(r.peers), new Set(want.peers.keys()))
    stayed?.bare(r.ms, new Set(r.peers), new Set([...want.peers].filter(([, j]) => net.get(j).state === 'up').map(([p]) => p)))
  }
  const runOurs = async () => {
    const want = expectedNow(net, skill)
    const r = await n.worker.call('lookup', { i, skill, timeout: TIMEOUT })
    const got = new Set(r.agents)
    const hit = t.ours(r.ms, got, new Set(want.agents.keys()))
    stayed?.ours(r.ms, got, new Set([...want.agents].filter(([, j]) => net.get(j).state === 'up').map(([d]) => d)))
    if (hit < want.agents.size) {
      const missing = [...want.agents].filter(([d]) => !got.has(d)).map(([, j]) => j)
      progress(`lookup ${l} of ${skill} from node ${i} (worker ${n.worker.index}): ${hit}/${want.agents.size} agents in ${r.ms.toFixed(0)} ms; missed agents of nodes ${[...new Set(missing)].map(j => `${j}${net.get(j).state === 'up' ? '' : ` (${net.get(j).state})`}`).join(', ')}`)
    }
  }
  await interleaved(l, runBare, runOurs)
}

async function lookupPhase (ctx, { name, lookups, offset }) {
  ctx.progress(`${name}: ${lookups} lookups (ours and bare findProviders, interleaved)`)
  const t = tally()
  for (let l = 0; l < lookups; l++) {
    await lookupBoth(ctx, t, l, ctx.skills[((l + offset) * 37) % ctx.skills.length])
  }
  ctx.progress(`${name}: ${t.summary()}`)
  return t
}

/** 20 % of the nodes leave and as many join, one of each at a time over the first half of the lookups, while the lookups run */
async function churnPhase (ctx, { lookups, offset }) {
  const { net, workers, progress } = ctx
  const CHURN = Math.round(ctx.size / 5)
  progress(`churn: ${lookups} lookups while ${CHURN} nodes leave and ${CHURN} join`)
  const t = tally()
  const stayed = tally()
  const victims = Array.from({ length: CHURN }, (_, c) => (c * 5 + 3) % ctx.size)
  const leaves = []
  let nextIndex = ctx.size
  const newcomers = []
  const churnOne = (c) => {
    const v = victims[c]
    const gone = net.get(v)
    gone.state = 'leaving'
    gone.leftAt = performance.now()
    leaves.push(gone.worker.call('leave', { i: v }).then(() => { gone.state = 'gone' }))
    // a newcomer in the leaver's process, with its skills, bootstrapping from 3 live nodes of other processes
    const j = nextIndex++
    const w = gone.worker
    const boot = [...net.entries()].filter(([, n]) => n.state === 'up' && n.worker !== w).filter((_, k) => k % 7 === c % 7).slice(0, 3).map(([i]) => ctx.addrs[i][0])
    const n = { worker: w, layout: gone.layout, state: 'joining', agents: [] }
    net.set(j, n)
    newcomers.push(n)
    const t0 = performance.now()
    ;(async () => {
      const r = await w.call('start', { nodes: [j], bootstrap: boot })
      ctx.addrs[j] = r.addrs[j]
      n.peer = peerOf(r.addrs[j])
      n.agents = (await w.call('host', { i: j, layout: n.layout, size: ctx.size })).agents
      await w.call('announced', { nodes: [j] })
      n.state = 'up'
      n.upAt = performance.now()
      progress(`churn: node ${j} (for ${v}, worker ${w.index}) up and announced in ${((n.upAt - t0) / 1000).toFixed(1)} s`)
    })().catch((err) => {
      // the phase ended (the worker stops) or the join failed: the newcomer never counted
      if (n.state === 'joining') progress(`churn: node ${j} did not join: ${err.message}`)
    })
  }
  const every = Math.max(1, Math.floor(lookups / 2 / CHURN))
  let churned = 0
  for (let l = 0; l < lookups; l++) {
    while (churned < CHURN && l >= churned * every) churnOne(churned++)
    await lookupBoth(ctx, t, l, ctx.skills[((l + offset) * 37) % ctx.skills.length], stayed)
  }
  while (churned < CHURN) churnOne(churned++)
  await Promise.all(leaves)
  const joined = newcomers.filter(n => n.state === 'up').length
  progress(`churn: ${joined} of the ${CHURN} newcomers had announced when the last lookup ended`)
  const s = stayed.counts
  progress(`churn: ${t.summary()}; of the nodes that stayed through the lookup: ours ${s.found}/${s.expected}, bare ${s.bareFound}/${s.bareExpected}`)
  const { sizes } = await stableTables(workers, { quiet: 0, max: 0 })
  progress(`churn: routing tables after it: smallest / median / largest ${spread(sizes)} peers`)
  const stayedRows = stayed.rows('churn.stayed').filter(r => /recall/.test(r.name)).map(r => ({ ...r, target: undefined }))
  return [...t.rows('churn'), ...stayedRows]
}
