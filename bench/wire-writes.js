/**
 * Write syscalls per call of the transport's messaging, counted with strace
 * on two OS processes (client and server) on 127.0.0.1. Not a timing
 * benchmark: it counts what each call costs the kernel, which a loaded
 * machine does not change.
 *
 *   node --import ./scripts/polyfill.js bench/wire-writes.js [--calls 2000]
 *
 * Modes (each in its own pair of processes; a run with 0 calls is
 * subtracted, so dialling and start-up do not count):
 * - `unary`: one request at a time
 * - `unary.16`: 16 concurrent callers
 * - `stream`: one streamed call at a time, 3 items then END (the shape of a
 *   task's status frames)
 *
 * Needs `strace` on PATH (Linux). Prints `<mode>: client <n> + server <n>
 * writes per call` per mode; `--json` prints the figures as JSON.
 */
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'

const PROTOCOL = '/ioa/bench-writes/1.0.0'
const SELF = fileURLToPath(import.meta.url)
const POLYFILL = fileURLToPath(new URL('../scripts/polyfill.js', import.meta.url))
const MODES = ['unary', 'unary.16', 'stream']

const { values } = parseArgs({
  options: {
    role: { type: 'string' },
    mode: { type: 'string', default: 'unary' },
    calls: { type: 'string', default: '2000' },
    address: { type: 'string' },
    json: { type: 'boolean', default: false }
  }
})

async function node () {
  const { createTransportNode } = await import('@ioa/transport')
  return createTransportNode({ transports: ['tcp'], listen: ['/ip4/127.0.0.1/tcp/0'] })
}

async function serve () {
  const server = await node()
  await server.services.messaging.handle(PROTOCOL, 'echo', (payload) => payload)
  await server.services.messaging.handleStream(PROTOCOL, 'items', async function * (payload) {
    yield payload
    yield payload
    yield payload
  })
  process.stdout.write(server.getMultiaddrs()[0].toString() + '\n')
  // the parent closes stdin when the client is done
  process.stdin.resume()
  await once(process.stdin, 'end')
  await server.stop()
}

async function client (address, mode, calls) {
  const { multiaddr } = await import('@multiformats/multiaddr')
  const c = await node()
  const messaging = c.services.messaging
  const conn = await c.dial(multiaddr(address))
  const peer = conn.remotePeer
  const payload = new Uint8Array(100).fill(7)
  // one call opens the stream in every run, the 0-call one included
  await messaging.request(peer, PROTOCOL, 'echo', payload)
  if (mode === 'unary') {
    for (let i = 0; i < calls; i++) await messaging.request(peer, PROTOCOL, 'echo', payload)
  } else if (mode === 'unary.16') {
    let next = 0
    await Promise.all(Array.from({ length: 16 }, async () => {
      while (next < calls) {
        next++
        await messaging.request(peer, PROTOCOL, 'echo', payload)
      }
    }))
  } else {
    for (let i = 0; i < calls; i++) {
      let n = 0
      for await (const _ of messaging.stream(peer, PROTOCOL, 'items', payload)) n++
      if (n !== 3) throw new Error(`stream ended after ${n} items`)
    }
  }
  await c.stop()
}

/**
 * Socket writes in an strace log: the write/writev calls on the fd that
 * carried the most bytes (the TCP socket; the others are eventfd wake-ups
 * and pipes)
 */
async function socketWrites (file) {
  const calls = new Map()
  const bytes = new Map()
  for (const line of (await readFile(file, 'utf8')).split('\n')) {
    const m = /\b(?:write|writev)\((\d+),.*= (\d+)$/.exec(line)
    if (m == null) continue
    calls.set(m[1], (calls.get(m[1]) ?? 0) + 1)
    bytes.set(m[1], (bytes.get(m[1]) ?? 0) + Number(m[2]))
  }
  let fd
  for (const [k, n] of bytes) {
    if (fd == null || n > bytes.get(fd)) fd = k
  }
  return fd == null ? 0 : calls.get(fd)
}

function traced (args, out) {
  return spawn('strace', ['-f', '-qq', '-e', 'trace=write,writev', '-o', out, process.execPath, '--import', POLYFILL, SELF, ...args], {
    stdio: ['pipe', 'pipe', 'inherit']
  })
}

async function run (mode, calls) {
  const tag = `${process.pid}-${mode}-${calls}`
  const serverLog = join(tmpdir(), `wire-writes-server-${tag}.txt`)
  const clientLog = join(tmpdir(), `wire-writes-client-${tag}.txt`)
  const server = traced(['--role', 'server'], serverLog)
  let text = ''
  for await (const chunk of server.stdout) {
    text += String(chunk)
    if (text.includes('\n')) break
  }
  const address = text.trim()
  const cl = traced(['--role', 'client', '--mode', mode, '--calls', String(calls), '--address', address], clientLog)
  const [code] = await once(cl, 'exit')
  server.stdin.end()
  await once(server, 'exit')
  if (code !== 0) throw new Error(`client of ${mode} exited with ${code}`)
  const result = { client: await socketWrites(clientLog), server: await socketWrites(serverLog) }
  if (process.env.IOA_BENCH_KEEP_LOGS == null) {
    await rm(serverLog, { force: true })
    await rm(clientLog, { force: true })
  } else {
    console.log(`strace logs: ${serverLog} ${clientLog}`)
  }
  return result
}

if (values.role === 'server') {
  await serve()
} else if (values.role === 'client') {
  await client(values.address, values.mode, Number(values.calls))
} else {
  const calls = Number(values.calls)
  const report = {}
  for (const mode of MODES) {
    const base = await run(mode, 0)
    const full = await run(mode, calls)
    const client = (full.client - base.client) / calls
    const server = (full.server - base.server) / calls
    report[mode] = { client, server, total: client + server }
    if (!values.json) {
      console.log(`${mode}: client ${client.toFixed(2)} + server ${server.toFixed(2)} = ${(client + server).toFixed(2)} socket writes per call`)
    }
  }
  if (values.json) console.log(JSON.stringify(report, null, 2))
}
