/**
 * Who may ask a node for its snapshot (`spec/management.md`, "Management
 * protocol" 3): a delegation chain rooted at the node's operator, whose
 * leaf is issued by the calling peer (the did:key of its peer key, which
 * Noise authenticates) to this node, granting `ioa.manage.<method>`.
 * Signatures are verified once per token (the verification cache).
 */
import { PrincipalMismatchError, UnauthorizedError, capabilityFor, verifyChain } from '@ioa/collab'
import { parseToken } from '@ioa/collab/wire'
import { BadManagementRequestError, NoOperatorError, NotOperatorError, WrongAudienceError } from '../errors.js'
import type { Token, VerificationCache, VerifiedChain } from '@ioa/collab'
import type { Did } from '@ioa/interconnect'

/** The capability of a management method: `ioa.manage.snapshot`, `ioa.manage.watch` (`ioa.manage.*` grants both) */
export function manageCapability (method: string): string {
  return `ioa.manage.${method}`
}

/** Most tokens in a request's chain */
export const MAX_CHAIN_TOKENS = 8

export interface AuthorizeOptions {
  /** The node's operator; without one every request is refused (`NO_OPERATOR`) */
  operator?: Did
  /** The node's did (the leaf's audience) */
  node: Did
  /** The calling peer's did (the leaf's issuer) */
  caller?: Did
  /** The method asked for */
  method: string
  clockSkew?: number
  isRevoked?: (cid: string, issuers: readonly Did[]) => boolean | Promise<boolean>
  verificationCache?: VerificationCache
  signal?: AbortSignal
}

/** The tokens of a request's `proofs` field, leaf first; throws `BAD_REQUEST` / collab's token errors */
export function parseProofs (value: unknown): Token[] {
  if (value === undefined) return []
  if (!Array.isArray(value) || value.length > MAX_CHAIN_TOKENS) {
    throw new BadManagementRequestError(`proofs must be a list of at most ${MAX_CHAIN_TOKENS} tokens`)
  }
  return value.map(t => parseToken(t))
}

/**
 * Check a caller's chain for `method`; returns the verified chain or throws
 * `NO_OPERATOR`, `UNAUTHORIZED` (no chain, or no `ioa.manage.<method>`),
 * `WRONG_AUDIENCE`, `PRINCIPAL_MISMATCH` (the leaf is not the caller's),
 * `NOT_OPERATOR`, or the chain's own error (`ESCALATION`, `TOKEN_EXPIRED`,
 * `INVALID_SIGNATURE`, `REVOKED`…)
 */
export async function authorize (proofs: Token[], options: AuthorizeOptions): Promise<VerifiedChain> {
  if (options.operator == null) throw new NoOperatorError()
  const [leaf, ...pool] = proofs
  if (leaf == null) throw new UnauthorizedError('A management request needs a delegation chain from the operator')
  if (leaf.payload.aud !== options.node) {
    throw new WrongAudienceError(`The leaf token is addressed to ${leaf.payload.aud}, not to this node ${options.node}`)
  }
  if (options.caller == null || leaf.payload.iss !== options.caller) {
    throw new PrincipalMismatchError(`The leaf token is issued by ${leaf.payload.iss}, not by the calling peer ${options.caller ?? '(not an Ed25519 peer)'}`)
  }
  // a chain rooted at the operator holds a token the operator issued: without one, no signature is worth verifying
  if (!proofs.some(t => t.payload.iss === options.operator)) {
    throw new NotOperatorError(`No token of the chain is issued by the operator ${options.operator}`)
  }
  const chain = await verifyChain(leaf, pool, {
    clockSkew: options.clockSkew,
    isRevoked: options.isRevoked,
    verificationCache: options.verificationCache,
    signal: options.signal
  })
  if (chain.root !== options.operator) {
    throw new NotOperatorError(`The chain is rooted at ${chain.root}, not at the operator ${options.operator}`)
  }
  const skill = manageCapability(options.method)
  if (capabilityFor(chain, skill) == null) {
    throw new UnauthorizedError(`The chain grants ${chain.capabilities.map(c => c.skill).join(', ')}, not ${skill}`)
  }
  return chain
}
