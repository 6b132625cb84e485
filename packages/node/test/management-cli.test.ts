/**
 * `ioa start --http` as a separate OS process (spec/management.md 2,
 * docs/cli.md): the ready line names the management server's URL and the
 * login URL; `/metrics` answers from another process; the login URL gives a
 * session cookie that opens the API; a bad `--http` exits 2 naming the flag,
 * a port already taken exits 2 naming `management.http`.
 */
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { createServer } from 'node:net'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { until } from '../../../test/util.js'
import type { ChildProcess } from 'node:child_process'
import type { AddressInfo } from 'node:net'

const BIN = fileURLToPath(new URL('../bin/ioa.js', import.meta.url))

let dir: string
const children: ChildProcess[] = []

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'ioa-management-cli-'))
})

afterAll(async () => {
  for (const c of children) {
    if (c.exitCode == null) {
      c.kill('SIGINT')
      await once(c, 'exit')
    }
  }
  await rm(dir, { recursive: true, force: true })
})

/** Start `ioa start --json …`; resolves to its ready line and stdout lines */
async function start (args: string[]): Promise<{ child: ChildProcess, ready: any, stderr: () => string }> {
  const child = spawn(process.execPath, [BIN, 'start', '--json', ...args], { cwd: dir, env: { ...process.env, IOA_HOME: dir }, stdio: ['ignore', 'pipe', 'pipe'] })
  children.push(child)
  let stderr = ''
  child.stderr!.setEncoding('utf8').on('data', (c: string) => { stderr += c })
  const lines: any[] = []
  createInterface({ input: child.stdout! }).on('line', line => { lines.push(JSON.parse(line)) })
  const ready = await until(() => lines[0], { timeout: 30_000, what: `the ready line (stderr: ${stderr})` })
  return { child, ready, stderr: () => stderr }
}

