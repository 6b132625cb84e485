/**
 * Call-time authorization policy: after the envelope and its delegation chain
 * verify, a policy decides whether this particular call may run now (allow),
 * must not run (deny) or needs the root principal's approval first (approve).
 * Also the signed approval record. Formats: `spec/collab-tasks.md`, sections 3–4.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { domainSeparated, isDid, verifyByDid } from '@ioa/interconnect'
import {
  ApprovalRequiredError, InvalidEnvelopeError, InvalidSignatureError, UnauthorizedError
} from '../errors.js'
import { isMap } from '../shape.js'
import { isSkillPattern, skillCovers } from './delegation.js'
import { TASK_ID_PATTERN } from './envelope.js'
import type { Capability, VerifiedChain } from './delegation.js'
import type { Did, Identity } from '@ioa/interconnect'

export interface PolicyContext {
  chain: VerifiedChain
  /** The leaf capability that covers `skill` */
  capability: Capability
  /** The agent that sent the request (envelope `from`) */
  caller: Did
  skill: string
  /** The task input */
  input: unknown
  /** ms since the epoch */
  now: number
}

export type Decision =
  | { effect: 'allow' }
  | { effect: 'deny', reason: string }
  | { effect: 'approve', reason: string }

export interface Policy {
  decide(ctx: PolicyContext): Decision | Promise<Decision>
}

const ALLOW: Decision = Object.freeze({ effect: 'allow' })

/** A policy that allows everything */
export function allowAll (): Policy {
  return { decide: () => ALLOW }
}

function deepEqual (a: unknown, b: unknown): boolean {
  try {
    const x = dagCbor.encode(a)
    const y = dagCbor.encode(b)
    return x.length === y.length && x.every((v, i) => v === y[i])
  } catch {
    // a value DAG-CBOR cannot encode equals nothing
    return false
  }
}

function fieldOf (key: string, prefix: 'max' | 'min'): string {
  const rest = key.slice(prefix.length)
  return rest.charAt(0).toLowerCase() + rest.slice(1)
}

export interface ConstraintPolicyInit {
  /**
   * Constraint keys that this policy does not check against the input
   * (constraints about something else than the call's input)
   *
   * @default []
   */
  ignore?: string[]
  /**
   * Skill names or patterns (`shop.order`, `shop.*`) whose calls are
   * checked; calls to other skills pass whatever the constraints say (a
   * capped `shop.*` grant then does not fail `shop.catalog`, which takes no
   * amount)
   *
   * @default every skill
   */
  skills?: string[]
}

/**
 * Checks the call's input against the constraints of the capability that
 * authorizes it. For each constraint key `k` with value `c`:
 *
 * - `maxFoo` (number): `input.foo` must be a number ≤ `c` (`maxAmount` → `input.amount`)
 * - `minFoo` (number): `input.foo` must be a number ≥ `c`
 * - an array: `input[k]` must be one of its elements (or, if an array, a subset)
 * - anything else: `input[k]` must equal `c` (`currency: 'EUR'` → `input.currency === 'EUR'`)
 *
 * A constrained field missing from the input, or an input that is not a map,
 * is denied (fail closed).
 */
export function constraintPolicy (init: ConstraintPolicyInit = {}): Policy {
  const ignore = new Set(init.ignore ?? [])
  const skills = init.skills
  if (skills != null) {
    if (!Array.isArray(skills)) throw new RangeError('skills must be a list of skill names or patterns')
    for (const p of skills) {
      if (!isSkillPattern(p)) throw new RangeError(`skills: "${String(p).slice(0, 80)}" is not a skill name or pattern`)
    }
  }
  return {
    decide (ctx) {
      if (skills != null && !skills.some(p => skillCovers(p, ctx.skill))) return ALLOW
      const constraints = ctx.capability.constraints
      if (constraints == null) return ALLOW
      const keys = Object.keys(constraints).filter(k => !ignore.has(k))
      if (keys.length === 0) return ALLOW
      const input = ctx.input
      if (input == null || typeof input !== 'object' || Array.isArray(input)) {
        return { effect: 'deny', reason: 'Constrained capability but the input is not a map' }
      }
      const fields = input as Record<string, unknown>
      for (const key of keys) {
        const c = constraints[key]
        if (/^max[A-Z]/.test(key) && typeof c === 'number') {
          const f = fieldOf(key, 'max')
          const v = fields[f]
          if (typeof v !== 'number' || Number.isNaN(v)) return { effect: 'deny', reason: `input.${f} must be a number (constraint ${key})` }
          if (v > c) return { effect: 'deny', reason: `input.${f}=${v} exceeds ${key}=${c}` }
        } else if (/^min[A-Z]/.test(key) && typeof c === 'number') {
          const f = fieldOf(key, 'min')
          const v = fields[f]
          if (typeof v !== 'number' || Number.isNaN(v)) return { effect: 'deny', reason: `input.${f} must be a number (constraint ${key})` }
          if (v < c) return { effect: 'deny', reason: `input.${f}=${v} is below ${key}=${c}` }
        } else if (Array.isArray(c)) {
          const v = fields[key]
          const values = Array.isArray(v) ? v : [v]
          if (!(key in fields) || !values.every(x => c.some(y => deepEqual(x, y)))) {
            return { effect: 'deny', reason: `input.${key} is not within the allowed values` }
          }
        } else if (!(key in fields) || !deepEqual(fields[key], c)) {
          return { effect: 'deny', reason: `input.${key} must be ${JSON.stringify(c)}` }
        }
      }
      return ALLOW
    }
  }
}

