/**
 * What verifying signatures learns, kept so that it is not learned again:
 * the parsed public key of a DID (with its native key object), the tokens
 * whose signature verified (by CID), and the strings found to be canonical
 * token CIDs. Each entry memoizes a pure function of its key, and only a
 * success is kept: a signature that does not verify, a key that does not
 * parse or a string that is not a CID is worked out again every time.
 *
 * An instance is owned by what verifies: the task service and the
 * orchestrator each make one from their `verificationCache` option, and pass
 * it to `verifyChain` and `verifyEnvelope`. The free functions used without
 * one (`verifyChain` with no `verificationCache`, and the parsing of tokens,
 * revocations and envelopes, which has no owner) use `defaultVerificationCache`:
 * sharing it across the process is sound because every entry is a pure
 * function of its key, and it has the same bounds.
 */
import { didToPublicKey } from '@ioa/interconnect'
import { CID } from 'multiformats/cid'
import { BoundedMemo } from '../bounded-memo.js'
import { positiveInteger } from '../options.js'
import { verifyEd25519 } from './ed25519.js'
import { TokenMemo } from './token-memo.js'
import type { Ed25519Key } from './ed25519.js'
import type { Did } from '@ioa/interconnect'

/** Multicodec of DAG-CBOR: the codec of a token CID */
const DAG_CBOR = 0x71
const SHA2_256 = 0x12

/** Bounds of a `VerificationCache`; each is a count of entries, the oldest dropped first */
export interface VerificationCacheInit {
  /** DIDs whose parsed public key is kept (parsing costs about a tenth of a verification) @default 4096 */
  maxKeys?: number
  /** Tokens whose signature verified, kept by token CID (the hash of the exact signed bytes) @default 4096 */
  maxSignatures?: number
  /** Strings found to be canonical token CIDs @default 4096 */
  maxCids?: number
  /**
   * Tokens checked before, by signature: their encoding and CID, reused when
   * the same token arrives again (see token-memo.ts) @default 4096
   */
  maxTokens?: number
}

/** How many entries a `VerificationCache` holds */
export interface VerificationCacheStats {
  keys: number
  signatures: number
  cids: number
  tokens: number
}

const DEFAULT_MAX = 4096

export class VerificationCache {
  private readonly keys: BoundedMemo<string, Ed25519Key>
  private readonly signatures: BoundedMemo<string, true>
  private readonly cids: BoundedMemo<string, true>
  /** Checked tokens, by signature (`checkToken`; reached through `tokenMemoOf`) */
  private readonly tokens: TokenMemo

  constructor (init: VerificationCacheInit = {}) {
    this.keys = new BoundedMemo(positiveInteger('maxKeys', init.maxKeys ?? DEFAULT_MAX))
    this.signatures = new BoundedMemo(positiveInteger('maxSignatures', init.maxSignatures ?? DEFAULT_MAX))
    this.cids = new BoundedMemo(positiveInteger('maxCids', init.maxCids ?? DEFAULT_MAX))
    this.tokens = new TokenMemo(positiveInteger('maxTokens', init.maxTokens ?? DEFAULT_MAX))
  }

  /** The parsed Ed25519 key a DID names, or undefined when it is not a valid Ed25519 did:key */
  private keyOf (did: unknown): Ed25519Key | undefined {
    if (typeof did !== 'string') return undefined
    let entry = this.keys.get(did)
    if (entry == null) {
      try {
        entry = { key: didToPublicKey(did) }
      } catch {
        // not an Ed25519 did:key: no key (the caller reports the bad issuer or sender)
        return undefined
      }
      this.keys.set(did, entry)
    }
    return entry
  }

  /** Is `value` an Ed25519 did:key (what `isDid` checks)? */
  isEd25519Did (value: unknown): value is Did {
    return this.keyOf(value) != null
  }

  /** Verify an Ed25519 signature by a did:key; false for a bad signature or DID, never throws */
  async verifySignature (did: Did, data: Uint8Array, sig: Uint8Array): Promise<boolean> {
    const entry = this.keyOf(did)
    if (entry == null) return false
    return verifyEd25519(entry, data, sig)
  }

  /** Did the signature of the token with this CID verify here before? */
  hasSignature (tokenCid: string): boolean {
    return this.signatures.has(tokenCid)
  }

  /** The signature of the token with this CID verified, over the bytes the CID was computed from */
  rememberSignature (tokenCid: string): void {
    this.signatures.set(tokenCid, true)
  }

  /** Is `s` a token CID in canonical string form (CIDv1, dag-cbor, sha2-256, base32)? */
  isTokenCid (s: unknown): s is string {
    if (typeof s !== 'string' || s.length > 128) return false
    if (this.cids.has(s)) return true
    let ok: boolean
    try {
      const cid = CID.parse(s)
      ok = cid.version === 1 && cid.code === DAG_CBOR && cid.multihash.code === SHA2_256 &&
        cid.multihash.digest.length === 32 && cid.toString() === s
    } catch {
      // does not parse: not a token CID
      return false
    }
    if (ok) this.cids.set(s, true)
    return ok
  }

  stats (): VerificationCacheStats {
    return { keys: this.keys.size, signatures: this.signatures.size, cids: this.cids.size, tokens: this.tokens.size }
  }
}

/** @internal The token memo of a verification cache (what `checkToken` reuses) */
export function tokenMemoOf (cache: VerificationCache): TokenMemo {
  // (private to the class, so that it is no part of the documented API)
  return cache['tokens']
}

/** The process-wide instance of the free functions (see the top of this file) */
export const defaultVerificationCache = new VerificationCache()

/** The cache of an owner: an instance given, or one made from its bounds */
export function verificationCacheOf (option: VerificationCache | VerificationCacheInit | undefined): VerificationCache {
  return option instanceof VerificationCache ? option : new VerificationCache(option)
}
