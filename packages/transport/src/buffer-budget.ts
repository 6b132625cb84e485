/**
 * Accounting of the bytes this node holds for remote peers in partial frames
 * (`spec/transport.md` section 11.1): every messaging stream has an account,
 * and the bytes of all accounts count against the remote peer's budget, its
 * IP address's budget and the node's total. A stream whose bytes would go
 * over one of them is refused more (the caller resets it).
 */
import { ResourceExhaustedError } from './errors.js'
import type { Connection } from '@libp2p/interface'

export interface BufferLimits {
  /** Bytes of partial frames one remote peer may have this node hold */
  perPeer: number
  /** Bytes of partial frames all peers behind one IP address may have this node hold */
  perAddress: number
  /** Bytes of partial frames all peers together may have this node hold */
  total: number
}

export interface BufferStats {
  /** Bytes held over all streams */
  total: number
  /** Bytes held per remote peer id (peers holding nothing are absent) */
  peers: Record<string, number>
  /** Bytes held per remote IP address (addresses holding nothing are absent) */
  addresses: Record<string, number>
}

/**
 * The IP address a connection comes from, or `undefined` when its address
 * has none (in-memory transport)
 */
export function remoteAddress (connection: Connection): string | undefined {
  for (const c of connection.remoteAddr.getComponents()) {
    if (c.name === 'ip4' || c.name === 'ip6') {
      return c.value
    }
  }
  return undefined
}

function add (map: Map<string, number>, key: string, delta: number): void {
  const n = (map.get(key) ?? 0) + delta
  if (n <= 0) {
    map.delete(key)
  } else {
    map.set(key, n)
  }
}

/** The bytes one stream holds */
export class BufferAccount {
  private readonly budget: BufferBudget
  readonly peer: string
  readonly address: string | undefined
  /** Bytes this account holds now */
  held = 0

  constructor (budget: BufferBudget, peer: string, address: string | undefined) {
    this.budget = budget
    this.peer = peer
    this.address = address
  }

  /**
   * Set the bytes this stream holds. Growing over a budget is refused: the
   * account keeps its old value and the error says which budget.
   */
  set (bytes: number): ResourceExhaustedError | undefined {
    const delta = bytes - this.held
    if (delta === 0) return undefined
    const err = delta > 0 ? this.budget.check(this, delta) : undefined
    if (err == null) {
      this.budget.commit(this, delta)
      this.held = bytes
    }
    return err
  }

  /** Give back everything this stream held */
  release (): void {
    this.set(0)
  }
}

export class BufferBudget {
  private readonly limits: BufferLimits
  private total = 0
  private readonly peers = new Map<string, number>()
  private readonly addresses = new Map<string, number>()

  constructor (limits: BufferLimits) {
    this.limits = limits
  }

  /** An account for one stream from `peer` at `address` */
  open (peer: string, address: string | undefined): BufferAccount {
    return new BufferAccount(this, peer, address)
  }

  /** @internal Which budget growing `account` by `delta` would break, if any */
  check (account: BufferAccount, delta: number): ResourceExhaustedError | undefined {
    const peer = (this.peers.get(account.peer) ?? 0) + delta
    if (peer > this.limits.perPeer) {
      return new ResourceExhaustedError(`Peer would hold ${peer} buffered bytes, limit is ${this.limits.perPeer}`)
    }
    if (account.address != null) {
      const address = (this.addresses.get(account.address) ?? 0) + delta
      if (address > this.limits.perAddress) {
        return new ResourceExhaustedError(`Address would hold ${address} buffered bytes, limit is ${this.limits.perAddress}`)
      }
    }
    if (this.total + delta > this.limits.total) {
      return new ResourceExhaustedError(`Node would hold ${this.total + delta} buffered bytes, limit is ${this.limits.total}`)
    }
    return undefined
  }

  /** @internal */
  commit (account: BufferAccount, delta: number): void {
    this.total += delta
    add(this.peers, account.peer, delta)
    if (account.address != null) {
      add(this.addresses, account.address, delta)
    }
  }

  /** Bytes held now, in total, per peer and per address */
  stats (): BufferStats {
    return {
      total: this.total,
      peers: Object.fromEntries(this.peers),
      addresses: Object.fromEntries(this.addresses)
    }
  }

  /** Bytes held now over all streams */
  get held (): number {
    return this.total
  }

  /** Entries in the per-peer and per-address tables */
  get entries (): number {
    return this.peers.size + this.addresses.size
  }
}
