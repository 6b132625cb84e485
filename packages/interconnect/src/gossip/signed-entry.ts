/**
 * Signed index entries (spec `interconnect.md` 12.6): a capability snapshot
 * as its announcer signed it on the gossip topic, carried in an answer of
 * the index query so that the asker checks it exactly as a gossip receiver
 * does: the signature of libp2p pubsub's StrictSign policy over
 * `"libp2p-pubsub:" || protobuf Message { from, data, seqno, topic }`.
 *
 * Only the four signed fields are encoded here (protobuf field numbers 1-4
 * of the pubsub `Message`, in that order, as every libp2p pubsub encodes
 * them); nothing is decoded from protobuf: the entry itself is DAG-CBOR.
 */
import { publicKeyFromProtobuf, publicKeyToProtobuf } from '@libp2p/crypto/keys'
import { peerIdFromMultihash } from '@libp2p/peer-id'
import * as Digest from 'multiformats/hashes/digest'
import { InvalidSignatureError, InvalidSnapshotError } from '../errors.js'
import type { PeerId, PublicKey } from '@libp2p/interface'

/** One signed snapshot of one announcer, as the index query carries it */
export interface SignedEntry {
  /** The announcer's peer id (its multihash bytes), the pubsub `from` */
  from: Uint8Array
  /** The snapshot's DAG-CBOR bytes, the pubsub `data` */
  data: Uint8Array
  /** The pubsub `seqno` (8 bytes, big-endian) */
  seqno: Uint8Array
  /** The announcer's signature, the pubsub `signature` */
  sig: Uint8Array
  /** The announcer's public key (protobuf), only when its peer id does not embed it */
  key?: Uint8Array
}

const SIGN_PREFIX = new TextEncoder().encode('libp2p-pubsub:')
const SEQNO_BYTES = 8
const MAX_SIG_BYTES = 1_024
const MAX_KEY_BYTES = 1_024
const MAX_FROM_BYTES = 128

/** Protobuf varint of a non-negative integer below 2^31 */
function varint (n: number): number[] {
  const out: number[] = []
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80)
    n >>>= 7
  }
  out.push(n)
  return out
}

/** A length-delimited protobuf field (wire type 2) */
function field (num: number, bytes: Uint8Array): Uint8Array {
  const head = [(num << 3) | 2, ...varint(bytes.byteLength)]
  const out = new Uint8Array(head.length + bytes.byteLength)
  out.set(head, 0)
  out.set(bytes, head.length)
  return out
}

/** The bytes the announcer signed: `"libp2p-pubsub:"` then the protobuf of `from`, `data`, `seqno`, `topic` */
export function signedBytes (entry: Pick<SignedEntry, 'from' | 'data' | 'seqno'>, topic: string): Uint8Array {
  const parts = [SIGN_PREFIX, field(1, entry.from), field(2, entry.data), field(3, entry.seqno), field(4, new TextEncoder().encode(topic))]
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0))
  let at = 0
  for (const p of parts) {
    out.set(p, at)
    at += p.byteLength
  }
  return out
}

/** A pubsub sequence number as its 8 big-endian bytes, or undefined when it does not fit */
export function seqnoBytes (seqno: bigint): Uint8Array | undefined {
  if (seqno < 0n || seqno >= 1n << 64n) return undefined
  const out = new Uint8Array(SEQNO_BYTES)
  new DataView(out.buffer).setBigUint64(0, seqno)
  return out
}

/**
 * The entry of a signed gossip message this node accepted (its validator's
 * view of it), or undefined when the message lacks a signed field
 */
export function entryOf (message: { from: PeerId, data: Uint8Array, sequenceNumber?: bigint, signature?: Uint8Array, key?: PublicKey }): SignedEntry | undefined {
  if (message.sequenceNumber == null || message.signature == null) return undefined
  const seqno = seqnoBytes(message.sequenceNumber)
  if (seqno == null) return undefined
  const embedded = message.from.publicKey != null
  if (!embedded && message.key == null) return undefined
  return {
    from: message.from.toMultihash().bytes,
    data: message.data,
    seqno,
    sig: message.signature,
    ...(embedded ? {} : { key: publicKeyToProtobuf(message.key as PublicKey) })
  }
}

const isBytes = (x: unknown, max: number): x is Uint8Array => x instanceof Uint8Array && x.byteLength <= max

/** Check the shape of a received entry (a DAG-CBOR map) */
export function parseEntry (value: unknown): SignedEntry {
  if (value == null || typeof value !== 'object' || Array.isArray(value) || value instanceof Uint8Array) throw new InvalidSnapshotError('an index entry must be a map')
  const { from, data, seqno, sig, key } = value as Record<string, unknown>
  if (!isBytes(from, MAX_FROM_BYTES) || from.byteLength === 0) throw new InvalidSnapshotError('entry.from must be the bytes of a peer id')
  // the size bound of the data is the caller's (SNAPSHOT_TOO_LARGE)
  if (!isBytes(data, Infinity)) throw new InvalidSnapshotError('entry.data must be bytes')
  if (!isBytes(seqno, SEQNO_BYTES) || seqno.byteLength !== SEQNO_BYTES) throw new InvalidSnapshotError('entry.seqno must be 8 bytes')
  if (!isBytes(sig, MAX_SIG_BYTES) || sig.byteLength === 0) throw new InvalidSnapshotError('entry.sig must be the bytes of a signature')
  if (key !== undefined && !isBytes(key, MAX_KEY_BYTES)) throw new InvalidSnapshotError('entry.key must be the bytes of a public key')
  return { from, data, seqno, sig, ...(key !== undefined ? { key: key as Uint8Array } : {}) }
}

/**
 * Verify an entry's signature for `topic`; resolves with the announcer.
 * Throws `InvalidSignatureError` when the key does not belong to `from` or
 * the signature does not verify.
 */
export async function verifyEntry (entry: SignedEntry, topic: string): Promise<PeerId> {
  let peer: PeerId
  try {
    peer = peerIdFromMultihash(Digest.decode(entry.from))
  } catch (err: any) {
    throw new InvalidSnapshotError(`entry.from is not a peer id: ${err?.message ?? err}`)
  }
  let key: PublicKey | undefined = peer.publicKey
  if (entry.key != null) {
    try {
      key = publicKeyFromProtobuf(entry.key)
    } catch (err: any) {
      throw new InvalidSignatureError(`entry.key is not a public key: ${err?.message ?? err}`)
    }
    if (!peer.equals(peerIdFromMultihash(key.toMultihash()))) throw new InvalidSignatureError(`entry.key is not the key of ${peer.toString()}`)
  }
  if (key == null) throw new InvalidSignatureError(`no public key for ${peer.toString()}`)
  let ok: boolean
  try {
    ok = await key.verify(signedBytes(entry, topic), entry.sig)
  } catch {
    // a signature of the wrong length makes some key types throw: not valid either way
    ok = false
  }
  if (!ok) throw new InvalidSignatureError(`the signature of ${peer.toString()}'s snapshot does not verify on ${topic}`)
  return peer
}
