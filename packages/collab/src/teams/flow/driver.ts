/**
 * The sequencer's side of flow control (`spec/teams.md` 10.3-10.5): after
 * each entry it appends what the machine owes. `conclude` once `max_turns`
 * turns are taken; the policy's decision (a `turn` entry) when one is due;
 * a skip of a speaker silent for `turnTimeout`. Rule decisions are appended
 * at once, in the sequencer's queue; any other policy is asked outside it
 * (posts go on meanwhile), and a failing, slow or malformed answer is
 * replaced by round-robin, which the entry says. A new sequencer calls
 * `step()` at the start of its epoch, so it continues from the log.
 */
import { anySignal } from 'any-signal'
import { raceSignal } from 'race-signal'
import { isRulePolicy } from './rules.js'
import { ruleDecision } from './state.js'
import type { SpeakerDecision, SpeakerPolicy } from './policy.js'
import type { Trigger } from './rules.js'
import type { FlowState } from './state.js'
import type { MessageType } from '../records.js'
import type { TeamRuntime } from '../team.js'
import type { Did } from '@ioa/interconnect'
import type { Logger } from '@libp2p/interface'

export interface FlowDriverInit {
  log: Logger
  /** The policy of a name that is not a rule (`llm`, or one the node brings) */
  policy: (name: string) => SpeakerPolicy | undefined
  /** Longest wait for a policy that is not a rule, ms */
  decisionTimeout: number
  /** Append a message of the sequencer (inside its queue) */
  appendOwn: (type: MessageType, body: Record<string, unknown>) => Promise<number>
  /** Run a job in the sequencer's queue */
  enqueue: (job: () => Promise<void>, what: string) => void
  stopped: () => boolean
}

interface Choice {
  speaker: Did
  reason?: string
  fallback?: 'round-robin'
}

const HISTORY_SHOWN = 64

export class FlowDriver {
  private readonly team: TeamRuntime
  private readonly init: FlowDriverInit
  /** The trigger being decided by a policy outside the queue */
  private asking?: Trigger
  private readonly controller = new AbortController()
  /** Since when the current speaker has had the turn (local clock) */
  private turnSince = Date.now()
  private turnMark = ''

  constructor (team: TeamRuntime, init: FlowDriverInit) {
    this.team = team
    this.init = init
  }

  stop (): void {
    this.controller.abort()
  }

  private live (): FlowState | undefined {
    if (this.init.stopped() || this.team.concluded) return undefined
    const s = this.team.flowControl.state
    return s == null || s.phase === 'concluded' ? undefined : s
  }

  private mark (s: FlowState): void {
    const key = `${s.turn}|${s.speaker ?? ''}|${s.due != null ? 'due' : ''}`
    if (key !== this.turnMark) {
      this.turnMark = key
      this.turnSince = Date.now()
    }
  }

  /** In the sequencer's queue, after an entry: what the machine owes now */
  async step (): Promise<void> {
    const s = this.live()
    if (s == null) return
    if (s.turn >= s.params.maxTurns) {
      this.init.log('team %s: max_turns (%d) reached; concluding', this.team.id, s.params.maxTurns)
      await this.init.appendOwn('conclude', { summary: `max_turns (${s.params.maxTurns}) reached`, outcome: 'abandoned' })
      return
    }
    if (s.params.policy === 'open') return
    this.mark(s)
    if (s.due != null) await this.decide(s, s.due)
  }

  /** Every heartbeat: pass the turn of a speaker silent for `turnTimeout` */
  tick (now = Date.now()): void {
    const s = this.live()
    if (s == null || s.params.policy === 'open' || s.phase !== 'discussion' || s.due != null || s.speaker == null) return
    this.mark(s)
    if (now - this.turnSince < s.params.turnTimeout || this.asking != null) return
    this.turnSince = now
    const skipped = s.speaker
    this.init.log('team %s: %s did not speak within %d ms; passing its turn', this.team.id, skipped, s.params.turnTimeout)
    this.init.enqueue(async () => {
      const cur = this.live()
      if (cur?.speaker !== skipped || cur.turn !== s.turn || cur.due != null) return
      await this.decide(cur, { kind: 'skip', after: skipped }, `turn timeout: ${skipped} was silent for ${s.params.turnTimeout} ms`)
    }, 'skip a silent speaker')
  }

