/**
 * The orchestrator's run journal: what a run is doing, kept in a datastore so
 * that an orchestrator started after a crash can carry on where the previous
 * one stopped (`Orchestrator.resume`). One record per run (the plan, the
 * authority, the limits and the outcome) and one record per step (its state,
 * its subtasks and their providers, its result). Records are DAG-CBOR
 * (written by journal-codec.ts).
 *
 * Spec: `spec/collab-orchestration.md`, section 6.
 */
import * as dagCbor from '@ipld/dag-cbor'
import { Key } from 'interface-datastore'
import { encodeRecord } from './journal-codec.js'
import type { Token } from '../auth/delegation.js'
import type { Plan } from '../planning/plan.js'
import type { TaskError, TaskState } from '../tasks/model.js'
import type { Did } from '@ioa/interconnect'
import type { Datastore } from 'interface-datastore'

/** Key prefix of run records: `<prefix>/runs/<runId>` */
export const JOURNAL_PREFIX = '/ioa/orchestrator'

/** Grammar of run ids (they become part of task ids and idempotency keys) */
export const RUN_ID = /^[A-Za-z0-9_-]{1,64}$/

export type RunState = 'running' | 'completed' | 'failed' | 'canceled'

export type StepState = 'pending' | 'running' | 'completed' | 'failed' | 'canceled'

/**
 * What is known of one subtask: `submitting` is written before the request
 * leaves, then the task states as they stream in; `lapsed` (the lease lapsed
 * and the outcome is not known yet), `unreachable` (the lease lapsed and the
 * executor could not be asked), `absent` (the executor has no such task)
 */
export type AttemptState = 'submitting' | TaskState | 'lapsed' | 'unreachable' | 'absent'

export interface AttemptRecord {
  /** Fan-out slot (0 without fan-out) */
  slot: number
  /** Retry round (0 for the first) */
  round: number
  /** The executing agent */
  provider: Did
  /** The skill invoked */
  skill: string
  /** Task id, also the idempotency key */
  taskId: string
  state: AttemptState
  error?: TaskError
  /** When the attempt was made */
  at: number
}

export interface StepRecord {
  v: 1
  id: string
  state: StepState
  /** Subtasks run at once (fan-out), decided when the step starts */
  slots?: number
  /** Budget given to each subtask of the step, carved from the run's */
  budget?: number
  attempts: AttemptRecord[]
  result?: unknown
  error?: TaskError
  /** The agents whose results make the step's result */
  providers?: Did[]
  startedAt?: number
  finishedAt?: number
}

export interface RunRecord {
  v: 1
  runId: string
  /** The orchestrating agent */
  agent: Did
  plan: Plan
  /** The chain that grants the orchestrating agent its authority, leaf first (empty: its own) */
  proofs: Token[]
  deadline?: number
  budget?: number
  state: RunState
  result?: unknown
  error?: TaskError
  createdAt: number
  updatedAt: number
}

interface Pending {
  value: unknown
  queued: boolean
  chain: Promise<void>
}

/**
 * Run and step records in a datastore. Writes of one key are ordered and
 * coalesced: a write queued while another of the same key is in progress
 * writes the record as it is when its turn comes. `put*` resolve when the
 * record (as it was at call time, or later) is stored.
 */
export class RunJournal {
  private readonly datastore: Datastore
  private readonly prefix: string
  private readonly pending = new Map<string, Pending>()

  /** Whether keys need the datastore's cleaning (only for a prefix that is not clean: run and step ids have no `/`) */
  private readonly cleanKeys: boolean

  constructor (datastore: Datastore, prefix = JOURNAL_PREFIX) {
    this.datastore = datastore
    this.prefix = prefix
    this.cleanKeys = new Key(prefix).toString() !== prefix
  }

  private runKey (runId: string): string {
    return `${this.prefix}/runs/${runId}`
  }

  private stepKey (runId: string, stepId: string): string {
    return `${this.prefix}/steps/${runId}/${stepId}`
  }

  private write (key: string, value: unknown): Promise<void> {
    let p = this.pending.get(key)
    if (p == null) {
      p = { value, queued: false, chain: Promise.resolve() }
      this.pending.set(key, p)
    }
    const entry = p
    entry.value = value
    if (entry.queued) return entry.chain
    entry.queued = true
    // (the previous write's failure went to its own caller, who got that chain)
    const chain = entry.chain.catch(() => {}).then(async () => {
      entry.queued = false
      const bytes = encodeRecord(entry.value)
      await this.datastore.put(new Key(key, this.cleanKeys), bytes)
    })
    entry.chain = chain
    // (this write's failure goes to the caller through the returned chain)
    void chain.catch(() => {}).finally(() => {
      if (!entry.queued && this.pending.get(key) === entry && entry.chain === chain) this.pending.delete(key)
    })
    return chain
  }

  /** Store a run record */
  async putRun (record: RunRecord): Promise<void> {
    await this.write(this.runKey(record.runId), record)
  }

  /** Store a step record of a run */
  async putStep (runId: string, record: StepRecord): Promise<void> {
    await this.write(this.stepKey(runId, record.id), record)
  }

  /** Wait for every queued write */
  async flush (): Promise<void> {
    // a failed write was reported to its caller: flush only waits for every write to settle
    await Promise.all([...this.pending.values()].map(async p => p.chain.catch(() => {})))
  }

  async getRun (runId: string): Promise<RunRecord | undefined> {
    if (!RUN_ID.test(runId)) return undefined
    try {
      return dagCbor.decode<RunRecord>(await this.datastore.get(new Key(this.runKey(runId))))
    } catch (err: any) {
      if (err?.name === 'NotFoundError' || err?.code === 'ERR_NOT_FOUND') return undefined
      throw err
    }
  }

  async getSteps (runId: string): Promise<Map<string, StepRecord>> {
    const out = new Map<string, StepRecord>()
    for await (const { value } of this.datastore.query({ prefix: `${this.prefix}/steps/${runId}/` })) {
      const rec = dagCbor.decode<StepRecord>(value)
      out.set(rec.id, rec)
    }
    return out
  }

  /** Every run record (plans included) */
  async * runs (): AsyncGenerator<RunRecord> {
    for await (const { value } of this.datastore.query({ prefix: `${this.prefix}/runs/` })) {
      yield dagCbor.decode<RunRecord>(value)
    }
  }

  /** Remove a run and its steps */
  async delete (runId: string): Promise<void> {
    await this.flush()
    for await (const key of this.datastore.queryKeys({ prefix: `${this.prefix}/steps/${runId}/` })) {
      await this.datastore.delete(key)
    }
    await this.datastore.delete(new Key(this.runKey(runId)))
  }
}
