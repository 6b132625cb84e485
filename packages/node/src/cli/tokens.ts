/**
 * Delegation tokens on the command line: one token is the base64url (no
 * padding) of its DAG-CBOR encoding (`encodeToken`). A `@file` argument may
 * hold several, separated by white space.
 */
import { tokenCid } from '@ioa/collab'
import { TOKEN_LIMITS, encodeToken } from '@ioa/collab/wire'
import { decodeTokenText, tokenWords } from '../token-text.js'
import { readArgument } from './args.js'
import { UsageError, oneLine } from './errors.js'
import type { Token, TokenPayload } from '@ioa/collab'

export function tokenToString (token: Token): string {
  return Buffer.from(encodeToken(token)).toString('base64url')
}

/** Decode one token string; throws a usage error with the token's error code */
export function tokenFromString (text: string, flag: string): Token {
  try {
    return decodeTokenText(text)
  } catch (err: any) {
    throw new UsageError(`${flag}: ${oneLine(String(err?.message ?? err))}`, flag, typeof err?.code === 'string' ? err.code : 'INVALID_TOKEN')
  }
}

/** The tokens of `--proof`-like arguments: token strings, or `@file`s of white-space separated tokens */
export async function readTokens (values: string[], flag: string, cwd: string): Promise<Token[]> {
  const out: Token[] = []
  for (const v of values) {
    const text = await readArgument(v, flag, cwd)
    for (const word of tokenWords(text)) {
      out.push(tokenFromString(word, flag))
      if (out.length > TOKEN_LIMITS.maxPool) throw new UsageError(`${flag}: more than ${TOKEN_LIMITS.maxPool} tokens`, flag)
    }
  }
  return out
}

/** Exactly one token from a `--token`-like argument */
export async function readToken (value: string, flag: string, cwd: string): Promise<Token> {
  const tokens = await readTokens([value], flag, cwd)
  if (tokens.length !== 1) throw new UsageError(`${flag}: expected one token, got ${tokens.length}`, flag, 'INVALID_TOKEN')
  return tokens[0]
}

/** A token as JSON: its string, CID and payload */
export async function tokenJson (token: Token): Promise<{ token: string, cid: string, payload: TokenPayload }> {
  return { token: tokenToString(token), cid: (await tokenCid(token)).toString(), payload: token.payload }
}
