/**
 * Ed25519 with parsed keys kept. `@libp2p/crypto` imports a key (JWK to a
 * native key object) on every `sign` and `verify`, about a third of the cost
 * of a verification; on Node.js the native key objects are made once per key
 * here and reused. Elsewhere (or until `node:crypto` has loaded) the calls go
 * to `@libp2p/crypto` as before. Signatures and results are the same either
 * way (Ed25519 is deterministic).
 */
import type { Identity } from '@ioa/interconnect'
import type { PrivateKey, PublicKey } from '@libp2p/interface'
import type * as NodeCryptoModule from 'node:crypto'
import type { KeyObject } from 'node:crypto'

type NodeCrypto = typeof NodeCryptoModule

let nodeCrypto: NodeCrypto | null | undefined

/** @internal `node:crypto` once it has loaded on Node.js; undefined elsewhere (and until then): callers take their portable path */
export function nativeCrypto (): NodeCrypto | undefined {
  if (nodeCrypto === undefined) {
    nodeCrypto = null
    // not in a browser: the first calls take the portable path meanwhile
    if (typeof process !== 'undefined' && process.versions?.node != null) {
      // (no node:crypto after all: the portable path stays, which is correct, only slower)
      import('node:crypto').then(m => { nodeCrypto = m }, () => {})
    }
  }
  return nodeCrypto ?? undefined
}

/**
 * Native private key objects live as long as their key (a WeakMap); native
 * public key objects are kept with the parsed key of their DID, in the
 * `VerificationCache` of whoever verifies (verification-cache.ts)
 */
const privateKeys = new WeakMap<PrivateKey, KeyObject>()

/** A parsed public key, with its native key object once one was made */
export interface Ed25519Key {
  key: PublicKey
  native?: KeyObject
}

function b64url (bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64url')
}

/**
 * Verify an Ed25519 signature with a public key (its native key object is
 * made once and kept in `entry`); false for a bad signature or key, never throws
 */
export async function verifyEd25519 (entry: Ed25519Key, data: Uint8Array, sig: Uint8Array): Promise<boolean> {
  const c = nativeCrypto()
  const key = entry.key
  if (c == null || key.type !== 'Ed25519' || key.raw.byteLength !== 32 || sig.byteLength !== 64) {
    try {
      return await key.verify(data, sig)
    } catch {
      // a key or signature the library refuses is a bad signature (the contract: never throws)
      return false
    }
  }
  try {
    entry.native ??= c.createPublicKey({ format: 'jwk', key: { crv: 'Ed25519', x: b64url(key.raw), kty: 'OKP' } })
    return c.verify(null, data, entry.native, sig)
  } catch {
    // a key or signature node:crypto refuses is a bad signature (the contract: never throws)
    return false
  }
}

/** Sign with an identity: with its kept native key when it is a plain Ed25519 key identity, else by `identity.sign` */
export async function signWith (identity: Identity, data: Uint8Array): Promise<Uint8Array> {
  const c = nativeCrypto()
  const priv = (identity as { privateKey?: PrivateKey }).privateKey
  if (c == null || priv == null || priv.type !== 'Ed25519' || priv.raw?.byteLength !== 64 ||
    !priv.publicKey.equals(identity.publicKey)) {
    return identity.sign(data)
  }
  let obj = privateKeys.get(priv)
  if (obj == null) {
    const raw = priv.raw
    obj = c.createPrivateKey({
      format: 'jwk',
      key: { crv: 'Ed25519', d: b64url(raw.subarray(0, 32)), x: b64url(raw.subarray(32)), kty: 'OKP' }
    })
    privateKeys.set(priv, obj)
  }
  return new Uint8Array(c.sign(null, data, obj))
}
