/**
 * The provider pool of one step (see ProviderPool)
 */
import { SUSPECT_FOR } from './failures.js'
import type { Candidate } from './run.js'
import type { Did } from '@ioa/interconnect'

/**
 * The providers of one step: discovered, ranked, and claimed by the step's
 * subtasks (one subtask per provider at a time), least loaded first among
 * equals, providers that recently failed as if gone last.
 */
export class ProviderPool {
  private candidates: Candidate[] = []
  private readonly claimed = new Set<Did>()

  constructor (
    private readonly find: (fresh: boolean) => Promise<Candidate[]>,
    private readonly load: Map<Did, number>,
    private readonly suspects: Map<Did, number>
  ) {}

  get size (): number {
    return this.candidates.length
  }

  /** Whether providers have been looked up */
  discovered = false

  async refresh (fresh: boolean): Promise<void> {
    const found = await this.find(fresh)
    this.discovered = true
    if (found.length > 0 || fresh) this.candidates = found
  }

  private effective (c: Candidate): number {
    const load = this.load.get(c.did) ?? 0
    const failedAt = this.suspects.get(c.did)
    const suspect = failedAt != null && Date.now() - failedAt < SUSPECT_FOR
    return c.score / (1 + load) - (suspect ? 10 : 0)
  }

  peek (exclude: ReadonlySet<Did>): Candidate | undefined {
    let best: Candidate | undefined
    let bestScore = -Infinity
    for (const c of this.candidates) {
      if (exclude.has(c.did) || this.claimed.has(c.did)) continue
      const s = this.effective(c)
      if (s > bestScore) {
        best = c
        bestScore = s
      }
    }
    return best
  }

  claim (exclude: ReadonlySet<Did>): Candidate | undefined {
    const c = this.peek(exclude)
    if (c != null) this.hold(c.did)
    return c
  }

  hold (did: Did): void {
    this.claimed.add(did)
    this.load.set(did, (this.load.get(did) ?? 0) + 1)
  }

  release (did: Did): void {
    if (!this.claimed.delete(did)) return
    const n = (this.load.get(did) ?? 1) - 1
    if (n <= 0) this.load.delete(did)
    else this.load.set(did, n)
  }
}
