// One cold A2A client (bench/cold.js): a fresh process that imports the
// official @a2a-js/sdk client (through bench/a2a-caller.js), then fetches the
// agent card and sends its first message. Prints `{"import": ms,
// "firstResult": ms}`: the import, and the cold path from card fetch to the
// answer (the import excluded).
const t0 = performance.now()
const { a2aCaller } = await import('../a2a-caller.js')
const t1 = performance.now()
const url = process.argv[2]
const caller = await a2aCaller(url)
const text = await caller.send('cold-1', 'hello')
const t2 = performance.now()
if (text !== 'hello') throw new Error(`unexpected answer ${JSON.stringify(text).slice(0, 200)}`)
process.stdout.write(JSON.stringify({ import: t1 - t0, firstResult: t2 - t1 }) + '\n')
