import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { multiaddr } from '@multiformats/multiaddr'
import { afterEach, describe, expect, it } from 'vitest'
import { createTransportNode } from '../packages/transport/src/index.js'
import type { TransportNode } from '../packages/transport/src/index.js'
import type { ChildProcess } from 'node:child_process'

const FIXTURE = fileURLToPath(new URL('./fixtures/echo-node.js', import.meta.url))
const ROOT = fileURLToPath(new URL('..', import.meta.url))

let child: ChildProcess | undefined
let node: TransportNode | undefined

afterEach(async () => {
  await node?.stop()
  if (child != null && child.exitCode == null) {
    child.kill('SIGKILL')
  }
})

async function startChild (): Promise<{ proc: ChildProcess, info: { peerId: string, addrs: string[] } }> {
  // the fixture runs the built package (npm test builds before vitest)
  const proc = spawn(process.execPath, [FIXTURE], { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] })
  const lines = createInterface({ input: proc.stdout! })
  const [line] = await Promise.race([
    once(lines, 'line') as Promise<[string]>,
    once(proc, 'exit').then(([code]) => { throw new Error(`child exited early with ${String(code)}`) })
  ])
  return { proc, info: JSON.parse(line) }
}

describe('transport across OS processes', () => {
  it('talks to a node in a child process over TCP and stops it cleanly', async () => {
    const started = await startChild()
    child = started.proc
    node = await createTransportNode({ transports: ['tcp'] })
    const addr = multiaddr(started.info.addrs[0])
    expect(addr.toString()).toContain(started.info.peerId)

    const pid = await node.services.messaging.request<number>(addr, '/ioa/test/1.0.0', 'pid')
    expect(pid).toBe(child.pid)
    expect(pid).not.toBe(process.pid)
    expect(await node.services.messaging.request(addr, '/ioa/test/1.0.0', 'echo', { across: 'processes' })).toEqual({ across: 'processes' })

    const items: number[] = []
    for await (const i of node.services.messaging.stream<number>(addr, '/ioa/test/1.0.0', 'count', { n: 40 })) items.push(i)
    expect(items).toHaveLength(40)

    const exited = once(child, 'exit')
    child.kill('SIGTERM')
    const [code] = await exited
    expect(code).toBe(0)

    // the peer is gone: a new request fails with a typed error, not a hang
    const err = await node.services.messaging.request(addr, '/ioa/test/1.0.0', 'echo', 1, { timeout: 3_000 }).then(() => undefined, (e: Error) => e)
    expect(err?.name).toBe('DialFailedError')
  })
})
