/**
 * The paths of the `task` benchmark group (bench/task.js), each run between
 * a server and a client process by bench/cross-process.js. Every call sends
 * about 100 bytes made from its number and checks that the answer is the
 * same bytes (or the same value), so a path that answered something else
 * fails the run instead of measuring it.
 *
 * - `net`: a `node:net` socket, varint length-prefixed frames
 * - `libp2p-lp`, `libp2p-events`: one long-lived libp2p stream (TCP, Noise,
 *   Yamux) framed with `lpStream`, or read through its 'message' events and
 *   written with `send` (bench/echo-wire.js)
 * - `messaging`: an @ioa/transport messaging request to an echo handler
 * - `task`: `IoaNode.submit` of a task in session mode (spec/collab-tasks.md
 *   2.6: no signature per request, the requester agent's binding made once
 *   on the connection) and a delegation user → requester, to an agent hosted
 *   with an echo handler, until the stream ends with `completed`
 * - `task-envelope`: the same with a signed envelope per request
 * - `a2a`: blocking SendMessage of the official @a2a-js/sdk client to its
 *   server pieces on express; the executor publishes one completed Task
 */
import { createTransportNode } from '@ioa/transport'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { multiaddr } from '@multiformats/multiaddr'
import { ECHO_PROTOCOL, eventsEchoClient, lpEchoClient, netEchoClient, serveEventsEcho, serveLpEcho, startNetEchoServer } from './echo-wire.js'

/** Bytes of every call's payload */
const PAYLOAD_BYTES = 100
const LISTEN = ['/ip4/127.0.0.1/tcp/0']
const TRANSPORT = { transports: ['tcp'], listen: LISTEN }
const MESSAGING_PROTOCOL = '/ioa/bench-task/1.0.0'
const SKILL = 'bench.echo'
/** Longest call, dial or set-up step, ms */
const CALL_TIMEOUT = 30_000

/** Payload of call `n`: PAYLOAD_BYTES bytes, the first four `n`, the rest a pattern of `n` */
function bytesOf (n) {
  const b = new Uint8Array(PAYLOAD_BYTES)
  new DataView(b.buffer).setUint32(0, n)
  for (let i = 4; i < b.length; i++) b[i] = (n + i) & 0xff
  return b
}

function checkBytes (n, answer) {
  const got = answer instanceof Uint8Array ? answer : answer?.subarray?.()
  const want = bytesOf(n)
  if (got?.byteLength !== want.byteLength || !Buffer.from(got.buffer, got.byteOffset, got.byteLength).equals(want)) {
    throw new Error(`call ${n}: the echo returned other bytes (${got?.byteLength} bytes)`)
  }
}

/** Text of call `n`: PAYLOAD_BYTES characters */
function textOf (n) {
  const head = `${n}:`
  return head + 'x'.repeat(PAYLOAD_BYTES - head.length)
}

/** A client of an ordered byte echo (`{ call(payload), close() }`) as a path's connected end */
function bytesClient (echo, close = echo.close) {
  return {
    call: async (n) => { checkBytes(n, await echo.call(bytesOf(n))) },
    close
  }
}

async function until (fn, what) {
  const end = Date.now() + CALL_TIMEOUT
  while (true) {
    if (await fn()) return
    if (Date.now() > end) throw new Error(`${what}: not within ${CALL_TIMEOUT} ms`)
    await new Promise(resolve => setTimeout(resolve, 100))
  }
}

/** A libp2p echo path: the server handles ECHO_PROTOCOL with `serve(stream)`, the client wraps its stream with `wrap` */
function libp2pPath (serve, wrap) {
  return {
    async serve () {
      const node = await createTransportNode(TRANSPORT)
      await node.handle(ECHO_PROTOCOL, (stream) => { serve(stream) })
      return { address: node.getMultiaddrs()[0].toString(), close: () => node.stop() }
    },
    async connect (address) {
      const node = await createTransportNode(TRANSPORT)
      const stream = await node.dialProtocol(multiaddr(address), ECHO_PROTOCOL, { signal: AbortSignal.timeout(CALL_TIMEOUT) })
      const echo = wrap(stream)
      return bytesClient(echo, async () => {
        await echo.close()
        await node.stop()
      })
    }
  }
}

/**
 * The `task` path (`auth`: 'session') or `task-envelope` path ('envelope')
 * with the stack `load()` gives (`createIoaNode`, `createIdentity`,
 * `delegate`): this checkout's, or IOA_BENCH_BEFORE's (which may not know
 * `auth`). With `v1Only` the executor serves `/ioa/task/1.0.0` only (the
 * requester falls back to it): the wire of version 1 with this checkout's code.
 */
