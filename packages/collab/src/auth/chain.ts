/**
 * Attenuation (which capability covers which) and the verification of a
 * delegation chain: signatures (each verified once per verification cache,
 * see verification-cache.ts), principal alignment, attenuation, depth, time, revocation
 * and the root principal (spec/collab-delegation.md)
 */
import * as dagCbor from '@ipld/dag-cbor'
import { equals as bytesEqual } from 'uint8arrays/equals'
import {
  ChainTooDeepError, EscalationError, InvalidSignatureError, InvalidTokenError, PrincipalMismatchError,
  RevokedError, TokenExpiredError, TokenNotYetValidError
} from '../errors.js'
import {
  DEFAULT_CLOCK_SKEW, DEFAULT_MAX_DEPTH, TOKEN_LIMITS, checkToken, cidOfBytes, withPrefix
} from './delegation.js'
import { defaultVerificationCache, tokenMemoOf } from './verification-cache.js'
import type { Capability, CheckedToken, Token, VerifiedChain, VerifyChainOptions } from './delegation.js'
import type { Did } from '@ioa/interconnect'

// ---------------------------------------------------------------------------
// attenuation

/**
 * Does skill pattern `parent` cover `child` (a name or a pattern)? `*` covers
 * everything; `travel.*` covers `travel`, `travel.x.y` and `travel.x.*`; a
 * name covers only itself.
 */
export function skillCovers (parent: string, child: string): boolean {
  if (parent === '*') return true
  if (child === '*') return false
  if (parent.endsWith('.*')) {
    const prefix = parent.slice(0, -2)
    const name = child.endsWith('.*') ? child.slice(0, -2) : child
    return name === prefix || name.startsWith(prefix + '.')
  }
  return parent === child
}

function sameValue (a: unknown, b: unknown): boolean {
  if (a === b) return true
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') return false
  try {
    return bytesEqual(dagCbor.encode(a), dagCbor.encode(b))
  } catch {
    // a value DAG-CBOR cannot encode equals nothing
    return false
  }
}

/** Is the child's value for constraint `key` at least as tight as the parent's? */
function tighter (key: string, parent: unknown, child: unknown): boolean {
  if (key.startsWith('max')) {
    return typeof parent === 'number' && typeof child === 'number' && child <= parent
  }
  if (key.startsWith('min')) {
    return typeof parent === 'number' && typeof child === 'number' && child >= parent
  }
  if (Array.isArray(parent)) {
    return Array.isArray(child) && child.every(c => parent.some(p => sameValue(p, c)))
  }
  return sameValue(parent, child)
}

/**
 * Does capability `parent` cover `child`? The child's skill pattern lies
 * within the parent's, and for every parent constraint the child has the same
 * key with a value at least as tight: `max…` a number ≤, `min…` a number ≥, a
 * list a subset, anything else equal. The child may add constraints.
 */
export function capabilityCovers (parent: Capability, child: Capability): boolean {
  if (!skillCovers(parent.skill, child.skill)) return false
  const pc = parent.constraints ?? {}
  const cc = child.constraints ?? {}
  for (const key of Object.keys(pc)) {
    if (!Object.prototype.hasOwnProperty.call(cc, key)) return false
    if (!tighter(key, pc[key], cc[key])) return false
  }
  return true
}

function shown (value: unknown): string {
  try {
    const text = JSON.stringify(value)
    return text.length > 80 ? `${text.slice(0, 77)}...` : text
  } catch {
    // not JSON (a value no token can hold): say what it is
    return typeof value
  }
}

/**
 * Why capability `parent` does not cover `child`, in words that name the
 * skill or the constraint (and both values); undefined when it covers it
 */
