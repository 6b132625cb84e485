/**
 * Field types of the node's config file that check more than their JSON
 * type: multiaddrs that parse (ports in range), peer ids that decode,
 * capability names of the card grammar, durations a Node.js timer can hold.
 * Each refusal says what is wrong; `parseConfig` adds the field's path.
 */
import { isIP as isIPVersion } from 'node:net'
import { isCapability, isDid } from '@ioa/interconnect'
import { peerIdFromString } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { z } from 'zod'

/**
 * Longest delay a Node.js timer takes, ms (2^31 − 1, about 24.8 days): a
 * longer one fires after 1 ms, so every duration that feeds a timer is at
 * most this
 */
export const MAX_TIMER_MS = 2_147_483_647

/** A whole number of milliseconds from `min` to `max` (at most the timer limit) */
export function duration (min: number, max = MAX_TIMER_MS): z.ZodNumber {
  return z.number().int().min(min, `at least ${min} ms`).max(Math.min(max, MAX_TIMER_MS), max < MAX_TIMER_MS
    ? `at most ${max} ms`
    : `at most ${MAX_TIMER_MS} ms (2^31-1, the longest delay a Node.js timer takes)`)
}

/** Why `text` is not a canonical peer id, or undefined */
function peerIdProblem (text: string): string | undefined {
  try {
    return peerIdFromString(text).toString() === text ? undefined : 'not in canonical form'
  } catch (err: any) {
    return String(err?.message ?? err).slice(0, 120)
  }
}

/** A libp2p peer id in its canonical string form (`12D3KooW…`) */
export const PeerIdString = z.string().min(1).max(128).superRefine((s, ctx) => {
  const problem = peerIdProblem(s)
  if (problem != null) ctx.addIssue({ code: 'custom', message: `"${s.slice(0, 80)}" is not a libp2p peer id (${problem})` })
})

/** An Ed25519 `did:key` identifier */
export const DidString = z.string().max(128).refine(isDid, 'not an Ed25519 did:key identifier')

/** A capability name of the card grammar (`travel.hotel.booking`) */
export const CapabilityString = z.string().min(1).max(128).refine(isCapability, {
  message: 'not a capability name: 1-8 dot-separated segments, each a lower-case letter then lower-case letters, digits or "-" (at most 32)'
})

/** Why `text` is not a multiaddr (with a peer id when `needPeer`), or undefined */
function multiaddrProblem (text: string, needPeer: boolean): string | undefined {
  let components
  try {
    components = multiaddr(text).getComponents()
  } catch (err: any) {
    return `"${text.slice(0, 120)}" is not a multiaddr (${String(err?.message ?? err).slice(0, 120)})`
  }
  const peer = components.findLast(c => c.name === 'p2p')?.value
  if (peer == null) return needPeer ? `"${text.slice(0, 120)}" names no peer: a multiaddr ending in /p2p/<peer id>` : undefined
  const problem = peerIdProblem(peer)
  return problem != null ? `"${text.slice(0, 120)}" ends in a malformed peer id (${problem})` : undefined
}

function multiaddrField (needPeer: boolean): z.ZodType<string> {
  return z.string().min(1).max(1024).superRefine((s, ctx) => {
    const problem = multiaddrProblem(s, needPeer)
    if (problem != null) ctx.addIssue({ code: 'custom', message: problem })
  })
}

/** An address to listen on (`/ip4/0.0.0.0/tcp/4001`) */
export const ListenAddr = multiaddrField(false)

/** A peer to dial: a multiaddr ending in `/p2p/<peer id>` */
export const PeerAddr = multiaddrField(true)

/** Why `text` is not a `host:port` for the management HTTP server, or undefined */
function httpAddressProblem (text: string): string | undefined {
  const m = /^(\[[0-9A-Fa-f:.]+\]|[0-9]{1,3}(?:\.[0-9]{1,3}){3}|localhost):([0-9]{1,5})$/.exec(text)
  if (m == null) return `"${text.slice(0, 80)}" is not host:port (an IPv4 address, [IPv6 address] or localhost, then a port)`
  if (Number(m[2]) > 65535) return `port ${m[2]} is above 65535`
  if (m[1].startsWith('[') ? !isIP(m[1].slice(1, -1), 6) : (m[1] !== 'localhost' && !isIP(m[1], 4))) return `"${m[1]}" is not an IP address`
  return undefined
}

function isIP (host: string, version: 4 | 6): boolean {
  return isIPVersion(host) === version
}

/** The management HTTP server's address: `127.0.0.1:9464`, `[::1]:0`, `localhost:9464` */
export const HttpAddress = z.string().min(1).max(64).superRefine((s, ctx) => {
  const problem = httpAddressProblem(s)
  if (problem != null) ctx.addIssue({ code: 'custom', message: problem })
})
