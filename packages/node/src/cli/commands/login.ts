/**
 * `ioa login --http <url> --key <operator key file>`: a new one-time login
 * link of a running node's management HTTP server, without restarting it
 * (spec/management.md 2.2, "A new login link"). The key is the operator's
 * (the node's `management.operator`), or a key the operator granted
 * `ioa.manage.login` (or `ioa.manage.*`) to, with that grant in --proof: the
 * command signs a short-lived token from the key to the node and the server
 * answers a new link. Exit status: docs/cli.md.
 */
import { UsageError, CliError } from '../errors.js'
import type { CommandSpec } from '../args.js'

/** Lifetime of the token sent: the server takes one at most 5 min from expiry and each once */
const LEAF_TTL = 60_000

export const loginCommand: CommandSpec = {
  name: 'login',
  summary: 'print a new one-time login link of a running node\'s management HTTP server',
  usage: ['login --http <url> --key <key file> [--proof <token|@file>]... [--json]'],
  description: [
    'Asks the management HTTP server at --http (the URL `ioa start` printed, e.g. http://127.0.0.1:9464)',
    'for a new one-time login link, as the key of --key: the operator\'s key (the node\'s',
    'management.operator), or a key the operator granted ioa.manage.login (or ioa.manage.*) to, with that',
    'grant in --proof. The link logs a browser in once, within 10 minutes; the node keeps running and',
    'links given before stay as they were. Prints the link (with --json: {"login","expiresAt"}).',
    'Exit 0 with a link, 1 when the server refused (its code is printed), 2 for bad usage.'
  ].join('\n'),
  options: {
    http: { type: 'string', value: '<url>', description: 'the node\'s management HTTP server, http://host:port' },
    key: { type: 'string', value: '<file>', description: 'the operator\'s key file, or one with the operator\'s grant (--proof)' },
    proof: { type: 'string', multiple: true, value: '<token|@file>', description: 'the operator\'s grant of ioa.manage.login to --key, and its proofs (repeatable)' }
  },
  examples: [
    'ioa login --http http://127.0.0.1:9464 --key operator.key',
    'ioa login --http http://127.0.0.1:9464 --key ops.key --proof @ops.grant --json'
  ],
  async run (args, ctx) {
    const [{ readKeyFile }, { readTokens, tokenToString }, { delegate }] = await Promise.all([
      import('../keyfile.js'), import('../tokens.js'), import('@ioa/collab')
    ])
    const text = args.required('http')
    let base: URL
    try {
      base = new URL(text)
    } catch {
      throw new UsageError(`--http: not a URL: ${text.slice(0, 200)}`, '--http')
    }
    if (base.protocol !== 'http:' && base.protocol !== 'https:') throw new UsageError('--http: the URL must be http: or https:', '--http')
    const key = await readKeyFile(args.required('key'), ctx.cwd)
    const proofs = await readTokens(args.strings('proof'), '--proof', ctx.cwd)
    if (proofs.length > 0 && proofs[0].payload.aud !== key.identity.did) {
      throw new UsageError(`--proof: the first token must be addressed to the key of --key (${key.identity.did})`, '--proof', 'PRINCIPAL_MISMATCH')
    }
    const endpoint = new URL('/api/v1/login-link', base)
    const call = async (init?: RequestInit): Promise<any> => {
      let res: Response
      try {
        res = await fetch(endpoint, { ...init, signal: ctx.signal })
      } catch (err: any) {
        throw new CliError('UNREACHABLE', `${endpoint.origin}: ${String(err?.cause?.code ?? err?.message ?? err)}`, { cause: err })
      }
      const body = await res.json().catch(() => undefined) as any
      if (!res.ok) {
        const code = typeof body?.error?.code === 'string' ? body.error.code : `HTTP_${res.status}`
        throw new CliError(code, `${endpoint.origin} refused: ${String(body?.error?.message ?? res.statusText)}`)
      }
      return body
    }
    // what to address the token to: the node's did
    const about = await call()
    if (typeof about?.node !== 'string') throw new CliError('BAD_ANSWER', `${endpoint.origin} did not name its node`)
    const leaf = await delegate(key.identity, {
      audience: about.node,
      capabilities: [{ skill: typeof about.capability === 'string' ? about.capability : 'ioa.manage.login' }],
      expiresAt: Date.now() + LEAF_TTL,
      proofs: proofs.slice(0, 1)
    })
    const link = await call({
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ proofs: [leaf, ...proofs].map(t => tokenToString(t)) })
    })
    if (typeof link?.login !== 'string') throw new CliError('BAD_ANSWER', `${endpoint.origin} answered no link`)
    if (ctx.out.json) ctx.out.emit({ login: link.login, expiresAt: link.expiresAt })
    else ctx.out.print(link.login)
    return 0
  }
}
