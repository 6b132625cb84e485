// One cold IoA client (bench/cold.js): a fresh process that imports
// @ioa/node, starts a node that joins the network through one bootstrap
// address, discovers an agent by capability and gets its first task result,
// as an identity of its own that it does not publish (a client, as the A2A
// client is: hosting an agent would announce it in the DHT, work a
// requester does not need). Prints one JSON line: `import` (ms of the
// module import) and, from after the import, `started`, `joined` (the
// first connection to a peer is open), `discovered` and `firstResult` (ms
// since the import ended), `cpuImport` and `cpuFirstResult` (ms of CPU time
// of the process in the import and from its end to the result) and, when
// run with bench/cold/count-modules.js, `modulesImport` and
// `modulesFirstResult` (modules loaded by the import, and after it until
// the result).
//
//   node --import ./scripts/polyfill.js bench/cold/ioa-client.js <bootstrap multiaddr> <capability> [all|first]
//
// `all` (the default) discovers with `node.discover()`: every agent found by
// the complete DHT walk, best first. `first` takes the first verified agent
// from the streaming `node.interconnect.discover(query, { limit: 1 })`,
// which ends the walk there.
const { cpuMs, modulesLoaded } = await import('./marks.js')
const m0 = modulesLoaded()
const c0 = cpuMs()
const t0 = performance.now()
const { createIoaNode } = await import('@ioa/node')
const t1 = performance.now()
const c1 = cpuMs()
const m1 = modulesLoaded()
// already loaded by @ioa/node: no import time of their own
const { createIdentity } = await import('@ioa/interconnect')
const { delegate } = await import('@ioa/collab')
const [bootstrap, capability, mode = 'all'] = process.argv.slice(2)
const since = () => performance.now() - t1

let joined
const node = await createIoaNode({ bootstrap: [bootstrap], transport: { transports: ['tcp'] } })
const onConnect = () => { joined ??= since() }
if (node.transport.getConnections().length > 0) onConnect()
node.transport.addEventListener('connection:open', onConnect, { once: true })
let out
try {
  const me = await createIdentity()
  const started = since()
  const found = []
  if (mode === 'first') {
    for await (const r of node.interconnect.discover({ capability }, { limit: 1, timeout: 30_000 })) found.push(r)
  } else {
    found.push(...await node.discover({ capability }, { limit: 1, timeout: 30_000 }))
  }
  if (found.length === 0) throw new Error(`no agent serves ${capability}`)
  const discovered = since()
  const user = await createIdentity()
  const grant = await delegate(user, { audience: me.did, capabilities: [{ skill: capability }], expiresAt: Date.now() + 600_000 })
  const done = await node.tasks.submitAndWait(me, found[0].card.id, { skill: capability, input: { text: 'hello' }, proofs: [grant] },
    { signal: AbortSignal.timeout(30_000) })
  if (done.result?.text !== 'hello') throw new Error(`unexpected result ${JSON.stringify(done.result)}`)
  const firstResult = since()
  const c2 = cpuMs()
  const m2 = modulesLoaded()
  out = {
    import: t1 - t0,
    started,
    joined: joined ?? discovered,
    discovered,
    firstResult,
    cpuImport: c1 - c0,
    cpuFirstResult: c2 - c1,
    ...(m0 != null ? { modulesImport: m1 - m0, modulesFirstResult: m2 - m1 } : {})
  }
} finally {
  await node.stop()
}
process.stdout.write(JSON.stringify(out) + '\n')
