/**
 * `ioa doctor --node <multiaddr> --key <operator key file>`: checks a running
 * node and its network from a fresh peer whose key is the caller's (the
 * operator's, or a key with the operator's grant in --proof), through the
 * management protocol (spec/management.md) and the network itself; prints
 * each finding with its severity and what to do. Exit status: docs/cli.md.
 */
import { CLIENT_OPTIONS, parseDuration, parseMultiaddr, timeoutOf } from '../args.js'
import { UsageError, asUsage } from '../errors.js'
import type { CommandSpec } from '../args.js'
import type { DoctorReport, Severity } from '@ioa/management'

/** Exit status of a report: healthy, errors found, warnings only */
export const DOCTOR_EXIT = Object.freeze({ ok: 0, error: 1, warn: 3 })

const LABEL: Record<Severity, string> = { ok: 'ok   ', info: 'info ', warn: 'warn ', error: 'error' }

export const doctorCommand: CommandSpec = {
  name: 'doctor',
  summary: 'check a running node and its network, and say what to do about each finding',
  usage: ['doctor --node <multiaddr> --key <key file> [--proof <token|@file>]... [--token <token|@file>]... [--require <capability>]... [--warn-expiry <duration>] [--timeout <duration>] [--json]'],
  description: [
    'Starts a fresh peer with the key of --key (the operator\'s key, or a key the operator granted',
    'ioa.manage.* to: pass that grant with --proof), joins the network through --node and checks: the',
    'node\'s signed snapshot (management protocol), each of its addresses on a new connection, clock',
    'skew against this machine, its DHT routing table, that its agents\' capabilities and its gateway\'s',
    'exports can be found from outside, that every --require capability has a provider, and that the',
    '--proof and --token tokens do not expire within --warn-expiry (default 7d).',
    'Prints one line per finding (severity, check, what) and, below it, what to do.',
    'Exit 0 when nothing is worse than info, 3 when the worst finding is a warning, 1 when one is an',
    'error (or the node cannot be checked), 2 for bad usage. With --json: one JSON document',
    '{"peer","node","worst","findings":[{"check","severity","message","fix?","subject?"}],"snapshot?"}.'
  ].join('\n'),
  options: {
    node: { type: 'string', value: '<multiaddr>', description: 'the node to check, with /p2p/<peer id>' },
    key: { type: 'string', value: '<file>', description: 'the caller\'s key file: the operator\'s, or one with the operator\'s grant (--proof)' },
    proof: { type: 'string', multiple: true, value: '<token|@file>', description: 'the operator\'s grant of ioa.manage.* to --key, and its proofs (repeatable)' },
    token: { type: 'string', multiple: true, value: '<token|@file>', description: 'another token whose expiry to check (repeatable)' },
    require: { type: 'string', multiple: true, value: '<capability>', description: 'a capability that must have a provider in the network (repeatable)' },
    'warn-expiry': { type: 'string', value: '<duration>', description: 'warn about tokens expiring sooner than this (default 7d)' },
    timeout: CLIENT_OPTIONS.timeout
  },
  examples: [
    'ioa doctor --node /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW… --key operator.key',
    'ioa doctor --node /ip4/10.0.0.5/tcp/4001/p2p/12D3KooW… --key ops.key --proof @ops.grant --require travel.hotel.booking --json'
  ],
  async run (args, ctx) {
    const [{ readKeyFile }, { readTokens }, { assertCapability }] = await Promise.all([
      import('../keyfile.js'), import('../tokens.js'), import('@ioa/interconnect')
    ])
    const target = await parseMultiaddr(args.required('node'), '--node', true)
    const key = await readKeyFile(args.required('key'), ctx.cwd)
    const proofs = await readTokens(args.strings('proof'), '--proof', ctx.cwd)
    if (proofs.length > 0 && proofs[0].payload.aud !== key.identity.did) {
      throw new UsageError(`--proof: the first token must be addressed to the key of --key (${key.identity.did})`, '--proof', 'PRINCIPAL_MISMATCH')
    }
    const tokens = await readTokens(args.strings('token'), '--token', ctx.cwd)
    const require = args.strings('require')
    for (const c of require) {
      try {
        (assertCapability as (name: string) => void)(c)
      } catch (err) {
        asUsage(err, '--require')
      }
    }
    const warnText = args.string('warn-expiry')
    const warnExpiry = warnText != null ? parseDuration(warnText, '--warn-expiry') : undefined
    const timeout = timeoutOf(args)

    const [{ ManagementCredentials, runDoctor }, { createIoaNode }, { generateKeyPairFromSeed }, { routingTableSize }] = await Promise.all([
      import('@ioa/management'), import('../../ioa-node.js'), import('@libp2p/crypto/keys'), import('../client.js')
    ])
    ctx.out.progress(`starting a peer as ${key.identity.did}…`)
    const client = await createIoaNode({
      bootstrap: [target],
      // the caller's key is the peer key: the node sees the caller itself on the connection
      transport: { privateKey: await generateKeyPairFromSeed('Ed25519', Buffer.from(key.file.seed, 'hex')), dhtClientMode: true },
      interconnect: { publish: false }
    })
    let report: DoctorReport
    try {
      // a DHT peer first, so that the lookups have somewhere to go (the checks report what is missing)
      const end = Date.now() + timeout
      while (routingTableSize(client) === 0 && Date.now() < end && !ctx.signal.aborted) await new Promise(resolve => setTimeout(resolve, 25))
      ctx.out.progress(`checking ${target}…`)
      report = await runDoctor({
        client,
        credentials: new ManagementCredentials({ identity: key.identity, proofs }),
        target,
        tokens: [...proofs, ...tokens],
        require,
        warnExpiry,
        timeout,
        signal: ctx.signal
      })
    } finally {
      await client.stop()
    }
    if (ctx.out.json) ctx.out.emit(report)
    else printReport(report, ctx.out)
    return report.worst === 'error' ? DOCTOR_EXIT.error : report.worst === 'warn' ? DOCTOR_EXIT.warn : DOCTOR_EXIT.ok
  }
}

function printReport (r: DoctorReport, out: { print(text?: string): void }): void {
  out.print(`${r.peer} (${r.node})`)
  for (const f of r.findings) {
    out.print(`  ${LABEL[f.severity]}  ${f.check.padEnd(12)} ${f.message}`)
    if (f.fix != null) out.print(`  ${' '.repeat(5)}  ${' '.repeat(12)} → ${f.fix}`)
  }
  const count = (s: Severity): number => r.findings.filter(f => f.severity === s).length
  out.print(`${count('error')} error(s), ${count('warn')} warning(s)`)
}
