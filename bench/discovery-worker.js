// A worker process of the `discovery` group's TCP variants
// (bench/discovery-tcp.js): it runs some of the network's nodes (TCP on
// 127.0.0.1, each with an interconnect) and does what the parent asks over
// JSON lines on stdin/stdout. Every command carries an `id`; its answer
// carries the same `id` (answers may come out of order: the parent keeps
// several commands in flight), and `error` when the command failed.
//
//   start    { nodes: [i], bootstrap?: [addr] }   -> { addrs: { i: [addr] } }
//   dial     { pairs: [[i, [addr]]] }              -> { failed }
//   tables   {}                                    -> { tables: { i: size }, self: { i: first self-query ended }, peers: { i: connected peers } }
//   host     { i, layout, size }                       -> { agents: [{ did, skill }] }
//   announced { nodes?: [i] }                      -> { ms }
//   lookup   { i, skill, timeout }                 -> { ms, agents: [did], peers: [peer] }
//   bare     { i, skill, timeout }                 -> { ms, peers: [peer] }
//   leave    { i }                                 -> {}       the node stops (interconnect, then libp2p)
//   stop     {}                                    -> the process stops every node and exits
import { createInterface } from 'node:readline'
import { createTransportNode } from '@ioa/transport'
import { capabilityCid, createInterconnect } from '@ioa/interconnect'
import { multiaddr } from '@multiformats/multiaddr'
import { LOOPBACK, PER_NODE, interconnectInit, mapLimit, skillOf } from './discovery-common.js'

const nodes = new Map()
const ics = new Map()
/** Nodes whose first DHT self-query has ended */
const selfQueried = new Set()

const reply = (id, body) => { process.stdout.write(JSON.stringify({ id, ...body }) + '\n') }

async function start ({ nodes: list, bootstrap }) {
  const addrs = {}
  await mapLimit(list, 4, async (i) => {
    const node = await createTransportNode({
      transports: ['tcp'],
      listen: ['/ip4/127.0.0.1/tcp/0'],
      allow: LOOPBACK,
      ...(bootstrap != null ? { bootstrap } : {}),
      start: false
    })
    // kad-dht's first self-query starts once the routing table has a peer
    node.addEventListener('kad-dht:query:self', () => { selfQueried.add(i) }, { once: true })
    await node.start()
    nodes.set(i, node)
    ics.set(i, await createInterconnect(node, interconnectInit()))
    addrs[i] = node.getMultiaddrs().map(String)
  })
  return { addrs }
}

async function dial ({ pairs }) {
  let failed = 0
  await mapLimit(pairs, 8, async ([i, addrs]) => {
    // a loaded machine can miss libp2p's dial timeout in the handshake: up to 3 tries
    for (let attempt = 1; ; attempt++) {
      try {
        await nodes.get(i).dial(addrs.map(a => multiaddr(a)), { signal: AbortSignal.timeout(20_000) })
        return
      } catch (err) {
        process.stderr.write(`[discovery worker ${process.pid}] node ${i} could not dial ${addrs[0]} (try ${attempt}/3): ${err.message}\n`)
        if (attempt === 3) {
          failed++
          return
        }
      }
    }
  })
  return { failed }
}

function tables () {
  const out = {}
  const self = {}
  const peers = {}
  for (const [i, node] of nodes) {
    out[i] = node.services.dht.routingTable?.size ?? node.getPeers().length
    self[i] = selfQueried.has(i)
    peers[i] = node.getPeers().length
  }
  return { tables: out, self, peers }
}

async function host ({ i, layout, size }) {
  const ic = ics.get(i)
  const agents = []
  for (let a = 0; a < PER_NODE; a++) {
    const skill = skillOf(layout, a, size)
    const agent = await ic.host({ key: `agent-${a}`, name: `Agent ${i}/${a}`, skills: [{ id: skill }] })
    agents.push({ did: agent.did, skill })
  }
  return { agents }
}

async function announced ({ nodes: list }) {
  const t0 = performance.now()
  const which = list ?? [...ics.keys()]
  await Promise.all(which.map(i => ics.get(i).announced({ signal: AbortSignal.timeout(600_000) })))
  return { ms: performance.now() - t0 }
}

async function lookup ({ i, skill, timeout }) {
  const t0 = performance.now()
  const results = await ics.get(i).discoverAll({ capability: skill }, { cache: false, timeout })
  const ms = performance.now() - t0
  return { ms, agents: results.map(r => r.card.id), peers: [...new Set(results.map(r => r.peer))] }
}

async function bare ({ i, skill, timeout }) {
  const cid = await capabilityCid(skill)
  const peers = new Set()
  const t0 = performance.now()
  for await (const p of nodes.get(i).contentRouting.findProviders(cid, { signal: AbortSignal.timeout(timeout) })) peers.add(p.id.toString())
  return { ms: performance.now() - t0, peers: [...peers] }
}

async function leave ({ i }) {
  const ic = ics.get(i)
  const node = nodes.get(i)
  ics.delete(i)
  nodes.delete(i)
  await ic?.stop()
  await node?.stop()
  return {}
}

async function stopAll () {
  await Promise.all([...ics.values()].map(ic => ic.stop().catch(() => {})))
  await Promise.all([...nodes.values()].map(n => n.stop().catch(() => {})))
}

const COMMANDS = { start, dial, tables, host, announced, lookup, bare, leave }

const lines = createInterface({ input: process.stdin })
for await (const line of lines) {
  const { id, cmd, ...args } = JSON.parse(line)
  if (cmd === 'stop') break
  const fn = COMMANDS[cmd]
  if (fn == null) {
    reply(id, { error: `unknown command ${cmd}` })
    continue
  }
  // commands run concurrently; each answer names its command's id
  Promise.resolve().then(() => fn(args)).then(
    (body) => { reply(id, body) },
    (err) => { reply(id, { error: `${err.name}: ${err.message}` }) }
  )
}
// asked to stop, or the parent is gone (stdin closed): stop the nodes, at most 15 s
setTimeout(() => { process.exit(0) }, 15_000).unref()
await stopAll()
process.exit(0)