export interface RateLimitInit {
  /** Requests allowed per caller per window */
  requests: number
  /** Window length, in ms */
  per: number
  /**
   * Most callers tracked at once (least recently seen are forgotten)
   *
   * @default 10_000
   */
  maxCallers?: number
}

/**
 * At most `requests` calls per caller in any sliding window of `per` ms
 */
export function rateLimitPolicy (init: RateLimitInit): Policy {
  const { requests, per } = init
  const maxCallers = init.maxCallers ?? 10_000
  if (!Number.isInteger(requests) || requests < 1) throw new RangeError('requests must be a positive integer')
  if (!Number.isFinite(per) || per <= 0) throw new RangeError('per must be a positive number of ms')
  if (!Number.isInteger(maxCallers) || maxCallers < 1) throw new RangeError('maxCallers must be a positive integer')
  const log = new Map<string, number[]>()
  return {
    decide (ctx) {
      const now = ctx.now
      let times = log.get(ctx.caller)
      if (times != null) log.delete(ctx.caller)
      times = (times ?? []).filter(t => t > now - per)
      if (times.length >= requests) {
        log.set(ctx.caller, times)
        return { effect: 'deny', reason: `Rate limit: ${requests} requests per ${per} ms` }
      }
      times.push(now)
      log.set(ctx.caller, times)
      while (log.size > maxCallers) {
        log.delete(log.keys().next().value as string)
      }
      return ALLOW
    }
  }
}

export interface TimeWindowInit {
  /** First hour allowed, 0–23 */
  from: number
  /** Hour at which the window ends, 0–24 (exclusive); `from > to` wraps midnight */
  to: number
  /**
   * Offset of the local time from UTC, in minutes
   *
   * @default 0
   */
  utcOffsetMinutes?: number
}

/**
 * Calls are allowed only between two hours of the day
 */
export function timeWindowPolicy (init: TimeWindowInit): Policy {
  const { from, to } = init
  const offset = init.utcOffsetMinutes ?? 0
  if (!Number.isInteger(from) || from < 0 || from > 23) throw new RangeError('from must be an hour 0-23')
  if (!Number.isInteger(to) || to < 0 || to > 24) throw new RangeError('to must be an hour 0-24')
  if (!Number.isFinite(offset) || Math.abs(offset) > 24 * 60) throw new RangeError('utcOffsetMinutes out of range')
  return {
    decide (ctx) {
      const minutes = Math.floor(ctx.now / 60_000) + offset
      const hour = ((Math.floor(minutes / 60) % 24) + 24) % 24
      const inside = from <= to ? hour >= from && hour < to : hour >= from || hour < to
      return inside ? ALLOW : { effect: 'deny', reason: `Outside the allowed hours ${from}-${to}` }
    }
  }
}

/**
 * Needs approval by the chain's root principal when `predicate` holds
 */
export function approvalPolicy (predicate: (ctx: PolicyContext) => boolean | Promise<boolean>, reason = 'Approval by the principal required'): Policy {
  return {
    async decide (ctx) {
      return await predicate(ctx) ? { effect: 'approve', reason } : ALLOW
    }
  }
}

/**
 * All policies must agree: the first `deny` wins; otherwise any `approve`
 * makes the result `approve`; otherwise `allow`. Policies run in order.
 */
export function allOf (...policies: Policy[]): Policy {
  return {
    async decide (ctx) {
      let approve: Decision | undefined
      for (const p of policies) {
        const d = await p.decide(ctx)
        if (d.effect === 'deny') return d
        if (d.effect === 'approve') approve ??= d
      }
      return approve ?? ALLOW
    }
  }
}

