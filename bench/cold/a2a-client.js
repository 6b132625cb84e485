// One cold A2A client (bench/cold.js): a fresh process that imports the
// official @a2a-js/sdk client, then fetches the agent card and sends its
// first message. Prints `{"import": ms, "firstResult": ms}`: the import, and
// the cold path from card fetch to the answer (the import excluded).
const t0 = performance.now()
const { ClientFactory } = await import('@a2a-js/sdk/client')
const { Role } = await import('@a2a-js/sdk')
const t1 = performance.now()
const url = process.argv[2]
const client = await new ClientFactory().createFromUrl(url)
const answer = await client.sendMessage({
  tenant: '',
  message: {
    messageId: 'cold-1',
    contextId: '',
    taskId: '',
    role: Role.ROLE_USER,
    parts: [{ content: { $case: 'text', value: 'hello' }, metadata: undefined, filename: '', mediaType: 'text/plain' }],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: []
  },
  configuration: undefined,
  metadata: undefined
})
const t2 = performance.now()
const text = answer.parts?.[0]?.content?.value
if (text !== 'hello') throw new Error(`unexpected answer ${JSON.stringify(answer).slice(0, 200)}`)
process.stdout.write(JSON.stringify({ import: t1 - t0, firstResult: t2 - t1 }) + '\n')
