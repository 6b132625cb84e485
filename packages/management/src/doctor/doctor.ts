/**
 * The checks of `ioa doctor` (docs/cli.md): from a fresh peer, a running
 * node and its network are examined through the management protocol and the
 * network itself, and each finding says how bad it is and what to do.
 * Logs on `ioa:management:doctor`.
 */
import { anySignal } from 'any-signal'
import { tokenCid } from '@ioa/collab'
import { peerIdFromString } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { requestSnapshot } from '../protocol/client.js'
import { peerDid } from '../protocol/snapshot.js'
import type { ManagementCredentials, ReceivedSnapshot } from '../protocol/client.js'
import type { SnapshotPayload } from '../protocol/snapshot.js'
import type { Token } from '@ioa/collab'
import type { Did, Interconnect } from '@ioa/interconnect'
import type { TransportNode } from '@ioa/transport'

/** How bad a finding is; a report's exit status comes from its worst one */
export type Severity = 'ok' | 'info' | 'warn' | 'error'

/** What the doctor checks */
export type DoctorCheck = 'reach' | 'snapshot' | 'clock' | 'dht' | 'tokens' | 'capabilities' | 'gateway'

export interface Finding {
  check: DoctorCheck
  severity: Severity
  /** What was found, one line */
  message: string
  /** What to do about it, one line (absent when nothing needs doing) */
  fix?: string
  /** What the finding is about: an address, a capability, a token CID, an agent */
  subject?: string
}

export interface DoctorReport {
  /** The node checked */
  peer: string
  node: Did
  /** Its verified snapshot, when it answered */
  snapshot?: SnapshotPayload
  findings: Finding[]
  worst: Severity
}

export interface DoctorInit {
  /** The fresh peer the checks run from: connected to nothing but the network it joins through `target` */
  client: { transport: TransportNode, interconnect: Pick<Interconnect, 'discoverAll' | 'resolve'> }
  /** The caller's authority (the operator's key, or a key with the operator's grant) */
  credentials: ManagementCredentials
  /** The node to check: a multiaddr with `/p2p/<peer id>` */
  target: string
  /** Tokens whose expiry is checked (the caller's grant, tokens the node's agents rely on) */
  tokens?: Token[]
  /** Capabilities that must have a provider in the network */
  require?: string[]
  /**
   * A token or card expiring sooner than this is a warning, in ms
   *
   * @default 604_800_000 (7 days)
   */
  warnExpiry?: number
  /**
   * Clock skew above this is a warning, in ms (above `maxSkew` the tokens'
   * clock skew tolerance, 30 s, it is an error)
   *
   * @default 2_000
   */
  warnSkew?: number
  /**
   * Timeout of each network step, in ms
   *
   * @default 10_000
   */
  timeout?: number
  signal?: AbortSignal
}

/** Defaults of {@link DoctorInit} */
export const DOCTOR_DEFAULTS = Object.freeze({
  warnExpiry: 604_800_000,
  warnSkew: 2_000,
  maxSkew: 30_000,
  timeout: 10_000
})

const RANK: Record<Severity, number> = { ok: 0, info: 1, warn: 2, error: 3 }

/** The worst severity of `findings` (`ok` for none) */
export function worstOf (findings: Finding[]): Severity {
  return findings.reduce<Severity>((w, f) => RANK[f.severity] > RANK[w] ? f.severity : w, 'ok')
}

function duration (ms: number): string {
  const abs = Math.abs(ms)
  if (abs < 1_000) return `${Math.round(ms)} ms`
  if (abs < 120_000) return `${(ms / 1000).toFixed(1)} s`
  if (abs < 7_200_000) return `${Math.round(ms / 60_000)} min`
  if (abs < 172_800_000) return `${Math.round(ms / 3_600_000)} h`
  return `${Math.round(ms / 86_400_000)} days`
}

const withPeer = (addr: string, peer: string): string => addr.includes('/p2p/') ? addr : `${addr}/p2p/${peer}`

