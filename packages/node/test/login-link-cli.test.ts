/**
 * A new login link without a restart (spec/management.md 2.2, "A new login
 * link"), over real HTTP: once the link `ioa start` printed is used, `ioa
 * login --http <url> --key <operator key>` (a separate OS process) gets a
 * new one-time link from the running node, which logs a browser in once;
 * a key the operator did not grant is refused (NOT_OPERATOR, exit 1); a
 * request's token is used once (LOGIN_PROOF_USED); the operator's token
 * may ask too; a link is no Bearer credential.
 */
import { delegate } from '@ioa/collab'
import { encodeToken } from '@ioa/collab/wire'
import { createIdentity } from '@ioa/interconnect'
import { describe, expect, it } from 'vitest'
import { createIoaNode, initFromConfig, parseConfig } from '../src/index.js'
import { ioa, keyFile } from './fixtures/cli-process.js'
import { scratch } from './fixtures/scratch.js'

const { nodes, tempDir } = scratch('login-cli-')

/** Open a login URL as a browser would, without following the redirect */
async function open (url: string, cookie?: string): Promise<{ status: number, cookie?: string, code?: string }> {
  const res = await fetch(url, { redirect: 'manual', headers: cookie != null ? { cookie } : {} })
  const set = res.headers.get('set-cookie')?.split(';')[0]
  const body = res.status === 303 ? undefined : await res.json() as { error?: { code?: string } }
  return { status: res.status, ...(set != null ? { cookie: set } : {}), ...(body?.error?.code != null ? { code: body.error.code } : {}) }
}

describe('ioa login', () => {
  it('gets a new one-time login link from a running node, with the operator\'s key', async () => {
    const dir = await tempDir()
    const operator = await keyFile(dir, 'operator.key')
    await keyFile(dir, 'stranger.key')
    const node = await createIoaNode({ management: { http: '127.0.0.1:0', operator: operator.did } })
    nodes.push(node)
    const http = node.management?.http
    expect(http).toBeDefined()
    const url = http?.url as string

    // the printed link works once
    const first = await open(http?.loginUrl as string)
    expect(first.status).toBe(303)
    expect((await open(http?.loginUrl as string)).code).toBe('LOGIN_USED')

    // a new one, from the operator's key, while the node runs
    const run = await ioa(['login', '--http', url, '--key', 'operator.key', '--json'], dir)
    expect(run.code, run.stderr).toBe(0)
    const got = JSON.parse(run.stdout) as { login: string, expiresAt: number }
    expect(got.login).toMatch(new RegExp(`^${url}/login\\?token=[A-Za-z0-9_-]{43}$`))
    expect(got.login).not.toBe(http?.loginUrl)
    expect(got.expiresAt).toBeGreaterThan(Date.now())
    const browser = await open(got.login)
    expect(browser.status).toBe(303)
    expect(browser.cookie).toMatch(/^ioa_session=/)
    // the cookie is the operator's session: the API answers
    const api = await fetch(`${url}/api/v1/node`, { headers: { cookie: browser.cookie as string } })
    expect(api.status).toBe(200)
    // once only
    expect(await open(got.login)).toMatchObject({ status: 401, code: 'LOGIN_USED' })
    // a link is not the operator's Bearer credential
    const secret = new URL(got.login).searchParams.get('token') as string
    expect((await fetch(`${url}/api/v1/node`, { headers: { authorization: `Bearer ${secret}` } })).status).toBe(401)

    // a key the operator did not grant
    const refused = await ioa(['login', '--http', url, '--key', 'stranger.key', '--json'], dir)
    expect(refused.code).toBe(1)
    expect(refused.stdout + refused.stderr).toContain('NOT_OPERATOR')

    // a request's token is used once
    const about = await (await fetch(`${url}/api/v1/login-link`)).json() as { node: string, capability: string }
    expect(about).toMatchObject({ node: node.nodeIdentity.did, capability: 'ioa.manage.login' })
    const leaf = await delegate(operator, { audience: about.node, capabilities: [{ skill: 'ioa.manage.login' }], expiresAt: Date.now() + 60_000 })
    const body = JSON.stringify({ proofs: [Buffer.from(encodeToken(leaf)).toString('base64url')] })
    const post = async (init: RequestInit): Promise<{ status: number, body: any }> => {
      const res = await fetch(`${url}/api/v1/login-link`, { method: 'POST', ...init })
      return { status: res.status, body: await res.json() }
    }
    expect((await post({ body, headers: { 'content-type': 'application/json' } })).status).toBe(200)
    expect(await post({ body, headers: { 'content-type': 'application/json' } })).toMatchObject({ status: 401, body: { error: { code: 'LOGIN_PROOF_USED' } } })
    // a long-lived token is refused; a malformed body too
    const long = await delegate(operator, { audience: about.node, capabilities: [{ skill: 'ioa.manage.login' }], expiresAt: Date.now() + 3_600_000 })
    expect(await post({ body: JSON.stringify({ proofs: [Buffer.from(encodeToken(long)).toString('base64url')] }) })).toMatchObject({ status: 401, body: { error: { code: 'LOGIN_PROOF_TOO_LONG' } } })
    expect(await post({ body: '{"proofs": 1}' })).toMatchObject({ status: 400, body: { error: { code: 'BAD_REQUEST' } } })
    // the operator's token may ask as well
    const byToken = await post({ headers: { authorization: `Bearer ${http?.token as string}` } })
    expect(byToken.status).toBe(200)
    expect((await open(byToken.body.login)).status).toBe(303)
  }, 180_000)

  it('takes the login-link limits from the config file (management.http): a link\'s lifetime, a leaf\'s longest time to expiry', async () => {
    const operator = await createIdentity()
    const config = parseConfig({ management: { operator: operator.did, http: { listen: '127.0.0.1:0', loginLinkTtl: 45_000, maxLoginProofTtl: 20_000 } } })
    const node = await createIoaNode(initFromConfig(config))
    nodes.push(node)
    const http = node.management?.http
    const url = http?.url as string
    const post = async (body: string): Promise<{ status: number, body: any }> => {
      const res = await fetch(`${url}/api/v1/login-link`, { method: 'POST', body, headers: { 'content-type': 'application/json' } })
      return { status: res.status, body: await res.json() }
    }
    const proof = async (ttl: number): Promise<string> => {
      const leaf = await delegate(operator, { audience: node.nodeIdentity.did, capabilities: [{ skill: 'ioa.manage.login' }], expiresAt: Date.now() + ttl })
      return JSON.stringify({ proofs: [Buffer.from(encodeToken(leaf)).toString('base64url')] })
    }
    // a 60 s leaf is within the default 5 min, not within the config's 20 s
    expect(await post(await proof(60_000))).toMatchObject({ status: 401, body: { error: { code: 'LOGIN_PROOF_TOO_LONG' } } })
    const t0 = Date.now()
    const ok = await post(await proof(15_000))
    expect(ok.status).toBe(200)
    // the new link lives the config's 45 s, not the default 10 min
    expect(ok.body.expiresAt).toBeGreaterThanOrEqual(t0 + 45_000 - 1_000)
    expect(ok.body.expiresAt).toBeLessThanOrEqual(Date.now() + 45_000 + 1_000)
  }, 60_000)
})
