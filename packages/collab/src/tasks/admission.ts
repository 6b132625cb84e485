/**
 * Fair share of an executor's active tasks (spec/collab-tasks.md 11.1): a new
 * task takes one slot of the node, of the submitting peer, of the caller
 * agent (the envelope's `from`) and of the peer's remote address, and gives
 * them back when it ends. One peer, one agent or one address (where fresh
 * peer ids and agent ids cost nothing) cannot hold the whole node.
 */
import { TooManyRequestsError } from '@ioa/transport'
import { positiveInteger } from '../options.js'

export interface FairShareLimits {
  /** Non-terminal tasks of the executor */
  maxActiveTasks: number
  /** Non-terminal tasks submitted by one peer */
  maxActiveTasksPerPeer: number
  /** Non-terminal tasks of one caller agent (`from`) */
  maxActiveTasksPerCaller: number
  /** Non-terminal tasks submitted from one remote address (IPv4 address, IPv6 /64) */
  maxActiveTasksPerAddress: number
}

/** Who asks for a slot; `peer` and `address` are absent for the executor's own node */
export interface Claim {
  caller: string
  peer?: string
  address?: string
}

/** Expand an IPv6 address to its 8 groups (undefined when it is not one) */
function ipv6Groups (ip: string): number[] | undefined {
  let text = ip.split('%')[0].toLowerCase()
  let tail: number[] = []
  const v4 = /(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(text)
  if (v4 != null) {
    const b = v4.slice(1).map(Number)
    if (b.some(x => x > 255)) return undefined
    tail = [(b[0] << 8) | b[1], (b[2] << 8) | b[3]]
    text = text.slice(0, v4.index)
    if (text.endsWith(':') && !text.endsWith('::')) text = text.slice(0, -1)
  }
  const halves = text.split('::')
  if (halves.length > 2) return undefined
  const part = (s: string): number[] => s === '' ? [] : s.split(':').map(h => /^[0-9a-f]{1,4}$/.test(h) ? Number.parseInt(h, 16) : Number.NaN)
  const head = part(halves[0])
  const rest = [...(halves.length === 2 ? part(halves[1]) : []), ...tail]
  const zeros = 8 - head.length - rest.length
  if (zeros < 0 || (halves.length === 2 ? zeros < 1 : zeros !== 0)) return undefined
  const groups = [...head, ...new Array<number>(zeros).fill(0), ...rest]
  return groups.some(g => Number.isNaN(g)) ? undefined : groups
}

/**
 * The address a connection's slots are counted under: its IPv4 address, or
 * the /64 prefix of its IPv6 address (an IPv4-mapped IPv6 address counts as
 * the IPv4 address); undefined when the address has no IP (in-memory, relay)
 */
export function addressKey (addr: { getComponents(): Array<{ name: string, value?: string }> } | undefined): string | undefined {
  if (addr == null) return undefined
  const components = addr.getComponents()
  // a relayed connection: the address is the relay's, not the peer's
  if (components.some(c => c.name === 'p2p-circuit')) return undefined
  for (const c of components) {
    if (c.name === 'ip4' && c.value != null) return c.value
    if (c.name === 'ip6' && c.value != null) {
      const g = ipv6Groups(c.value)
      if (g == null) return c.value
      if (g.slice(0, 5).every(x => x === 0) && g[5] === 0xffff) return `${g[6] >> 8}.${g[6] & 0xff}.${g[7] >> 8}.${g[7] & 0xff}`
      return `${g.slice(0, 4).map(x => x.toString(16)).join(':')}::/64`
    }
  }
  return undefined
}

class Counter {
  private readonly counts = new Map<string, number>()

  get (key: string): number {
    return this.counts.get(key) ?? 0
  }

  add (key: string, n: 1 | -1): void {
    const next = this.get(key) + n
    if (next <= 0) this.counts.delete(key)
    else this.counts.set(key, next)
  }

  get size (): number {
    return this.counts.size
  }
}

/** Slots of active tasks by node, peer, caller and address */
export class TaskAdmission {
  private readonly limits: FairShareLimits
  private readonly peers = new Counter()
  private readonly callers = new Counter()
  private readonly addresses = new Counter()
  private active = 0

  constructor (limits: FairShareLimits) {
    for (const [k, v] of Object.entries(limits)) {
      positiveInteger(`limits.${k}`, v)
    }
    this.limits = limits
  }

  /**
   * Take a slot for a new task, or throw `TooManyRequestsError` naming the
   * limit that is full. Returns the function that gives the slot back (once).
   */
  admit (claim: Claim): () => void {
    const l = this.limits
    if (this.active >= l.maxActiveTasks) throw new TooManyRequestsError(`More than ${l.maxActiveTasks} active tasks`)
    if (claim.peer != null && this.peers.get(claim.peer) >= l.maxActiveTasksPerPeer) {
      throw new TooManyRequestsError(`More than ${l.maxActiveTasksPerPeer} active tasks from peer ${claim.peer}`)
    }
    // the executor's own node is bounded by the node limit only
    const remote = claim.peer != null
    if (remote && this.callers.get(claim.caller) >= l.maxActiveTasksPerCaller) {
      throw new TooManyRequestsError(`More than ${l.maxActiveTasksPerCaller} active tasks of agent ${claim.caller}`)
    }
    if (claim.address != null && this.addresses.get(claim.address) >= l.maxActiveTasksPerAddress) {
      throw new TooManyRequestsError(`More than ${l.maxActiveTasksPerAddress} active tasks from address ${claim.address}`)
    }
    this.active++
    if (claim.peer != null) this.peers.add(claim.peer, 1)
    if (remote) this.callers.add(claim.caller, 1)
    if (claim.address != null) this.addresses.add(claim.address, 1)
    let held = true
    return () => {
      if (!held) return
      held = false
      this.active--
      if (claim.peer != null) this.peers.add(claim.peer, -1)
      if (remote) this.callers.add(claim.caller, -1)
      if (claim.address != null) this.addresses.add(claim.address, -1)
    }
  }

  /** Slots in use, and how many peers, callers and addresses hold some */
  stats (): { active: number, peers: number, callers: number, addresses: number } {
    return { active: this.active, peers: this.peers.size, callers: this.callers.size, addresses: this.addresses.size }
  }
}
