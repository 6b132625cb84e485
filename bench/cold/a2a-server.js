// The A2A side of the cold-start benchmark (bench/cold.js): the echo agent of
// bench/a2a-agent.js (official @a2a-js/sdk server pieces on express), answering
// every message with its text. Started by the bench as its own process
// (bench/child.js); prints `{"url": ...}` on stdout once it listens, and exits
// on a `{"cmd":"stop"}` line or when its stdin closes.
import { createInterface } from 'node:readline'
import { startA2AAgent } from '../a2a-agent.js'

const agent = await startA2AAgent({ reply: 'message' })
process.stdout.write(JSON.stringify({ url: agent.url }) + '\n')
// every line is a stop: the server takes no other command
for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() !== '') break
}
await agent.close()
process.exit(0)
