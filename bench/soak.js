/**
 * The `soak` group: tasks at a steady rate from one node to another over TCP
 * for a while, sampling the process's RSS and heap (after a forced GC) and
 * the executor's stored tasks, to show that memory stays flat once the
 * executor's retention (spec/collab-tasks.md 9.1) has reached its bound.
 * The verdict is the heap's slope after the warm-up, not a time.
 */
import v8 from 'node:v8'
import vm from 'node:vm'
import { setTimeout as sleep } from 'node:timers/promises'
import { createTransportNode } from '@ioa/transport'
import { createInterconnect } from '@ioa/interconnect'
import { createTaskService, delegate } from '@ioa/collab'
import { MemoryDatastore } from 'datastore-core'

const MIB = 1024 * 1024

/** A GC on demand, so that heap samples show what is live, not what is not yet collected */
function gcFunction () {
  v8.setFlagsFromString('--expose-gc')
  return vm.runInNewContext('gc')
}

/** Least-squares slope of y over x */
function slope (xs, ys) {
  const n = xs.length
  if (n < 2) return 0
  const mx = xs.reduce((a, b) => a + b, 0) / n
  const my = ys.reduce((a, b) => a + b, 0) / n
  let num = 0
  let den = 0
  for (let i = 0; i < n; i++) {
    num += (xs[i] - mx) * (ys[i] - my)
    den += (xs[i] - mx) ** 2
  }
  return den === 0 ? 0 : num / den
}

function median (values) {
  const s = [...values].sort((a, b) => a - b)
  return s.length === 0 ? 0 : s[Math.floor(s.length / 2)]
}

async function countKeys (ds, prefix) {
  let n = 0
  for await (const _ of ds.queryKeys({ prefix })) n++
  return n
}

async function tcpNode () {
  return createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'] })
}