export function whyNotCovered (parent: Capability, child: Capability): string | undefined {
  if (!skillCovers(parent.skill, child.skill)) return `skill ${child.skill} is not within ${parent.skill}`
  const pc = parent.constraints ?? {}
  const cc = child.constraints ?? {}
  for (const key of Object.keys(pc)) {
    if (!Object.prototype.hasOwnProperty.call(cc, key)) return `constraint ${key} (${shown(pc[key])} in the proof) is dropped`
    if (tighter(key, pc[key], cc[key])) continue
    if (key.startsWith('max')) return `constraint ${key} is ${shown(cc[key])}, the proof allows at most ${shown(pc[key])}`
    if (key.startsWith('min')) return `constraint ${key} is ${shown(cc[key])}, the proof requires at least ${shown(pc[key])}`
    if (Array.isArray(pc[key])) return `constraint ${key} is ${shown(cc[key])}, not within the proof's ${shown(pc[key])}`
    return `constraint ${key} is ${shown(cc[key])}, the proof says ${shown(pc[key])}`
  }
  return undefined
}

/**
 * The escalation error of a capability its proofs' capabilities do not
 * cover, naming the constraint exceeded (of the proof capability with the
 * same skill pattern, or else the first whose pattern covers the skill)
 */
function escalation (c: Capability, proofCaps: Capability[], where: string): EscalationError {
  const near = proofCaps.find(pc => pc.skill === c.skill) ?? proofCaps.find(pc => skillCovers(pc.skill, c.skill))
  const why = near != null
    ? whyNotCovered(near, c) ?? 'not covered'
    : `skill ${c.skill} is not within ${proofCaps.map(pc => pc.skill).join(', ')}`
  return new EscalationError(`Capability ${c.skill} of ${where} escalates its proof: ${why}`)
}

/**
 * The checks of one link of a chain, between a token and one of its direct
 * proofs (`token` and `proof` name them in errors): the proof is addressed
 * to the token's issuer, the token is valid within the proof's period
 */
function checkLink (p: Token['payload'], token: string, pp: Token['payload'], proof: string): void {
  const upper = (s: string): string => s.charAt(0).toUpperCase() + s.slice(1)
  if (pp.aud !== p.iss) {
    throw new PrincipalMismatchError(`${upper(proof)} is addressed to ${pp.aud}, not to ${p.iss} who issued ${token}`)
  }
  if (p.exp > pp.exp) {
    throw new EscalationError(`${upper(token)} expires after ${proof} (${new Date(p.exp).toISOString()} > ${new Date(pp.exp).toISOString()})`)
  }
  if ((p.nbf ?? 0) < (pp.nbf ?? 0)) throw new EscalationError(`${upper(token)} starts before ${proof}`)
}

/** Every capability of a token is covered by one of its proofs' capabilities */
function checkAttenuation (p: Token['payload'], token: string, proofCaps: Capability[]): void {
  for (const c of p.cap) {
    if (!proofCaps.some(pc => capabilityCovers(pc, c))) throw escalation(c, proofCaps, token)
  }
}

/**
 * @internal The issue-time check of a token against its direct proofs
 * (`delegate()`): principal alignment, validity period and attenuation.
 * The proofs' own chains are not verified here.
 */
export function checkAgainstProofs (payload: Token['payload'], proofs: Token[]): void {
  if (proofs.length === 0) return
  proofs.forEach((pr, i) => { checkLink(payload, 'the new token', pr.payload, `its proof ${i}`) })
  checkAttenuation(payload, 'the new token', proofs.flatMap(pr => pr.payload.cap))
}

/** The first capability of the leaf (in token order) that covers `skill` */
export function capabilityFor (chain: VerifiedChain, skill: string): Capability | undefined {
  if (typeof skill !== 'string') return undefined
  return chain.capabilities.find(c => skillCovers(c.skill, skill))
}

// ---------------------------------------------------------------------------
// chain verification

interface VerifiedNode {
  token: Token
  root: Did
  /** tokens from this one to the farthest root, both counted */
  height: number
  /** issuers of this token and of every token it is proven by */
  issuers: Set<Did>
  proofs: Array<{ cid: string, node: VerifiedNode }>
}

function short (cid: string): string {
  return cid.length > 16 ? `${cid.slice(0, 8)}…${cid.slice(-6)}` : cid
}

