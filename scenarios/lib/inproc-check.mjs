// temporary debugging aid: run a scenario with every node in this process
import { join } from 'node:path'
import { createIoaNode, loadConfig, startFromConfig } from '@ioa/node'
import { readKeyFile, SCENARIOS_DIR } from './runner.js'
const name = process.argv[2] ?? 'car'
const def = (await import(join(SCENARIOS_DIR, name, 'scenario.js'))).default
const t0 = Date.now()
const seed = await createIoaNode({})
const seedAddr = seed.addresses()[0]
const nodes = new Map()
for (const n of def.nodes) {
  const config = await loadConfig(join(SCENARIOS_DIR, n.config))
  const events = []
  config.bootstrap = n.bootstrapFromGateway ? [nodes.get(n.bootstrapFromGateway).node.gateway.addresses()[0]] : [seedAddr]
  if (n.bootstrapFromGateway) { const g = nodes.get(n.bootstrapFromGateway).node; config.behindGateways = [{ outer: g.transport.peerId.toString(), inner: g.gateway.inner.peerId.toString() }] }
  const s = await startFromConfig(config, { onEvent: e => { events.push(e); console.log(`+${((e.at - t0) / 1000).toFixed(2)}s ${n.name}/${e.source} ${e.data.text ?? e.event}`) } })
  nodes.set(n.name, { ...s, events, name: n.name })
}
if (nodes.has('riviera-gateway')) {
  const g = nodes.get('riviera-gateway').node.gateway
  for (let i = 0; i < 20; i++) { console.log('gw', g.gateway.exported().length, JSON.stringify(g.gateway.stats()), g.inner.node.getPeers().length); if (g.gateway.exported().length > 0) break; await new Promise(r => setTimeout(r, 500)) }
}
const driver = await createIoaNode({ bootstrap: [seedAddr], domain: 'people.example' })
const ctx = {
  node: nm => { const s = nodes.get(nm); return { ready: { peerId: s.node.transport.peerId.toString(), agents: s.agents.map(a => ({ key: a.config.key, did: a.agent.did })) }, did: k => s.agents.find(a => a.config.key === k).agent.did, events: s.events, kill: () => {}, waitForEvent: () => new Promise(() => {}) } },
  driver: { node: driver, identity: def.userKey ? await readKeyFile(join(SCENARIOS_DIR, def.userKey)) : undefined },
  timeline: (w, t) => console.log(`+${((Date.now() - t0) / 1000).toFixed(2)}s ${w} ${t}`),
  signal: AbortSignal.timeout(40000)
}
const out = await def.run(ctx)
console.log(JSON.stringify(out.checks, null, 1))
await driver.stop()
for (const s of nodes.values()) await s.stop()
await seed.stop()
process.exit(0)