/** Run a policy; a policy that throws or answers nonsense denies */
export async function evaluatePolicy (policy: Policy | undefined, ctx: PolicyContext): Promise<Decision> {
  if (policy == null) return ALLOW
  try {
    const d = await policy.decide(ctx)
    if (d?.effect === 'allow') return ALLOW
    if (d?.effect === 'deny' || d?.effect === 'approve') {
      return { effect: d.effect, reason: typeof d.reason === 'string' ? d.reason.slice(0, 512) : String(d.reason) }
    }
    return { effect: 'deny', reason: 'Policy gave no decision' }
  } catch (err: any) {
    return { effect: 'deny', reason: `Policy failed: ${String(err?.message ?? err).slice(0, 256)}` }
  }
}

// ---- approval records -------------------------------------------------

/** Domain-separation prefix of approval signatures */
export const APPROVAL_PREFIX = 'ioa:approval:v1\n'
const APPROVAL_PREFIX_BYTES = new TextEncoder().encode(APPROVAL_PREFIX)

export interface ApprovalPayload {
  v: 1
  /** The root principal of the chain that authorized the task */
  iss: Did
  /** The task id */
  task: string
  /** CID string of the request body (the envelope's `body`) being approved */
  action: string
  /** Not valid after this time, ms since the epoch */
  exp: number
}

export interface Approval {
  payload: ApprovalPayload
  sig: Uint8Array
}

/** Default validity of a new approval, in ms */
export const DEFAULT_APPROVAL_TTL = 600_000

export function approvalSigningBytes (payload: ApprovalPayload): Uint8Array {
  return domainSeparated(APPROVAL_PREFIX_BYTES, dagCbor.encode(payload))
}

/**
 * The root principal approves one action (request body CID) of one task
 */
export async function createApproval (root: Identity, init: { task: string, action: string, expiresAt?: number }): Promise<Approval> {
  const payload: ApprovalPayload = {
    v: 1,
    iss: root.did,
    task: init.task,
    action: init.action,
    exp: init.expiresAt ?? Date.now() + DEFAULT_APPROVAL_TTL
  }
  parseApproval({ payload, sig: new Uint8Array(64) })
  return { payload, sig: await root.sign(approvalSigningBytes(payload)) }
}

/** Check the shape of a received approval record (`INVALID_ENVELOPE` when malformed) */
export function parseApproval (raw: unknown): Approval {
  if (!isMap(raw)) throw new InvalidEnvelopeError('Approval must be a map')
  const { payload, sig, ...extra } = raw
  if (Object.keys(extra).length > 0) throw new InvalidEnvelopeError('Unknown approval fields')
  if (!(sig instanceof Uint8Array) || sig.length !== 64) throw new InvalidEnvelopeError('Approval signature must be 64 bytes')
  if (!isMap(payload)) throw new InvalidEnvelopeError('Approval payload must be a map')
  const { v, iss, task, action, exp, ...rest } = payload
  if (Object.keys(rest).length > 0) throw new InvalidEnvelopeError('Unknown approval payload fields')
  if (v !== 1) throw new InvalidEnvelopeError('Unsupported approval version')
  if (!isDid(iss)) throw new InvalidEnvelopeError('approval.iss must be a did:key')
  if (typeof task !== 'string' || !TASK_ID_PATTERN.test(task)) throw new InvalidEnvelopeError('approval.task is not a task id')
  if (typeof action !== 'string' || action.length === 0 || action.length > 128) throw new InvalidEnvelopeError('approval.action must be a CID string')
  if (typeof exp !== 'number' || !Number.isSafeInteger(exp) || exp < 0) throw new InvalidEnvelopeError('approval.exp must be a non-negative integer')
  return { payload: { v, iss, task, action, exp }, sig }
}

export interface VerifyApprovalOptions {
  /** The root principal of the task's chain: the only valid issuer */
  root: Did
  task: string
  /** CID string of the task's request body */
  action: string
  /** @default Date.now() */
  now?: number
  /** @default 30_000 */
  clockSkew?: number
}

/**
 * Verify an approval for a task. Errors: `INVALID_ENVELOPE` (malformed),
 * `UNAUTHORIZED` (not issued by the root), `INVALID_SIGNATURE`,
 * `APPROVAL_REQUIRED` (for another task or action, or expired).
 */
export async function verifyApproval (raw: unknown, options: VerifyApprovalOptions): Promise<Approval> {
  const approval = parseApproval(raw)
  const p = approval.payload
  const now = options.now ?? Date.now()
  const skew = options.clockSkew ?? 30_000
  if (p.iss !== options.root) throw new UnauthorizedError('Approval not issued by the root principal of the delegation chain')
  if (!await verifyByDid(p.iss, approvalSigningBytes(p), approval.sig)) throw new InvalidSignatureError('Approval signature does not verify')
  if (p.task !== options.task) throw new ApprovalRequiredError('Approval is for another task')
  if (p.action !== options.action) throw new ApprovalRequiredError('Approval is for another action')
  if (p.exp + skew < now) throw new ApprovalRequiredError('Approval expired')
  return approval
}
