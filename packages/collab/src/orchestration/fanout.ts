/**
 * Fan-out decisions (spec/collab-orchestration.md, fan-out): when the
 * subtasks of a step so far decide it, in mode `all` (every slot's answer, in
 * slot order), `first` (the first answer) or `quorum` (`needed` equal
 * answers, compared by their DAG-CBOR encoding).
 */
import * as dagCbor from '@ipld/dag-cbor'
import { equals as bytesEqual } from 'uint8arrays/equals'
import { StepFailedError } from '../errors.js'
import { FATAL, codeOf } from './failures.js'
import type { SlotOutcome } from './run.js'
import type { Fanout, PlanStep } from '../planning/plan.js'
import type { Did } from '@ioa/interconnect'

export type SlotSuccess = Extract<SlotOutcome, { ok: true }>
export type SlotFailure = Extract<SlotOutcome, { ok: false }>
/** A step's result and the providers that gave it, or the error that ends the step */
export type FanoutDecision = { result: unknown, providers: Did[] } | { err: unknown }

function encodeForCompare (v: unknown): Uint8Array {
  try {
    return dagCbor.encode(v ?? null)
  } catch {
    // not DAG-CBOR encodable (e.g. undefined inside): compared by its JSON instead
    return new TextEncoder().encode(JSON.stringify(v))
  }
}

/**
 * The step's outcome from its subtasks' outcomes so far, or undefined while
 * `running` subtasks may still decide it
 */
export function decideFanout (step: PlanStep, mode: Fanout['mode'], slots: number, needed: number, successes: SlotSuccess[], failures: SlotFailure[], running: number): FanoutDecision | undefined {
  const fatal = failures.find(f => FATAL.has(codeOf(f.err)))
  if (fatal != null) return { err: fatal.err }
  if (mode === 'all') {
    if (failures.length > 0) return { err: failures[0].err }
    if (successes.length === slots) {
      const ordered = [...successes].sort((a, b) => a.slot - b.slot)
      return { result: ordered.map(s => s.result), providers: ordered.map(s => s.provider) }
    }
    return undefined
  }
  if (mode === 'first') {
    if (successes.length > 0) return { result: successes[0].result, providers: [successes[0].provider] }
    if (failures.length === slots) return { err: failures[failures.length - 1].err }
    return undefined
  }
  // quorum: `needed` equal answers
  const groups: Array<{ bytes: Uint8Array, members: SlotSuccess[] }> = []
  for (const s of successes) {
    const bytes = encodeForCompare(s.result)
    const g = groups.find(x => bytesEqual(x.bytes, bytes))
    if (g != null) g.members.push(s)
    else groups.push({ bytes, members: [s] })
  }
  const best = groups.sort((a, b) => b.members.length - a.members.length)[0]
  if (best != null && best.members.length >= needed) {
    return { result: best.members[0].result, providers: best.members.map(m => m.provider) }
  }
  if ((best?.members.length ?? 0) + running < needed) {
    const last = failures[failures.length - 1]?.err
    return {
      err: new StepFailedError(`Step "${step.id}": no quorum of ${needed} equal answers (${successes.length} answers in ${groups.length} groups, ${failures.length} failures)`, last != null ? { cause: last } : undefined)
    }
  }
  return undefined
}
