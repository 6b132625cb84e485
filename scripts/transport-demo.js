// `npm run demo:transport`: starts three nodes as separate OS processes on 127.0.0.1,
// joins them through a bootstrap node, finds one by a DHT key, exchanges
// messages over @ioa/transport, prints a timeline and stops everything.
// Exits 0 only if every step worked. `--json` prints one JSON summary.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { createTransportNode } from '@ioa/transport'
import { multiaddr } from '@multiformats/multiaddr'
import { CID } from 'multiformats/cid'
import { sha256 } from 'multiformats/hashes/sha2'

const json = process.argv.includes('--json')
const t0 = performance.now()
const timeline = []
const log = (event, detail = '') => {
  const at = Math.round(performance.now() - t0)
  timeline.push({ at, event, detail })
  if (!json) console.log(`${String(at).padStart(6)} ms  ${event}${detail ? '  ' + detail : ''}`)
}

const NODE = fileURLToPath(new URL('./transport-demo-node.js', import.meta.url))
const children = []

async function startChild (name, bootstrapAddr) {
  const args = ['--import', fileURLToPath(new URL('./polyfill.js', import.meta.url)), NODE, name]
  if (bootstrapAddr != null) args.push(bootstrapAddr)
  const proc = spawn(process.execPath, args, { stdio: ['pipe', 'pipe', 'inherit'] })
  children.push(proc)
  const lines = createInterface({ input: proc.stdout })
  const info = await new Promise((resolve, reject) => {
    lines.once('line', line => { resolve(JSON.parse(line)) })
    proc.once('exit', code => { reject(new Error(`${name} exited with ${code}`)) })
  })
  lines.on('line', line => {
    const msg = JSON.parse(line)
    if (msg.provided != null) log(`${name} announced`, msg.provided)
  })
  log(`started ${name}`, `pid ${proc.pid} ${info.addrs[0]}`)
  return { name, proc, ...info }
}

let ok = false
let me
try {
  const alpha = await startChild('alpha')
  const others = await Promise.all(['beta', 'gamma'].map(n => startChild(n, alpha.addrs[0])))
  const all = [alpha, ...others]

  me = await createTransportNode({ transports: ['tcp'], bootstrap: [alpha.addrs[0]] })
  log('started driver node', me.peerId.toString())

  // wait until the bootstrap connection and DHT routing are ready
  for (let i = 0; i < 100 && me.getPeers().length === 0; i++) await new Promise(r => setTimeout(r, 100))
  log('joined the network', `${me.getPeers().length} peer(s)`)

  const key = CID.createV1(0x55, await sha256.digest(new TextEncoder().encode('demo.gamma')))
  let found
  for (let attempt = 0; attempt < 40 && found == null; attempt++) {
    for await (const p of me.contentRouting.findProviders(key, { signal: AbortSignal.timeout(3_000) })) {
      found = p
      break
    }
    if (found == null) await new Promise(r => setTimeout(r, 250))
  }
  if (found == null) throw new Error('DHT lookup for demo.gamma found nobody')
  log('DHT lookup demo.gamma', `-> ${found.id.toString()}`)
  if (found.id.toString() !== others[1].peerId) throw new Error('DHT returned the wrong provider')

  const replies = []
  for (const child of all) {
    const started = performance.now()
    const reply = await me.services.messaging.request(multiaddr(child.addrs[0]), '/ioa/demo/1.0.0', 'hello', { text: `hi ${child.name}` })
    const rtt = (performance.now() - started).toFixed(1)
    log(`request -> ${child.name}`, `reply from ${reply.from} (pid ${reply.pid}) in ${rtt} ms`)
    if (reply.from !== child.name || reply.pid !== child.proc.pid) throw new Error(`bad reply from ${child.name}`)
    replies.push(reply)
  }
  ok = replies.length === all.length
} catch (err) {
  log('FAILED', err.message)
} finally {
  await me?.stop()
  await Promise.all(children.map(async c => {
    if (c.exitCode == null) {
      const exited = once(c, 'exit')
      c.kill('SIGTERM')
      await exited
    }
  }))
  log('stopped all nodes')
}

const summary = {
  name: 'transport-hello',
  status: ok ? 'completed' : 'failed',
  nodes: children.length + 1,
  steps: timeline.length,
  duration: Math.round(performance.now() - t0)
}
if (json) {
  console.log(JSON.stringify({ scenarios: [summary], timeline }))
} else {
  console.log(`\n${summary.status.toUpperCase()}: ${summary.nodes} nodes in separate processes, ${summary.duration} ms`)
}
process.exit(ok ? 0 : 1)