/**
 * Verify a delegation chain from `leaf` up to its root token(s), with the
 * parent tokens taken from `pool` (found by CID; order does not matter; extra
 * tokens are ignored). Every token reachable through `prf` is checked:
 * structure, signature, validity period, principal alignment, attenuation,
 * depth, revocation and (with `roots`) the root issuer. Throws the typed error
 * of the first failing check (`spec/collab-delegation.md`, section 5).
 */
export async function verifyChain (leaf: Token, pool: Token[] = [], options: VerifyChainOptions = {}): Promise<VerifiedChain> {
  options.signal?.throwIfAborted()
  chainSettings(options)
  if (!Array.isArray(pool)) throw new InvalidTokenError('The proof pool must be a list of tokens')
  if (pool.length > TOKEN_LIMITS.maxPool) {
    throw new InvalidTokenError(`More than ${TOKEN_LIMITS.maxPool} tokens in the proof pool`)
  }
  const memo = options.verificationCache != null ? tokenMemoOf(options.verificationCache) : undefined
  const leafChecked = checkToken(leaf, memo)
  return verifyCheckedChain(leafChecked, pool.map(t => checkToken(t, memo)), options)
}

/** The checked `now`, clock skew and depth limit of a verification */
function chainSettings (options: VerifyChainOptions): { now: number, skew: number, maxDepth: number } {
  const now = options.now ?? Date.now()
  const skew = options.clockSkew ?? DEFAULT_CLOCK_SKEW
  const maxDepth = options.maxDepth ?? DEFAULT_MAX_DEPTH
  if (!Number.isFinite(now)) throw new TypeError('now must be a finite number')
  if (!Number.isFinite(skew) || skew < 0) throw new TypeError('clockSkew must be a non-negative number')
  if (!Number.isInteger(maxDepth) || maxDepth < 1 || maxDepth > TOKEN_LIMITS.maxDepthLimit) {
    throw new TypeError(`maxDepth must be an integer from 1 to ${TOKEN_LIMITS.maxDepthLimit}`)
  }
  return { now, skew, maxDepth }
}

/** The CID string of a checked token (hashed once for a token of a memo) */
async function cidOf (checked: CheckedToken): Promise<string> {
  const known = checked.known
  if (known?.cid != null) return known.cid
  const cid = (await cidOfBytes(checked.bytes)).toString()
  if (known != null) known.cid = cid
  return cid
}

