/**
 * `ioa delegate`: sign a delegation token from a key file to a did, checked
 * against its proofs (the chain must verify: attenuation, audiences, expiry).
 */
import { resolve } from 'node:path'
import { parseDid, parseDuration } from '../args.js'
import { UsageError, asUsage } from '../errors.js'
import type { CommandSpec } from '../args.js'
import type { Capability, Token } from '@ioa/collab'

/** Tokens are bounded (TOKEN_LIMITS of @ioa/collab/wire, checked again when signing): flags are checked against them first */
const MAX_SKILLS = 16
const MAX_CONSTRAINTS = 32
const MAX_CONSTRAINT_KEY = 64

/** Lifetime of a token when --expires is not given (capped by its proofs') */
const DEFAULT_EXPIRY = 3_600_000

export const delegateCommand: CommandSpec = {
  name: 'delegate',
  summary: 'sign a delegation token (skills, constraints, expiry) for another did',
  usage: ['delegate --key <issuer key file> --to <did> --skill <pattern>[{key=value,...}]... [--constraint <key=value>]... [--expires <duration>] [--proof <token|@file>]... [--out <file>] [--json]'],
  description: [
    'Grants --to the skills (a name like payment.pay, a prefix pattern like travel.*, or *), each',
    'narrowed by the --constraint ones and by its own, written after it in braces:',
    '--skill \'shop.order{maxAmount=500,currency=EUR}\' (a skill\'s own value of a key replaces the',
    '--constraint one; numbers and true/false are parsed; [..] and {..} as JSON), until',
    '--expires (default 1h, never after a proof). With --proof, the token is a re-delegation: pass the',
    'token(s) addressed to the issuer, and their own proofs up to the root, so the whole chain can be',
    'checked now. Prints the token: base64url of its DAG-CBOR encoding.'
  ].join('\n'),
  options: {
    key: { type: 'string', value: '<file>', description: 'the issuer\'s key file (ioa key new)' },
    to: { type: 'string', value: '<did>', description: 'the audience: who receives the authority' },
    skill: { type: 'string', multiple: true, value: '<pattern>[{k=v,…}]', description: 'a skill name or pattern granted, with its own constraints in braces (repeatable)' },
    constraint: { type: 'string', multiple: true, value: '<key=value>', description: 'a constraint on every skill, e.g. maxAmount=200 (repeatable)' },
    expires: { type: 'string', value: '<duration>', description: 'lifetime, e.g. 30m, 2h, 7d (default 1h, capped by the proofs)' },
    proof: { type: 'string', multiple: true, value: '<token|@file>', description: 'a parent token (and its own proofs), or a file of tokens (repeatable)' },
    out: { type: 'string', value: '<file>', description: 'also write the token to this file (refuses to overwrite)' }
  },
  examples: [
    'ioa delegate --key alice.key --to did:key:z6Mk… --skill travel.* --constraint maxAmount=200 --expires 2h --out car.token',
    'ioa delegate --key car.key --to did:key:z6Mk… --skill travel.hotel.booking --constraint maxAmount=150 --proof @car.token',
    'ioa delegate --key alice.key --to did:key:z6Mk… --skill \'shop.order{maxAmount=500}\' --skill shop.catalog'
  ],
  async run (args, ctx) {
    const [{ delegate, isSkillPattern, verifyChain }, { TOKEN_LIMITS }, { readKeyFile, writeNewFile }, { readTokens, tokenJson }] =
      await Promise.all([import('@ioa/collab'), import('@ioa/collab/wire'), import('../keyfile.js'), import('../tokens.js')])
    const key = await readKeyFile(args.required('key'), ctx.cwd)
    const audience = await parseDid(args.required('to'), '--to')
    const skills = args.strings('skill').map(parseSkill)
    if (skills.length === 0) throw new UsageError('delegate: missing required option --skill', '--skill')
    if (skills.length > MAX_SKILLS) throw new UsageError(`--skill: at most ${MAX_SKILLS} skills`, '--skill')
    for (const { skill: s } of skills) {
      if (!isSkillPattern(s)) throw new UsageError(`--skill: "${String(s).slice(0, 80)}" is not a skill name or pattern (e.g. travel.hotel.booking, travel.*, *)`, '--skill')
    }
    const constraints = parseConstraints(args.strings('constraint'))
    const proofs = await readTokens(args.strings('proof'), '--proof', ctx.cwd)

    // the proofs addressed to the issuer are the parents; the rest complete the chain above them
    const parents = proofs.filter(t => t.payload.aud === key.identity.did)
    if (proofs.length > 0 && parents.length === 0) {
      throw new UsageError(`--proof: no token is addressed to the issuer ${key.identity.did}`, '--proof', 'PRINCIPAL_MISMATCH')
    }
    if (parents.length > TOKEN_LIMITS.maxProofs) throw new UsageError(`--proof: at most ${TOKEN_LIMITS.maxProofs} parent tokens`, '--proof')
    const now = Date.now()
    const expiresText = args.string('expires')
    const expiresAt = expiresText != null
      ? now + parseDuration(expiresText, '--expires')
      : Math.min(now + DEFAULT_EXPIRY, ...parents.map(p => p.payload.exp))

    const capabilities: Capability[] = skills.map(({ skill, own }) => {
      const all = { ...constraints, ...own }
      if (Object.keys(all).length > MAX_CONSTRAINTS) throw new UsageError(`--skill ${skill}: at most ${MAX_CONSTRAINTS} constraints`, '--skill')
      return { skill, ...(Object.keys(all).length > 0 ? { constraints: all } : {}) }
    })
    let token: Token
    try {
      token = await delegate(key.identity, { audience, capabilities, expiresAt, proofs: parents }, { signal: ctx.signal })
      await verifyChain(token, proofs, { signal: ctx.signal })
    } catch (err) {
      asUsage(err, proofs.length > 0 ? '--proof' : undefined)
    }
    const json = await tokenJson(token)
    const outPath = args.string('out')
    if (outPath != null) await writeNewFile(resolve(ctx.cwd, outPath), json.token + '\n', 0o644, '--out')
    if (ctx.out.json) ctx.out.emit(json)
    else ctx.out.print(json.token)
    if (outPath != null) ctx.out.progress(`token ${json.cid} written to ${resolve(ctx.cwd, outPath)}`)
    return 0
  }
}