  private async decide (s: FlowState, trigger: Trigger, why?: string): Promise<void> {
    const policy = s.params.policy
    if (isRulePolicy(policy)) {
      await this.appendTurn({ speaker: ruleDecision(s, this.team.roster, policy, trigger), reason: why })
      return
    }
    if (this.asking === trigger) return
    this.asking = trigger
    void this.ask(s, trigger, why)
  }

  /** Ask a policy that is not a rule, outside the queue; append its decision if the state still waits for it */
  private async ask (s: FlowState, trigger: Trigger, why?: string): Promise<void> {
    const name = s.params.policy
    const policy = this.init.policy(name)
    let decision: SpeakerDecision | undefined
    let failure: string | undefined
    if (policy == null) {
      failure = `no ${name} policy on this sequencer`
    } else {
      const signal = anySignal([this.controller.signal, AbortSignal.timeout(this.init.decisionTimeout)])
      try {
        const history = this.team.history(Math.max(0, this.team.length - HISTORY_SHOWN))
        decision = await raceSignal(Promise.resolve(policy.decide({ team: this.team.id, state: s, roster: this.team.roster, trigger, history, signal })), signal)
        if (decision.conclude !== true && (decision.speaker == null || this.team.roster.members.every(m => m.agent !== decision?.speaker))) {
          failure = `it named ${String(decision.speaker)}, who is not a member`
          decision = undefined
        }
      } catch (err: any) {
        // the sequencer stopped: the next one decides
        if (this.controller.signal.aborted) return
        failure = signal.aborted ? `no answer within ${this.init.decisionTimeout} ms` : String(err?.message ?? err)
      } finally {
        signal.clear()
      }
    }
    if (failure != null) this.init.log('team %s: the %s policy failed (%s); round-robin decides', this.team.id, name, failure)
    this.init.enqueue(async () => {
      // asked once per trigger: a step before this job runs does not ask again
      if (this.asking === trigger) this.asking = undefined
      const cur = this.live()
      // the decision is for the trigger still pending (the same due decision, or the same silent speaker)
      if (cur == null || (cur.due ?? undefined) !== (s.due ?? undefined) || cur.speaker !== s.speaker || cur.turn !== s.turn) return
      if (decision?.conclude === true) {
        await this.init.appendOwn('conclude', { summary: `the ${name} policy concluded${decision.reason != null ? `: ${decision.reason}` : ''}`.slice(0, 8192), outcome: 'done' })
        return
      }
      if (decision?.speaker != null) {
        await this.appendTurn({ speaker: decision.speaker, reason: [why, decision.reason].filter(r => r != null).join('; ') || undefined })
        return
      }
      await this.appendTurn({ speaker: ruleDecision(cur, this.team.roster, 'round-robin', trigger), fallback: 'round-robin', reason: [why, `${name}: ${failure ?? 'no decision'}`].filter(r => r != null).join('; ') })
    }, `${name} decision`)
  }

  private async appendTurn (c: Choice): Promise<void> {
    const s = this.team.flowControl.state as FlowState
    const body: Record<string, unknown> = { turn: s.turn, state: s.phase, policy: s.params.policy, speaker: c.speaker }
    if (c.fallback != null) body.fallback = c.fallback
    if (c.reason != null && c.reason !== '') body.reason = c.reason.slice(0, 256)
    const seq = await this.init.appendOwn('turn', body)
    this.init.log('team %s: entry %d gives turn %d to %s (%s%s)', this.team.id, seq, s.turn + 1, c.speaker, s.params.policy, c.fallback != null ? ', fallback round-robin' : '')
  }
}