/** @internal `verifyChain` of tokens already validated by `checkToken` */
export async function verifyCheckedChain (leafChecked: CheckedToken, poolChecked: CheckedToken[], options: VerifyChainOptions = {}): Promise<VerifiedChain> {
  const signal = options.signal
  signal?.throwIfAborted()
  const { now, skew, maxDepth } = chainSettings(options)
  const roots = options.roots != null ? new Set(options.roots) : undefined
  const isRevoked = options.isRevoked
  // tokens whose signature verified, by CID (a CID is the hash of the token's
  // bytes, signature included: the same CID is the same signed token); only
  // the signature check is skipped for them, every other check is made on
  // every verification
  const cache = options.verificationCache ?? defaultVerificationCache

  if (poolChecked.length > TOKEN_LIMITS.maxPool) {
    throw new InvalidTokenError(`More than ${TOKEN_LIMITS.maxPool} tokens in the proof pool`)
  }
  const leafCid = await cidOf(leafChecked)
  const byCid = new Map<string, Token>()
  /** payload bytes of every token, for its signing bytes */
  const bodies = new Map<Token, Uint8Array>([[leafChecked.token, leafChecked.body]])
  for (const checked of poolChecked) {
    byCid.set(await cidOf(checked), checked.token)
    bodies.set(checked.token, checked.body)
  }

  const done = new Map<string, VerifiedNode>()
  const active = new Set<string>()

  const tooDeep = (): Error => new ChainTooDeepError(`Delegation chain is longer than ${maxDepth} tokens`)

  const visit = async (cid: string, token: Token, depth: number): Promise<VerifiedNode> => {
    signal?.throwIfAborted()
    if (depth > maxDepth) throw tooDeep()
    const known = done.get(cid)
    if (known != null) {
      if (depth + known.height - 1 > maxDepth) throw tooDeep()
      return known
    }
    // content addressing makes a cycle impossible short of a hash collision;
    // refuse one anyway rather than loop
    if (active.has(cid)) throw new InvalidTokenError(`Proof cycle through ${short(cid)}`)
    active.add(cid)

    const p = token.payload
    if (!cache.hasSignature(cid)) {
      const body = bodies.get(token)
      if (!await cache.verifySignature(p.iss, withPrefix(body ?? dagCbor.encode(p)), token.sig)) {
        throw new InvalidSignatureError(`Signature of token ${short(cid)} does not verify for ${p.iss}`)
      }
      // only when the bytes verified are those the CID was computed from
      if (body != null) cache.rememberSignature(cid)
    }
    if (p.exp + skew < now) {
      throw new TokenExpiredError(`Token ${short(cid)} expired at ${new Date(p.exp).toISOString()}`)
    }
    if (p.nbf != null && p.nbf - skew > now) {
      throw new TokenNotYetValidError(`Token ${short(cid)} is not valid before ${new Date(p.nbf).toISOString()}`)
    }

    const proofs: VerifiedNode['proofs'] = []
    for (const parentCid of p.prf) {
      const parent = byCid.get(parentCid)
      if (parent == null) throw new InvalidTokenError(`Proof ${short(parentCid)} of token ${short(cid)} is missing`)
      checkLink(p, `token ${short(cid)}`, parent.payload, `proof ${short(parentCid)}`)
      proofs.push({ cid: parentCid, node: await visit(parentCid, parent, depth + 1) })
    }

    let root: Did = p.iss
    let height = 1
    const issuers = new Set<Did>([p.iss])
    if (proofs.length === 0) {
      if (roots != null && !roots.has(p.iss)) {
        throw new PrincipalMismatchError(`Chain is rooted at ${p.iss}, which is not a trusted root`)
      }
    } else {
      root = proofs[0].node.root
      for (const { cid: parentCid, node } of proofs) {
        if (node.root !== root) {
          throw new PrincipalMismatchError(`Proofs of token ${short(cid)} come from different roots (${root}, ${node.root}); see ${short(parentCid)}`)
        }
        height = Math.max(height, node.height + 1)
        for (const i of node.issuers) issuers.add(i)
      }
      checkAttenuation(p, `token ${short(cid)}`, proofs.flatMap(({ node }) => node.token.payload.cap))
    }

    if (isRevoked != null && await isRevoked(cid, [...issuers])) {
      throw new RevokedError(`Token ${short(cid)} is revoked`)
    }

    active.delete(cid)
    const node: VerifiedNode = { token, root, height, issuers, proofs }
    done.set(cid, node)
    return node
  }

  const leafNode = await visit(leafCid, leafChecked.token, 1)

  // the path: from the leaf, at each token follow the first proof (in prf
  // order) that covers the capability followed so far, starting with cap[0]
  const path: Token[] = [leafNode.token]
  const cids: string[] = [leafCid]
  let node = leafNode
  let cap = leafNode.token.payload.cap[0]
  while (node.proofs.length > 0) {
    let next: { cid: string, node: VerifiedNode, cap: Capability } | undefined
    for (const pr of node.proofs) {
      const pc = pr.node.token.payload.cap.find(c => capabilityCovers(c, cap))
      if (pc != null) {
        next = { ...pr, cap: pc }
        break
      }
    }
    if (next == null) break // unreachable: attenuation was checked
    path.push(next.node.token)
    cids.push(next.cid)
    node = next.node
    cap = next.cap
  }

  let expiresAt = leafNode.token.payload.exp
  for (const n of done.values()) expiresAt = Math.min(expiresAt, n.token.payload.exp)

  return {
    root: leafNode.root,
    audience: leafNode.token.payload.aud,
    capabilities: leafNode.token.payload.cap,
    expiresAt,
    path,
    cids
  }
}
