// One cold A2A client (bench/cold.js): a fresh process that imports the
// official @a2a-js/sdk client (through bench/a2a-caller.js), then fetches the
// agent card and sends its first message. Prints `{"import": ms,
// "firstResult": ms}`: the import, and the cold path from card fetch to the
// answer (the import excluded); with the CPU times and module counts of the
// same spans, as bench/cold/ioa-client.js reports them.
const { cpuMs, modulesLoaded } = await import('./marks.js')
const m0 = modulesLoaded()
const c0 = cpuMs()
const t0 = performance.now()
const { a2aCaller } = await import('../a2a-caller.js')
const t1 = performance.now()
const c1 = cpuMs()
const m1 = modulesLoaded()
const url = process.argv[2]
const caller = await a2aCaller(url)
const text = await caller.send('cold-1', 'hello')
const t2 = performance.now()
const c2 = cpuMs()
const m2 = modulesLoaded()
if (text !== 'hello') throw new Error(`unexpected answer ${JSON.stringify(text).slice(0, 200)}`)
process.stdout.write(JSON.stringify({
  import: t1 - t0,
  firstResult: t2 - t1,
  cpuImport: c1 - c0,
  cpuFirstResult: c2 - c1,
  ...(m0 != null ? { modulesImport: m1 - m0, modulesFirstResult: m2 - m1 } : {})
}) + '\n')
