/**
 * `ioa revoke`: sign the revocation of a token and send it into the network
 * (`/ioa/revocation/1.1.0`) through the bootstrap peers, who pass it on.
 */
import { CLIENT_OPTIONS, bootstrapList, clientDataDir, timeoutOf } from '../args.js'
import { CliError, UsageError, asUsage } from '../errors.js'
import type { CommandSpec } from '../args.js'

export const revokeCommand: CommandSpec = {
  name: 'revoke',
  summary: 'revoke a delegation token and tell the network',
  usage: ['revoke --key <issuer key file> --token <token|@file> [--proof <token|@file>]... --bootstrap <multiaddr>... [--json]'],
  description: [
    'Signs a revocation of the token with the key, which must be that of the token\'s issuer or of the',
    'issuer of one of its proofs (give the chain with --proof), and publishes it to the bootstrap peers,',
    'which flood it on. Every chain that contains the token is refused from then on (REVOKED).',
    'Exit 1 with NOT_DELIVERED when no peer acknowledged it.'
  ].join('\n'),
  options: {
    key: { type: 'string', value: '<file>', description: 'the key file of the token\'s issuer (or of an issuer above it)' },
    token: { type: 'string', value: '<token|@file>', description: 'the token to revoke' },
    proof: { type: 'string', multiple: true, value: '<token|@file>', description: 'the token\'s proofs, when the key issued one of them (repeatable)' },
    ...CLIENT_OPTIONS
  },
  examples: ['ioa revoke --key alice.key --token @car.token --bootstrap /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW…'],
  async run (args, ctx) {
    const [{ createRevocation, revocationAuthorities, revocationCid, tokenCid }, { withClient }, { readKeyFile }, { readToken, readTokens }] =
      await Promise.all([import('@ioa/collab'), import('../client.js'), import('../keyfile.js'), import('../tokens.js')])
    const key = await readKeyFile(args.required('key'), ctx.cwd)
    const token = await readToken(args.required('token'), '--token', ctx.cwd)
    const proofs = await readTokens(args.strings('proof'), '--proof', ctx.cwd)
    const bootstrap = await bootstrapList(args, ctx)
    const cid = (await tokenCid(token)).toString()
    let authorities: Set<string> | undefined
    try {
      authorities = await revocationAuthorities(cid, [token, ...proofs])
    } catch (err) {
      asUsage(err, '--proof')
    }
    if (authorities == null || !authorities.has(key.identity.did)) {
      throw new UsageError(`--key: ${key.identity.did} issued neither the token nor one of the proofs given, so its revocation would have no effect${proofs.length === 0 ? ' (pass the chain with --proof)' : ''}`, '--key', 'NOT_AN_ISSUER')
    }
    const rev = await createRevocation(key.identity, token, { signal: ctx.signal })
    const revCid = (await revocationCid(rev)).toString()
    const out = ctx.out
    const result = await withClient({ bootstrap, dataDir: clientDataDir(args, ctx), timeout: timeoutOf(args), dht: false, signal: ctx.signal, out }, async ({ node }) => {
      out.progress(`publishing revocation ${revCid}…`)
      return node.revocations.publish(rev, { signal: ctx.signal })
    })
    const skipped = result.skipped > 0 ? ` (${result.skipped} speak only /ioa/revocation/1.0.0, which refuses a record with exp)` : ''
    if (result.delivered === 0) {
      throw new CliError('NOT_DELIVERED', `Revocation ${revCid} was sent to ${result.peers} peer(s) and none acknowledged it${skipped}`)
    }
    if (out.json) {
      out.emit({ revocation: revCid, token: cid, issuer: key.identity.did, peers: result.peers, delivered: result.delivered, skipped: result.skipped })
    } else {
      out.print(`revoked token ${cid}`)
      out.print(`revocation ${revCid}`)
      out.print(`sent to ${result.peers} peer${result.peers === 1 ? '' : 's'}, ${result.delivered} acknowledged${skipped}`)
    }
    return 0
  }
}