/** Run every check against `init.target`; never throws for a finding (only for a bad `target`) */
export async function runDoctor (init: DoctorInit): Promise<DoctorReport> {
  const { client, signal } = init
  const timeout = init.timeout ?? DOCTOR_DEFAULTS.timeout
  const warnExpiry = init.warnExpiry ?? DOCTOR_DEFAULTS.warnExpiry
  const warnSkew = init.warnSkew ?? DOCTOR_DEFAULTS.warnSkew
  const log = client.transport.logger.forComponent('ioa:management:doctor')
  const target = multiaddr(init.target)
  const peer = target.getComponents().findLast(c => c.name === 'p2p')?.value
  if (peer == null) throw new TypeError('The target needs /p2p/<peer id>')
  const node = peerDid(peerIdFromString(peer))
  if (node == null) throw new TypeError('The target\'s peer id is not an Ed25519 key')
  const findings: Finding[] = []
  const add = (f: Finding): void => {
    findings.push(f)
    log('%s %s: %s', f.severity, f.check, f.message)
  }
  const opts = { signal, timeout }

  // the snapshot, with the operator's authority
  let got: ReceivedSnapshot | undefined
  try {
    got = await requestSnapshot(client.transport.services.messaging, target, node, init.credentials, opts)
    add({ check: 'snapshot', severity: 'ok', message: `signed snapshot ${got.snapshot.payload.seq} of ${node} verified (${got.rtt} ms)` })
  } catch (err: any) {
    const code = String(err?.code ?? err?.name ?? 'ERROR')
    const fix = ({
      NO_OPERATOR: 'set management.operator in the node\'s config to the operator\'s did and restart it',
      NOT_OPERATOR: 'use the operator\'s key, or a grant (--proof) issued by the operator the node trusts',
      UNAUTHORIZED: 'give --proof a grant of ioa.manage.* from the operator to this key',
      TOKEN_EXPIRED: 'ask the operator for a new grant (ioa delegate --skill ioa.manage.*)',
      PROTOCOL_NOT_SUPPORTED: 'start the node with a management section in its config',
      DIAL_FAILED: 'check that the node runs and that this address reaches it (firewall, listen address)'
    } as Record<string, string>)[code] ?? 'see the node\'s log (DEBUG=ioa:management:*) for why it refused'
    add({ check: 'snapshot', severity: 'error', message: `no snapshot: ${code}: ${err?.message ?? err}`, fix })
  }
  const s = got?.snapshot.payload

  // reachability of each address the node listens on, each on a new connection
  const addresses = [...new Set([init.target, ...(s?.addresses ?? []).map(a => withPeer(a, peer))])]
  for (const addr of addresses) {
    try {
      const dialSignal = anySignal([AbortSignal.timeout(timeout), signal])
      const conn = await client.transport.dial(multiaddr(addr), { force: true, signal: dialSignal }).finally(() => { dialSignal.clear() })
      await conn.close().catch((err: unknown) => { log('closing the test connection to %s failed - %e', addr, err) })
      add({ check: 'reach', severity: 'ok', message: `${addr} is reachable`, subject: addr })
    } catch (err: any) {
      add({ check: 'reach', severity: addr === init.target ? 'error' : 'warn', message: `${addr} is not reachable: ${err?.message ?? err}`, fix: 'listen on an address others can reach, or open the port in the firewall', subject: addr })
    }
  }

  if (s != null && got != null) {
    // clock skew: the node's clock when it answered against ours, half the round trip later
    const skew = got.receivedAt - Math.round(got.rtt / 2) - got.now
    const severity: Severity = Math.abs(skew) > DOCTOR_DEFAULTS.maxSkew ? 'error' : Math.abs(skew) > warnSkew ? 'warn' : 'ok'
    add({
      check: 'clock',
      severity,
      message: `the node's clock is ${duration(Math.abs(skew))} ${skew > 0 ? 'behind' : 'ahead of'} this one`,
      ...(severity !== 'ok' ? { fix: 'synchronise the node\'s clock (NTP): tokens and cards are checked against it' } : {})
    })

    // the DHT routing table
    if (s.dht.size === 0) add({ check: 'dht', severity: 'error', message: 'the routing table is empty: the node can neither find nor be found', fix: 'give the node bootstrap peers that are up' })
    else if (s.dht.size < 2) add({ check: 'dht', severity: 'warn', message: `the routing table has one peer: every lookup depends on it`, fix: 'add bootstrap peers' })
    else add({ check: 'dht', severity: 'ok', message: `the routing table has ${s.dht.size} peers in ${s.dht.buckets} buckets (${s.dht.mode} mode)` })

    // the node's capabilities, seen from the network
    const hosted = new Map<string, Did[]>()
    for (const a of s.agents) for (const skill of a.skills) hosted.set(skill, [...(hosted.get(skill) ?? []), a.did])
    for (const [skill, agents] of hosted) {
      const found = await client.interconnect.discoverAll({ capability: skill }, { timeout, cache: false, signal }).catch(() => [])
      const seen = found.filter(f => agents.includes(f.card.id)).length
      if (seen === agents.length) add({ check: 'capabilities', severity: 'ok', message: `${skill}: found in the network (${found.length} provider(s))`, subject: skill })
      else add({ check: 'capabilities', severity: 'warn', message: `${skill}: ${agents.length - seen} of the node's ${agents.length} agent(s) offering it cannot be found from outside`, fix: 'check that the node publishes its cards and has DHT peers (see dht)', subject: skill })
    }

    // a gateway's exports, resolved from outside
    if (s.gateway != null) {
      if (s.gateway.exports.length === 0) add({ check: 'gateway', severity: 'info', message: `the gateway of ${s.gateway.domain} exports no agent now`, fix: 'check gateway.exports and that the domain\'s agents run' })
      for (const did of s.gateway.exports) {
        try {
          await client.interconnect.resolve(did, { timeout, cache: false, signal })
          add({ check: 'gateway', severity: 'ok', message: `exported agent ${did} resolves from outside`, subject: did })
        } catch (err: any) {
          add({ check: 'gateway', severity: 'warn', message: `exported agent ${did} does not resolve from outside: ${err?.code ?? err?.message}`, fix: 'check the gateway\'s outer node has DHT peers and publishes its export cards', subject: did })
        }
      }
    }
  }

  // capabilities that must have a provider
  for (const skill of init.require ?? []) {
    const found = await client.interconnect.discoverAll({ capability: skill }, { timeout, cache: false, signal }).catch(() => [])
    if (found.length === 0) add({ check: 'capabilities', severity: 'error', message: `${skill}: no provider in the network`, fix: `host an agent with ${skill}, or check that its node is up and published`, subject: skill })
    else add({ check: 'capabilities', severity: 'ok', message: `${skill}: ${found.length} provider(s)`, subject: skill })
  }

  // tokens about to expire: the node's own (its snapshot lists them), then the ones given
  const now = Date.now()
  const expiry = (held: { cid: string, expiresAt: number, issuer: Did, audience: Did }, whose: string): void => {
    const { cid, issuer } = held
    const left = held.expiresAt - now
    const what = `${whose} ${cid.slice(0, 12)}… from ${issuer}${whose === 'token' ? '' : ` to ${held.audience}`}`
    if (left <= 0) add({ check: 'tokens', severity: 'error', message: `${what} expired ${duration(-left)} ago`, fix: `ask ${issuer} for a new token`, subject: cid })
    else if (left < warnExpiry) add({ check: 'tokens', severity: 'warn', message: `${what} expires in ${duration(left)}`, fix: `ask ${issuer} for a new token before it expires`, subject: cid })
    else add({ check: 'tokens', severity: 'ok', message: `${what} valid for ${duration(left)}`, subject: cid })
  }
  for (const p of s?.proofs ?? []) expiry(p, 'the node\'s token')
  for (const t of init.tokens ?? []) {
    expiry({ cid: (await tokenCid(t)).toString(), expiresAt: t.payload.exp, issuer: t.payload.iss, audience: t.payload.aud }, 'token')
  }

  return { peer, node, ...(s != null ? { snapshot: s } : {}), findings, worst: worstOf(findings) }
}
