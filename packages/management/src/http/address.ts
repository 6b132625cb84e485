/**
 * The management HTTP server's addresses: parsing `host:port`, whether a
 * host is loopback, and which `Host` headers a request may carry (the DNS
 * rebinding check of spec/management.md 2.2).
 */
import { isIP } from 'node:net'
import { InvalidHttpAddressError } from './errors.js'

/** A parsed `host:port`: `host` without brackets */
export interface HttpAddress {
  host: string
  port: number
}

/** Parse `127.0.0.1:9464`, `[::1]:0`, `localhost:9464`; throws `InvalidHttpAddressError` */
export function parseHttpAddress (text: string): HttpAddress {
  const m = typeof text === 'string' ? /^(?:\[([0-9A-Fa-f:.]+)\]|([0-9.]+|localhost)):([0-9]{1,5})$/.exec(text) : null
  const host = m?.[1] ?? m?.[2]
  const port = Number(m?.[3])
  if (m == null || host == null || port > 65535 || (host !== 'localhost' && isIP(host) !== (m[1] != null ? 6 : 4))) {
    throw new InvalidHttpAddressError(`Invalid management HTTP address "${String(text).slice(0, 80)}": host:port with an IPv4 address, [IPv6 address] or localhost`)
  }
  return { host, port }
}

/** Is the host a loopback address (127.0.0.0/8, ::1) or `localhost`? */
export function isLoopback (host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host)
}

/** A `Host` header's host and port, or undefined when it is not `host[:port]` */
function splitHost (header: string): { host: string, port?: number } | undefined {
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:[\]]+))(?::([0-9]{1,5}))?$/.exec(header)
  if (m == null) return undefined
  return { host: (m[1] ?? m[2]).toLowerCase(), port: m[3] != null ? Number(m[3]) : undefined }
}

/**
 * May a request carry this `Host` header? Its port must be the server's
 * and its host an IP address (v4, or v6 in brackets), `localhost`, or one of
 * `allowedHosts`: a DNS name that an attacker's page got to resolve to this
 * address (DNS rebinding) is refused.
 */
export function hostAllowed (header: string | undefined, port: number, allowedHosts: ReadonlySet<string>): boolean {
  if (header == null || header.length > 300) return false
  const h = splitHost(header)
  if (h == null || (h.port ?? 80) !== port) return false
  if (h.host === 'localhost' || allowedHosts.has(h.host)) return true
  return isIP(h.host) !== 0 && (isIP(h.host) === 6) === header.startsWith('[')
}

/**
 * May a request with this `Origin` header go on? No `Origin` (a tool such
 * as curl or Prometheus, a same-origin GET), or the origin of an allowed
 * `Host` of this server
 */
export function originAllowed (origin: string | undefined, port: number, allowedHosts: ReadonlySet<string>): boolean {
  if (origin == null) return true
  const m = /^http:\/\/(.+)$/.exec(origin)
  return m != null && hostAllowed(m[1], port, allowedHosts)
}
