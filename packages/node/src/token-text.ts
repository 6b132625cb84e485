/**
 * Delegation tokens as text, shared by the command line (`--proof`) and the
 * config file (`management.proofs`, `management.proofsFile`): one token is
 * the base64url (no padding) of its DAG-CBOR encoding (`encodeToken`); a
 * file or argument may hold several, separated by white space.
 */
import { InvalidTokenError } from '@ioa/collab'
import { TOKEN_LIMITS, decodeToken } from '@ioa/collab/wire'
import type { Token } from '@ioa/collab'

const BASE64URL = /^[A-Za-z0-9_-]+$/
/** Characters of the base64url of the largest token */
const MAX_TOKEN_CHARS = Math.ceil(TOKEN_LIMITS.maxTokenBytes * 4 / 3)

/** Decode one token string; throws `InvalidTokenError` (or the token's own error, with its code) */
export function decodeTokenText (text: string): Token {
  const s = text.trim()
  if (s.length === 0 || s.length > MAX_TOKEN_CHARS || !BASE64URL.test(s)) {
    throw new InvalidTokenError(`not a token (base64url of a DAG-CBOR token, at most ${TOKEN_LIMITS.maxTokenBytes} bytes)`)
  }
  return decodeToken(new Uint8Array(Buffer.from(s, 'base64url')))
}

/** The white-space separated words of a text of tokens */
export function tokenWords (text: string): string[] {
  return text.split(/\s+/).filter(w => w !== '')
}