export const soakGroup = {
  name: 'soak',
  title: 'tasks at a steady rate over TCP: memory after warm-up (heap after GC, RSS), finished tasks stored',
  async run ({ quick, soak = {}, progress }) {
    const seconds = soak.seconds ?? (quick ? 20 : 75)
    const rate = soak.rate ?? 50
    const warmup = Math.round(seconds * (quick ? 0.6 : 0.4))
    const sampleEvery = quick ? 1_000 : 2_500
    /** bounded so that a slow executor shows as a lower rate, not as a growing backlog */
    const maxInFlight = 256
    // retention small enough to reach its bound within the warm-up: 1,000 finished tasks (quick: 200),
    // envelopes of 5 s and a clock skew of 5 s (a task is kept at least 10 s: 500 tasks at 50/s)
    const retention = soak.keepAll === true ? { maxTasks: 1e9, maxAge: 1e9 } : { maxTasks: quick ? 200 : 1_000, sweepInterval: 1_000 }
    const gc = gcFunction()

    const executor = await tcpNode()
    const requester = await tcpNode()
    const datastore = new MemoryDatastore()
    let icE, icR, tsE, tsR
    try {
      await requester.dial(executor.getMultiaddrs())
      icE = await createInterconnect(executor, { requestTimeout: 5_000 })
      // the agent is resolved once: this measures the task layer, not the directory's cache
      icR = await createInterconnect(requester, { requestTimeout: 5_000, cacheTtl: 3_600_000 })
      // every per-task map at its bound within the warm-up: the replay cache (until it expires
      // entries on its own, issue 9 item 3a, it only prunes when full) and the requester's routes
      tsE = createTaskService(icE, { datastore, clockSkew: 5_000, retention, replayCache: { maxEntries: 2_000, clockSkew: 5_000 } })
      tsR = createTaskService(icR, { maxRoutes: 1_000 })
      const worker = await icE.host({ key: 'soak-worker', name: 'Soak worker', skills: [{ id: 'soak.work' }] })
      const caller = await icR.host({ key: 'soak-caller', name: 'Soak caller', skills: [{ id: 'soak.none' }] })
      const token = await delegate(caller.identity, { audience: caller.did, capabilities: [{ skill: 'soak.*' }], expiresAt: Date.now() + 3_600_000 })
      await tsE.serve(worker.did, 'soak.work', (input, ctx) => {
        ctx.progress({ step: 'working' })
        return { n: input.n, echo: input.pad.length }
      })
      const start = Date.now()
      while ((await icR.resolve(worker.did, { cache: false, timeout: 3_000 }).catch(() => ({ peers: [] }))).peers.length === 0) {
        if (Date.now() - start > 30_000) throw new Error('the soak worker cannot be resolved')
        await sleep(100)
      }
      progress(`${seconds} s at ${rate} tasks/s (warm-up ${warmup} s), retention ${JSON.stringify(retention)}`)

      let started = 0
      let completed = 0
      let failed = 0
      let skipped = 0
      let inFlight = 0
      const pad = 'x'.repeat(512)
      const one = async (n) => {
        inFlight++
        try {
          const request = { skill: 'soak.work', input: { n, pad }, proofs: [token], ttl: 5_000 }
          // one task in ten carries an idempotency key (the key store is bounded too)
          if (n % 10 === 0) request.idempotencyKey = `soak-${n}`
          const snap = await tsR.submitAndWait(caller.did, worker.did, request)
          if (snap.result?.n !== n) throw new Error(`task ${n} returned ${JSON.stringify(snap.result)}`)
          completed++
        } catch (err) {
          failed++
          if (failed <= 5) progress(`task ${n} failed: ${err.code ?? ''} ${err.message}`)
        } finally {
          inFlight--
        }
      }

      const samples = []
      const t0 = performance.now()
      const end = t0 + seconds * 1_000
      let nextSample = t0
      const running = new Set()
      while (performance.now() < end) {
        const now = performance.now()
        // steady rate: start what is due by now
        const due = Math.floor(((now - t0) / 1_000) * rate)
        while (started < due) {
          if (inFlight >= maxInFlight) { skipped++; started++; continue }
          const p = one(started++)
          running.add(p)
          void p.finally(() => running.delete(p))
        }
        if (now >= nextSample) {
          nextSample += sampleEvery
          gc()
          const m = process.memoryUsage()
          const stored = await countKeys(datastore, '/ioa/tasks/')
          const keys = await countKeys(datastore, '/ioa/task-keys/')
          const t = (performance.now() - t0) / 1_000
          samples.push({ t, rss: m.rss / MIB, heap: m.heapUsed / MIB, stored, keys, completed })
          progress(`t=${t.toFixed(1)} s rss=${(m.rss / MIB).toFixed(1)} MiB heap=${(m.heapUsed / MIB).toFixed(1)} MiB completed=${completed} failed=${failed} stored=${stored} keys=${keys}`)
        }
        await sleep(Math.max(1, Math.min(20, 1_000 / rate)))
      }
      await Promise.all(running)

      const after = samples.filter(s => s.t >= warmup)
      const minutes = after.map(s => s.t / 60)
      const heapSlope = slope(minutes, after.map(s => s.heap))
      const rssSlope = slope(minutes, after.map(s => s.rss))
      const third = Math.max(1, Math.floor(after.length / 3))
      const heapRatio = median(after.slice(-third).map(s => s.heap)) / median(after.slice(0, third).map(s => s.heap))
      const rssRatio = median(after.slice(-third).map(s => s.rss)) / median(after.slice(0, third).map(s => s.rss))
      const last = samples[samples.length - 1]
      progress(`after warm-up: heap slope ${heapSlope.toFixed(2)} MiB/min (last/first third ${heapRatio.toFixed(3)}), rss slope ${rssSlope.toFixed(2)} MiB/min (${rssRatio.toFixed(3)})`)
      return [
        { name: 'soak.tasks.completed', value: completed, unit: 'tasks' },
        { name: 'soak.tasks.failed', value: failed + skipped, unit: 'tasks', target: { maxValue: 0 } },
        { name: 'soak.rate', value: completed / seconds, unit: 'tasks/s' },
        { name: 'soak.stored.tasks', value: last.stored, unit: 'tasks' },
        { name: 'soak.stored.keys', value: last.keys, unit: 'keys' },
        { name: 'soak.heap.end', value: last.heap, unit: 'MiB' },
        { name: 'soak.heap.slope', value: heapSlope, unit: 'MiB/min', target: { maxValue: 1 } },
        { name: 'soak.heap.growth', value: (heapRatio - 1) * 100, unit: '%' },
        { name: 'soak.rss.end', value: last.rss, unit: 'MiB' },
        { name: 'soak.rss.slope', value: rssSlope, unit: 'MiB/min' },
        { name: 'soak.rss.growth', value: (rssRatio - 1) * 100, unit: '%' }
      ]
    } finally {
      await tsR?.stop().catch(() => {})
      await tsE?.stop().catch(() => {})
      await icR?.stop().catch(() => {})
      await icE?.stop().catch(() => {})
      await Promise.all([requester.stop(), executor.stop()].map(p => Promise.resolve(p).catch(() => {})))
    }
  }
}
