/**
 * The conversation log of one team on one node (`spec/teams.md` 8.3): the
 * entries `0 … n` in order, hash-chained by `prev`, kept in memory (bounded
 * by the team's history budget) and in the node's datastore, so that the
 * history survives a restart.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { Key } from 'interface-datastore'
import { HistoryFullError, InvalidMessageError } from './errors.js'
import { cidOfBytes } from './records.js'
import type { Entry } from './records.js'
import type { Datastore } from 'interface-datastore'

/** Datastore prefix of team data */
export const TEAM_KEY_PREFIX = '/ioa/teams'

function seqKey (team: string, seq: number): Key {
  return new Key(`${TEAM_KEY_PREFIX}/${team}/log/${seq.toString(16).padStart(16, '0')}`)
}

export class TeamLog {
  readonly team: string
  private readonly datastore: Datastore
  private readonly historyBytes: number
  private readonly entries: Entry[] = []
  private readonly cids: string[] = []
  private readonly sizes: number[] = []
  /** Message id → seq, for idempotent posts */
  private readonly ids = new Map<string, number>()
  private total = 0

  constructor (team: string, datastore: Datastore, historyBytes: number) {
    this.team = team
    this.datastore = datastore
    this.historyBytes = historyBytes
  }

  get length (): number {
    return this.entries.length
  }

  /** CID of the last entry (undefined when empty) */
  get head (): string | undefined {
    return this.cids[this.cids.length - 1]
  }

  /** Bytes the entries take, encoded */
  get bytes (): number {
    return this.total
  }

  entry (seq: number): Entry | undefined {
    return this.entries[seq]
  }

  cid (seq: number): string | undefined {
    return this.cids[seq]
  }

  /** The seq of a message id already in the log */
  seqOf (id: string): number | undefined {
    return this.ids.get(id)
  }

  /** Entries `from … to` (inclusive), at most `maxBytes` encoded, never with a gap */
  slice (from: number, to: number, maxBytes = Infinity): Entry[] {
    const out: Entry[] = []
    let size = 0
    for (let s = Math.max(0, from); s <= to && s < this.entries.length; s++) {
      size += this.sizes[s]
      if (out.length > 0 && size > maxBytes) break
      out.push(this.entries[s])
    }
    return out
  }

  /**
   * Append the next entry: its `seq` must be the log's length and its `prev`
   * the head's CID; stored before it counts. Returns the entry's CID.
   * `encoded`: the entry's DAG-CBOR encoding, when the caller made it.
   */
  async append (entry: Entry, encoded?: Uint8Array): Promise<string> {
    if (entry.seq !== this.entries.length) throw new InvalidMessageError(`Entry ${entry.seq} out of order (next is ${this.entries.length})`)
    if (entry.prev !== this.head) throw new InvalidMessageError(`Entry ${entry.seq} does not link to the previous entry`)
    const bytes = encoded ?? dagCbor.encode(entry)
    if (this.total + bytes.byteLength > this.historyBytes) throw new HistoryFullError(`The team's history would exceed ${this.historyBytes} bytes`)
    // one encoding serves the budget, the CID and the stored value
    const cid = await cidOfBytes(bytes)
    await this.datastore.put(seqKey(this.team, entry.seq), bytes)
    this.entries.push(entry)
    this.cids.push(cid)
    this.sizes.push(bytes.byteLength)
    this.ids.set(entry.msg.payload.id, entry.seq)
    this.total += bytes.byteLength
    return cid
  }

  /** Drop the entries from `seq` on (a minority side's tail after a partition, spec 7.3); returns how many */
  async truncate (seq: number): Promise<number> {
    let dropped = 0
    while (this.entries.length > seq) {
      const e = this.entries.pop() as Entry
      this.cids.pop()
      this.total -= this.sizes.pop() as number
      this.ids.delete(e.msg.payload.id)
      await this.datastore.delete(seqKey(this.team, e.seq))
      dropped++
    }
    return dropped
  }

  /**
   * Load the stored entries (after a restart), checking order and links;
   * stops at the first entry that does not follow (the rest is dropped)
   */
  async load (decode: (value: unknown) => Entry): Promise<number> {
    const found: Array<{ seq: number, value: Uint8Array }> = []
    for await (const { key, value } of this.datastore.query({ prefix: `${TEAM_KEY_PREFIX}/${this.team}/log/` })) {
      found.push({ seq: parseInt(key.baseNamespace(), 16), value })
    }
    found.sort((a, b) => a.seq - b.seq)
    for (const { seq, value } of found) {
      if (seq !== this.entries.length) break
      const entry = decode(dagCbor.decode(value))
      const cid = await cidOfBytes(value)
      if (entry.prev !== this.head) break
      this.entries.push(entry)
      this.cids.push(cid)
      this.sizes.push(value.byteLength)
      this.ids.set(entry.msg.payload.id, entry.seq)
      this.total += value.byteLength
    }
    // entries past a break are stale (a crash between writes): drop them
    for (const { seq } of found) {
      if (seq >= this.entries.length) await this.datastore.delete(seqKey(this.team, seq))
    }
    return this.entries.length
  }

  /** Remove every stored entry of the team */
  async destroy (): Promise<void> {
    await this.truncate(0)
  }
}