/**
 * A `--skill` value: the pattern and its own constraints, `shop.order{maxAmount=500,currency=EUR}`
 * (pairs separated by commas outside brackets and quotes)
 */
export function parseSkill (text: string): { skill: string, own: Record<string, unknown> } {
  const open = text.indexOf('{')
  if (open < 0) return { skill: text, own: {} }
  if (!text.endsWith('}')) throw new UsageError(`--skill: "${text.slice(0, 80)}": the constraints of a skill end with "}"`, '--skill')
  const pairs: string[] = []
  let depth = 0
  let quoted = false
  let start = open + 1
  for (let i = start; i < text.length - 1; i++) {
    const c = text[i]
    if (c === '"' && text[i - 1] !== '\\') quoted = !quoted
    else if (!quoted && (c === '[' || c === '{')) depth++
    else if (!quoted && (c === ']' || c === '}')) depth--
    else if (!quoted && depth === 0 && c === ',') {
      pairs.push(text.slice(start, i))
      start = i + 1
    }
  }
  const last = text.slice(start, -1)
  if (last !== '' || pairs.length > 0) pairs.push(last)
  return { skill: text.slice(0, open), own: parseConstraints(pairs.map(p => p.trim()), `--skill ${text.slice(0, open)}`) }
}

/** `key=value` pairs: numbers, true/false and JSON lists/maps parsed, anything else a string */
export function parseConstraints (pairs: string[], flag = '--constraint'): Record<string, unknown> {
  if (pairs.length > MAX_CONSTRAINTS) throw new UsageError(`${flag}: at most ${MAX_CONSTRAINTS}`, flag.split(' ')[0])
  const out: Record<string, unknown> = {}
  for (const pair of pairs) {
    const i = pair.indexOf('=')
    const name = i > 0 ? pair.slice(0, i) : ''
    const option = flag.split(' ')[0]
    if (name === '' || name.length > MAX_CONSTRAINT_KEY) {
      throw new UsageError(`${flag}: expected key=value with a key of 1-${MAX_CONSTRAINT_KEY} characters, got "${pair.slice(0, 80)}"`, option)
    }
    if (Object.prototype.hasOwnProperty.call(out, name)) throw new UsageError(`${flag}: ${name} is given twice`, option)
    out[name] = constraintValue(pair.slice(i + 1), flag)
  }
  return out
}

function constraintValue (text: string, flag: string): unknown {
  if (/^-?\d+(\.\d+)?([eE][-+]?\d+)?$/.test(text)) return Number(text)
  if (text === 'true') return true
  if (text === 'false') return false
  if (text.startsWith('[') || text.startsWith('{')) {
    try {
      return JSON.parse(text)
    } catch (err: any) {
      throw new UsageError(`${flag}: ${text.slice(0, 60)} is not valid JSON (${String(err?.message ?? err).slice(0, 80)})`, flag.split(' ')[0])
    }
  }
  return text
}
