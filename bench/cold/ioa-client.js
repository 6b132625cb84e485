// One cold IoA client (bench/cold.js): a fresh process that imports
// @ioa/node, starts a node that joins the network through one bootstrap
// address, hosts its requesting agent, discovers an agent by capability and
// gets its first task result. Prints one JSON line: `import` (ms of the
// module import) and, from after the import, `started`, `discovered` and
// `firstResult` (ms since the import ended).
//
//   node --import ./scripts/polyfill.js bench/cold/ioa-client.js <bootstrap multiaddr> <capability>
const t0 = performance.now()
const { createIoaNode } = await import('@ioa/node')
const t1 = performance.now()
const [bootstrap, capability] = process.argv.slice(2)
const since = () => performance.now() - t1

const node = await createIoaNode({ bootstrap: [bootstrap], transport: { transports: ['tcp'] } })
let out
try {
  const me = await node.host({ key: 'cold-client', name: 'Cold client', skills: [{ id: 'bench.cold.client' }] })
  const started = since()
  const found = await node.discover({ capability }, { limit: 1, timeout: 30_000 })
  if (found.length === 0) throw new Error(`no agent serves ${capability}`)
  const discovered = since()
  const grant = await node.delegate(me, { audience: me.did, capabilities: [{ skill: capability }], expiresAt: Date.now() + 600_000 })
  const done = await node.tasks.submitAndWait(me.identity, found[0].card.id, { skill: capability, input: { text: 'hello' }, proofs: [grant] },
    { signal: AbortSignal.timeout(30_000) })
  if (done.result?.text !== 'hello') throw new Error(`unexpected result ${JSON.stringify(done.result)}`)
  out = { import: t1 - t0, started, discovered, firstResult: since() }
} finally {
  await node.stop()
}
process.stdout.write(JSON.stringify(out) + '\n')
