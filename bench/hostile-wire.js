/**
 * The messaging wire under two attacks from issue 9 (item 3), measured on TCP
 * loopback against a node in its own process. Not part of `npm run bench`:
 * run it by hand and compare builds.
 *
 *   npx tsc -b && node --import ./scripts/polyfill.js bench/hostile-wire.js
 *
 * 1. partial frames: 8 attacker peers x 4 protocols x 8 streams each leave a
 *    frame of 1 MiB one byte short of complete (256 streams); the node's RSS
 *    and accounted buffered bytes before, during and after.
 * 2. decode floods: one peer (in a third process) sends frames of one-byte
 *    integers, 1 MiB ones and then ~131 KB ones, as fast as it can (opening a new stream whenever one is closed) while a bystander
 *    sends one echo request after another; the bystander's latency.
 */
import { fork } from 'node:child_process'
import { once } from 'node:events'
import { setImmediate } from 'node:timers'
import { fileURLToPath } from 'node:url'
import { createTransportNode, encodeFramePrefixed, FrameType } from '@ioa/transport'
import { percentile } from './measure.js'

const PROTOCOLS = ['/ioa/a/1.0.0', '/ioa/b/1.0.0', '/ioa/c/1.0.0', '/ioa/d/1.0.0']
const MiB = 1_048_576
const init = { transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'], maxConnections: 1000 }

async function server () {
  const node = await createTransportNode(init)
  for (const protocol of PROTOCOLS) {
    await node.services.messaging.handle(protocol, 'echo', (p) => p)
    await node.services.messaging.handle(protocol, 'sink', () => null)
  }
  process.on('message', (msg) => {
    if (msg === 'stats') {
      globalThis.gc?.()
      const m = node.services.messaging
      process.send({ rss: process.memoryUsage().rss, buffered: m.stats().bufferedBytes ?? null })
    } else if (msg === 'stop') {
      node.stop().then(() => process.exit(0))
    }
  })
  process.send({ addr: node.getMultiaddrs()[0].toString() })
}

/** Flood `addr` with 1 MiB frames of one-byte integers until told to stop */
async function flooder (addr, count) {
  const { multiaddr } = await import('@multiformats/multiaddr')
  const target = multiaddr(addr)
  const node = await createTransportNode(init)
  const frame = encodeFramePrefixed({ type: FrameType.REQUEST, id: 1, method: 'sink', payload: new Array(count).fill(1) })
  let flooding = true
  let streamsOpened = 0
  const codes = new Map()
  const workers = Promise.all(Array.from({ length: 8 }, async () => {
    while (flooding) {
      let s
      try {
        s = await node.dialProtocol(target, PROTOCOLS[1], { signal: AbortSignal.timeout(10_000) })
        streamsOpened++
      } catch { await new Promise(resolve => setTimeout(resolve, 50)); continue }
      s.addEventListener('message', (evt) => {
        const text = Buffer.from(evt.data.subarray()).toString('latin1')
        const code = /[A-Z]+_[A-Z_]+/.exec(text)?.[0] ?? 'other'
        codes.set(code, (codes.get(code) ?? 0) + 1)
      })
      // the node answers with a stream-level error and closes its side
      let refused = false
      s.addEventListener('remoteCloseWrite', () => { refused = true })
      s.addEventListener('close', () => { refused = true })
      while (flooding && !refused && s.status === 'open') {
        if (!s.send(frame)) {
          try { await s.onDrain({ signal: AbortSignal.timeout(5_000) }) } catch { break }
        }
        // never a loop of microtasks only: let the rest of the process run
        await new Promise(resolve => setImmediate(resolve))
      }
      if (s.status === 'open') s.abort(new Error('done'))
    }
  }))
  process.on('message', async () => {
    flooding = false
    await workers
    process.send({ streamsOpened, codes: Object.fromEntries(codes) })
    await node.stop()
    process.exit(0)
  })
  process.send('ready')
}

const mib = (n) => n == null ? '-' : `${(n / MiB).toFixed(1)} MiB`

async function main () {
  const child = fork(fileURLToPath(import.meta.url), ['--server'], { execArgv: ['--import', './scripts/polyfill.js', '--expose-gc'] })
  const [{ addr }] = await once(child, 'message')
  const stats = async () => { child.send('stats'); return (await once(child, 'message'))[0] }
  const { multiaddr } = await import('@multiformats/multiaddr')
  const target = multiaddr(addr)
  const nodes = []
  try {
    // 1. partial frames
    const before = await stats()
    process.stderr.write('server up\n')
    const attackers = await Promise.all(Array.from({ length: 8 }, () => createTransportNode(init)))
    nodes.push(...attackers)
    const prefix = Uint8Array.of(0x80, 0x80, 0x40) // 1 MiB
    const partial = new Uint8Array(MiB - 1)
    const streams = []
    let refusedOpen = 0
    for (const a of attackers) {
      for (const protocol of PROTOCOLS) {
        for (let i = 0; i < 8; i++) {
          try {
            const s = await a.dialProtocol(target, protocol, { signal: AbortSignal.timeout(10_000) })
            s.send(prefix)
            s.send(partial)
            streams.push(s)
          } catch { refusedOpen++ }
        }
      }
    }
    process.stderr.write(`opened ${streams.length} streams\n`)
    await new Promise(resolve => setTimeout(resolve, 5_000))
    const during = await stats()
    const open = streams.filter(s => s.status === 'open').length
    for (const s of streams) s.abort(new Error('done'))
    await new Promise(resolve => setTimeout(resolve, 2_000))
    const after = await stats()
    console.log(`partial frames: ${streams.length} streams (${refusedOpen} refused at open, ${open} still open after 5 s)`)
    console.log(`  server RSS ${mib(before.rss)} -> ${mib(during.rss)} during -> ${mib(after.rss)} after; buffered ${mib(during.buffered)} during, ${mib(after.buffered)} after`)
    await Promise.all(attackers.map(a => a.stop()))
    nodes.length = 0

    // 2. decode flood
    const bystander = await createTransportNode(init)
    nodes.push(bystander)
    const latency = async (ms) => {
      const samples = []
      const end = performance.now() + ms
      let failed = 0
      while (performance.now() < end) {
        const t = performance.now()
        try {
          await bystander.services.messaging.request(target, PROTOCOLS[0], 'echo', 'hi', { timeout: 30_000 })
          samples.push(performance.now() - t)
        } catch { failed++ }
      }
      samples.sort((a, b) => a - b)
      return { n: samples.length, failed, p50: percentile(samples, 50), p95: percentile(samples, 95), max: samples.at(-1) }
    }
    const fmt = (l) => `n=${l.n} failed=${l.failed} p50=${l.p50?.toFixed(2)} ms p95=${l.p95?.toFixed(2)} ms max=${l.max?.toFixed(1)} ms`
    const quiet = await latency(2_000)
    console.log(`bystander quiet: ${fmt(quiet)}`)
    // 1 MiB of one-byte integers (over the item limit), then 131,000 of them
    // in ~131 KB frames (within it: every frame is decoded unless charged)
    for (const count of [1_048_000, 131_000]) {
      const flooderProcess = fork(fileURLToPath(import.meta.url), ['--flooder', addr, String(count)], { execArgv: ['--import', './scripts/polyfill.js'] })
      await once(flooderProcess, 'message')
      await new Promise(resolve => setTimeout(resolve, 500))
      const loaded = await latency(10_000)
      flooderProcess.send('stop')
      const [flood] = await once(flooderProcess, 'message')
      console.log(`decode flood: frames of ${count} one-byte integers from one peer`)
      console.log(`  bystander under flood: ${fmt(loaded)}`)
      console.log(`  flooder (own process): ${flood.streamsOpened} streams opened; answers seen: ${JSON.stringify(flood.codes)}`)
      console.log(`  server RSS after the flood: ${mib((await stats()).rss)}`)
    }
  } finally {
    await Promise.all(nodes.map(n => n.stop()))
    child.send('stop')
  }
}

if (process.argv.includes('--server')) {
  server()
} else if (process.argv.includes('--flooder')) {
  const at = process.argv.indexOf('--flooder')
  flooder(process.argv[at + 1], Number(process.argv[at + 2]))
} else {
  main().catch((err) => { console.error(err); process.exitCode = 1 })
}