export function taskEnvelopePath (load, { v1Only = false, auth = 'envelope' } = {}) {
  return {
    async serve () {
      const { createIoaNode } = await load()
      const node = await createIoaNode({ listen: LISTEN, transport: { transports: ['tcp'] } })
      const agent = await node.host({ key: 'bench-task', name: 'Bench task echo', skills: [{ id: SKILL }], handlers: { [SKILL]: (input) => input } })
      if (v1Only) await node.transport.services.messaging.unhandle('/ioa/task/2.0.0')
      // its card reaches the DHT once the client's node has joined (a
      // network of one has nobody to store it): the client waits to resolve it
      return { address: { addr: node.addresses()[0], agent: agent.did }, close: () => node.stop() }
    },
    async connect ({ addr, agent }) {
      const { createIoaNode, createIdentity, delegate } = await load()
      const node = await createIoaNode({ listen: LISTEN, transport: { transports: ['tcp'] }, bootstrap: [addr] })
      const requester = await node.host({ key: 'bench-requester', name: 'Bench requester', skills: [{ id: 'bench.requester' }] })
      const user = await createIdentity()
      const grant = await delegate(user, { audience: requester.did, capabilities: [{ skill: 'bench.*' }], expiresAt: Date.now() + 3_600_000 })
      await until(() => node.interconnect.resolve(agent, { cache: false, timeout: 3_000 }).then(() => true, () => false), `resolving ${agent}`)
      return {
        async call (n) {
          const input = { n, text: textOf(n) }
          let last
          for await (const event of node.submit(requester, agent, { skill: SKILL, input, proofs: [grant] }, { signal: AbortSignal.timeout(CALL_TIMEOUT), auth })) {
            if (event.type === 'status' || event.type === 'artifact') last = event.task
          }
          if (last?.state !== 'completed' || last.result?.n !== n || last.result?.text !== input.text) {
            throw new Error(`task ${n}: ended ${last?.state} with ${JSON.stringify(last?.result ?? last?.error)?.slice(0, 200)}`)
          }
        },
        close: () => node.stop()
      }
    }
  }
}

/** This checkout's stack */
const loadHere = async () => ({
  ...await import('@ioa/node'),
  ...await import('@ioa/interconnect'),
  ...await import('@ioa/collab')
})

export const paths = {
  net: {
    async serve () {
      const server = await startNetEchoServer()
      return { address: server.port, close: server.close }
    },
    async connect (port) {
      return bytesClient(await netEchoClient(port))
    }
  },

  'libp2p-lp': libp2pPath(serveLpEcho, lpEchoClient),

  'libp2p-events': libp2pPath(serveEventsEcho, eventsEchoClient),

  messaging: {
    async serve () {
      const node = await createTransportNode(TRANSPORT)
      await node.services.messaging.handle(MESSAGING_PROTOCOL, 'echo', (payload) => payload)
      return { address: node.getMultiaddrs()[0].toString(), close: () => node.stop() }
    },
    async connect (address) {
      const node = await createTransportNode(TRANSPORT)
      const conn = await node.dial(multiaddr(address), { signal: AbortSignal.timeout(CALL_TIMEOUT) })
      const messaging = node.services.messaging
      return {
        call: async (n) => {
          checkBytes(n, await messaging.request(conn.remotePeer, MESSAGING_PROTOCOL, 'echo', bytesOf(n), { timeout: CALL_TIMEOUT }))
        },
        close: () => node.stop()
      }
    }
  },

  task: taskEnvelopePath(loadHere, { auth: 'session' }),

  'task-envelope': taskEnvelopePath(loadHere),

  // the same, on the wire of /ioa/task/1.0.0 (every state streamed, full snapshots, END read in the background)
  'task-v1': taskEnvelopePath(loadHere, { v1Only: true }),

  a2a: {
    async serve () {
      const { startA2AAgent } = await import('./a2a-agent.js')
      const agent = await startA2AAgent({ reply: 'task' })
      return { address: agent.url, close: agent.close }
    },
    async connect (url) {
      const { a2aCaller } = await import('./a2a-caller.js')
      const caller = await a2aCaller(url)
      return {
        async call (n) {
          const text = await caller.send(`bench-${n}`, textOf(n))
          if (text !== textOf(n)) throw new Error(`message ${n}: the agent answered ${JSON.stringify(text).slice(0, 200)}`)
        },
        close: async () => {}
      }
    }
  }
}

// IOA_BENCH_BEFORE=<dir>: a built checkout of another version of the stack;
// `task-envelope-before` and `task-before` (session mode) are the same paths
// with that checkout's packages on both ends (its own node, task service and
// wire), for before/after in one run
const BEFORE = process.env.IOA_BENCH_BEFORE
if (BEFORE != null && BEFORE !== '') {
  const load = (pkg) => import(pathToFileURL(join(BEFORE, 'packages', pkg, 'dist', 'src', 'index.js')).href)
  const loadBefore = async () => ({
    ...await load('node'),
    ...await load('interconnect'),
    ...await load('collab')
  })
  paths['task-envelope-before'] = taskEnvelopePath(loadBefore)
  paths['task-before'] = taskEnvelopePath(loadBefore, { auth: 'session' })
}