describe('ioa start --http', () => {
  it('the ready line names the HTTP URL and the login URL; /metrics answers; the login URL opens the API', async () => {
    await writeFile(join(dir, 'node.json'), JSON.stringify({ domain: 'metrics.example', agents: [{ key: 'idle', name: 'Idle', skills: [{ id: 'demo.idle' }] }] }))
    const { ready } = await start(['--config', 'node.json', '--http', '127.0.0.1:0'])
    expect(ready.type).toBe('ready')
    expect(ready.http).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/)
    expect(ready.login).toMatch(new RegExp(`^${ready.http.replace(/\./g, '\\.')}/login\\?token=[A-Za-z0-9_-]{43}$`))

    const metrics = await fetch(`${ready.http}/metrics`)
    expect(metrics.status).toBe(200)
    const text = await metrics.text()
    expect(text).toMatch(/^libp2p_connection_manager_connections\{/m)
    expect(text).toMatch(/^# TYPE ioa_tasks_served_total counter$/m)

    const api = `${ready.http}/api/v1/node`
    expect((await fetch(api)).status).toBe(401)
    const login = await fetch(ready.login, { redirect: 'manual' })
    expect(login.status).toBe(303)
    const cookie = login.headers.get('set-cookie')!.split(';')[0]
    const status = await fetch(api, { headers: { cookie } })
    expect(status.status).toBe(200)
    expect(await status.json()).toMatchObject({ peerId: ready.peerId, domain: 'metrics.example', agents: [{ did: ready.agents[0].did, skills: ['demo.idle'] }] })
    const token = new URL(ready.login).searchParams.get('token')!
    expect((await fetch(api, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200)
  }, 60_000)

  it('a node without --http or management has null for both', async () => {
    const { ready } = await start([])
    expect(ready.http).toBeNull()
    expect(ready.login).toBeNull()
  }, 60_000)

  it('a bad --http exits 2 naming the flag; a port already taken exits 2 naming management.http', async () => {
    const failing = async (http: string): Promise<{ code: number, error: any }> => {
      const child = spawn(process.execPath, [BIN, 'start', '--json', '--http', http], { cwd: dir, env: { ...process.env, IOA_HOME: dir }, stdio: ['ignore', 'pipe', 'pipe'] })
      let stderr = ''
      child.stderr.setEncoding('utf8').on('data', (c: string) => { stderr += c })
      const [code] = await once(child, 'exit') as [number]
      return { code, error: JSON.parse(stderr.trim().split('\n').at(-1)!).error }
    }
    const bad = await failing('example.com:80')
    expect(bad.code).toBe(2)
    expect(bad.error).toMatchObject({ code: 'USAGE', field: '--http', message: expect.stringContaining('host:port') })
    const taken = createServer()
    await new Promise<void>(resolve => { taken.listen(0, '127.0.0.1', resolve) })
    try {
      const busy = await failing(`127.0.0.1:${(taken.address() as AddressInfo).port}`)
      expect(busy.code).toBe(2)
      expect(busy.error).toMatchObject({ code: 'INVALID_CONFIG', field: 'management.http', message: expect.stringContaining('EADDRINUSE') })
    } finally {
      taken.close()
    }
  }, 60_000)

  it('management.http as an object: --http sets its address and its limits stay (431 past maxHeaderBytes, 400 past the dashboard\'s maxBatch); the login URL works once', async () => {
    await writeFile(join(dir, 'limits.json'), JSON.stringify({ management: { http: { listen: '127.0.0.1:9', maxHeaderBytes: 1024, dashboard: { maxBatch: 5 } } } }))
    const { ready } = await start(['--config', 'limits.json', '--http', '127.0.0.1:0'])
    expect(ready.http).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/)
    expect(ready.http).not.toBe('http://127.0.0.1:9')
    const token = new URL(ready.login).searchParams.get('token')!
    const auth = { authorization: `Bearer ${token}` }
    expect((await fetch(`${ready.http}/metrics`, { headers: { 'x-pad': 'a'.repeat(512) } })).status).toBe(200)
    expect((await fetch(`${ready.http}/metrics`, { headers: { 'x-pad': 'a'.repeat(2048) } })).status).toBe(431)
    expect((await fetch(`${ready.http}/api/v1/timeline?limit=5`, { headers: auth })).status).toBe(200)
    const over = await fetch(`${ready.http}/api/v1/timeline?limit=6`, { headers: auth })
    expect(over.status).toBe(400)
    expect((await over.json()).error.code).toBe('BAD_QUERY')
    // the login URL the ready line names logs in once
    expect((await fetch(ready.login, { redirect: 'manual' })).status).toBe(303)
    const again = await fetch(ready.login, { redirect: 'manual' })
    expect(again.status).toBe(401)
    expect((await again.json()).error.code).toBe('LOGIN_USED')
  }, 60_000)

  it('a management agent\'s grant that cannot work (addressed to another key) exits 2 naming management.proofsFile', async () => {
    const [{ delegate }, { encodeToken }, { createIdentity }] = await Promise.all([import('@ioa/collab'), import('@ioa/collab/wire'), import('@ioa/interconnect')])
    const operator = await createIdentity()
    const other = await createIdentity()
    const grant = await delegate(operator, { audience: other.did, capabilities: [{ skill: 'ioa.manage.*' }], expiresAt: Date.now() + 3_600_000 })
    await writeFile(join(dir, 'agent.grant'), Buffer.from(encodeToken(grant)).toString('base64url') + '\n')
    await writeFile(join(dir, 'agent.json'), JSON.stringify({ management: { role: 'agent', operator: operator.did, proofsFile: 'agent.grant' } }))
    const child = spawn(process.execPath, [BIN, 'start', '--json', '--config', 'agent.json'], { cwd: dir, env: { ...process.env, IOA_HOME: dir }, stdio: ['ignore', 'pipe', 'pipe'] })
    let stderr = ''
    child.stderr.setEncoding('utf8').on('data', (c: string) => { stderr += c })
    const [code] = await once(child, 'exit') as [number]
    expect(code, stderr).toBe(2)
    const error = JSON.parse(stderr.trim().split('\n').at(-1)!).error
    expect(error).toMatchObject({ code: 'INVALID_CONFIG', field: 'management.proofsFile', message: expect.stringContaining(other.did) })
  }, 60_000)
})
