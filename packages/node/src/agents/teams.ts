/**
 * The teams side of `ioa-agent/2` (`spec/node-agents.md` 16): the program
 * answers its agent's invitations (`team-invite` / `team-answer`, bounded
 * wait, a default decision), follows the conversation of every team its
 * agent is a member of (`team-message`, in log order, with backpressure
 * instead of an unbounded queue) and posts to it (`team-post`, answered
 * `team-posted` or `team-post-error`), and may convene one (`team-form`).
 * Assignments stay tasks: `taskTeam` names the `assign` entry of a task,
 * for the `task` message's `team` field.
 */
import { anySignal } from 'any-signal'
import { EventsOverflowError } from '@ioa/collab'
import { AgentProtocolError } from '../errors.js'
import { MAX_ID, errorCode, errorMessage, isObject } from './protocol.js'
import type { Limits } from './limits.js'
import type { ExternalAgentComponents } from './types.js'
import type { Decline, DeclineCode, FlowOptions, InvitationContext, MessageType, RoleInit, Team, TeamEvent, TeamGoalInit } from '@ioa/collab'
import type { Did } from '@ioa/interconnect'
import type { Logger } from '@libp2p/interface'
import type { Writable } from 'node:stream'

/** Decline codes of `spec/teams.md` 3.3 */
const DECLINE_CODES: readonly DeclineCode[] = ['BUSY', 'NOT_CAPABLE', 'DEADLINE', 'POLICY', 'OTHER']
/** Longest decline reason (spec/teams.md 3.3) */
const MAX_REASON = 256
/** Kinds a program cannot post: only the sequencer appends them (`turn`: spec/teams.md 10.4), or they carry records only the node's team API signs */
const NOT_POSTABLE = new Set(['roster', 'epoch', 'vote-result', 'turn', 'admit', 'subteam'])
const KIND = /^[a-z][a-z-]{0,15}$/
/** Invitation ids answered or timed out, remembered so that a late answer is ignored, not an error */
const RECENT_INVITES = 256
/** How often a paused conversation looks at the program's backlog again when no `drain` comes, ms */
const BACKLOG_POLL = 50
/** The fields of a team-form's `flow` (FormOptions.flow, spec/teams.md 10) */
const FLOW_FIELDS = new Set(['policy', 'maxTurns', 'moderator', 'priority', 'turnTimeout'])

/** Most roles of a team-form (spec/teams.md 9: members per team) */
const MAX_ROLES = 16
/** `assign` entries remembered per program (task id -> its team context) */
const RECENT_ASSIGNS = 1_024

/** The team context a `task` message carries (spec 16.5) */
export interface TaskTeam {
  id: string
  seq: number
  mode: string
  assigner: Did
}

/** What the bridge needs of the program's supervisor */
export interface TeamBridgeParent {
  /** The hosted agent */
  did: Did
  send(msg: Record<string, unknown>): void
  /** The program's stdin */
  input: Writable
  report(line: string): void
  lifetime: AbortSignal
}

/** A team-post error answered to the program */
class PostError extends Error {
  readonly code: string
  constructor (code: string, message: string) {
    super(message)
    this.code = code
  }
}

export class TeamBridge {
  private readonly node: ExternalAgentComponents
  private readonly parent: TeamBridgeParent
  private readonly limits: Limits
  private readonly inviteDefault: 'accept' | 'decline'
  private readonly log: Logger
  private readonly invites = new Map<string, (answer: { accept: true } | { accept: false, decline: Decline }) => void>()
  private readonly answered = new Set<string>()
  private readonly followed = new Map<string, AbortController>()
  private readonly assigns = new Map<string, TaskTeam>()
  private posts = 0
  private readonly stopped = new AbortController()
  private offAcceptor?: () => void

  constructor (node: ExternalAgentComponents, parent: TeamBridgeParent, limits: Limits, inviteDefault: 'accept' | 'decline' | undefined, log: Logger) {
    this.node = node
    this.parent = parent
    this.limits = limits
    this.inviteDefault = inviteDefault ?? 'decline'
    this.log = log
  }

  /** After the welcome: answer the agent's invitations, follow its teams */
  start (): void {
    const teams = this.node.teams
    if (teams == null) return
    this.offAcceptor = teams.acceptFor(this.parent.did, async (ctx) => await this.ask(ctx))
    const signal = this.stopped.signal
    void (async () => {
      for await (const ev of teams.events({ signal })) {
        if (ev.type === 'team' && ev.team.agent === this.parent.did) this.follow(ev.team)
      }
    })().catch((err: Error) => {
      if (!signal.aborted) this.log.error('team events of %s ended: %e', this.parent.did, err)
    })
    for (const t of teams.teams()) if (t.agent === this.parent.did) this.follow(t)
  }

  stop (): void {
    this.stopped.abort()
    this.offAcceptor?.()
    this.offAcceptor = undefined
    for (const answer of this.invites.values()) answer({ accept: false, decline: { code: 'BUSY', reason: 'The agent program is stopping' } })
    this.invites.clear()
    for (const c of this.followed.values()) c.abort()
    this.followed.clear()
  }

  /**
   * The team context of a task, when its `assign` entry is held: from the
   * entries written to the program, else from the last RECENT_ASSIGNS
   * entries of the agent's teams (the program may be behind its teams)
   */
  taskTeam (task: string): TaskTeam | undefined {
    const known = this.assigns.get(task)
    if (known != null || this.node.teams == null) return known
    for (const team of this.node.teams.teams()) {
      if (team.agent !== this.parent.did) continue
      const recent = team.history(Math.max(0, team.length - RECENT_ASSIGNS))
      for (let i = recent.length - 1; i >= 0; i--) {
        const p = recent[i].msg.payload
        if (p.type === 'assign' && p.body.task === task && p.body.assignee === this.parent.did) {
          return { id: team.id, seq: recent[i].seq, mode: String(p.body.mode), assigner: p.from }
        }
      }
    }
    return undefined
  }

  /** A `team-answer`, `team-post` or `team-form` of the program; throws AgentProtocolError for a malformed one */
  onMessage (msg: Record<string, unknown>): void {
    if (msg.type === 'team-answer') this.onAnswer(msg)
    else if (msg.type === 'team-post') this.onPost(msg)
    else this.onForm(msg)
  }

  // ---- invitations -------------------------------------------------------------

  private async ask (ctx: InvitationContext): Promise<{ accept: true } | { accept: false, decline: Decline }> {
    const p = ctx.invitation.payload
    if (this.stopped.signal.aborted) return { accept: false, decline: { code: 'BUSY', reason: 'The agent program is stopping' } }
    if (this.invites.size >= this.limits.maxPendingInvites) {
      return { accept: false, decline: { code: 'BUSY', reason: `The agent program has ${this.limits.maxPendingInvites} invitations to answer already` } }
    }
    if (this.followed.size >= this.limits.maxTeams) {
      return { accept: false, decline: { code: 'BUSY', reason: `The agent program follows ${this.limits.maxTeams} teams already` } }
    }
    const id = p.nonce
    return await new Promise(resolve => {
      const timer = setTimeout(() => {
        if (!this.invites.has(id)) return
        this.parent.report(`team ${p.team}: no team-answer within ${this.limits.inviteAnswerTimeout} ms, ${this.inviteDefault === 'accept' ? 'accepted' : 'declined'}`)
        done(this.inviteDefault === 'accept'
          ? { accept: true }
          : { accept: false, decline: { code: 'BUSY', reason: `The agent program did not answer within ${this.limits.inviteAnswerTimeout} ms` } })
      }, this.limits.inviteAnswerTimeout)
      const done = (answer: { accept: true } | { accept: false, decline: Decline }): void => {
        clearTimeout(timer)
        this.invites.delete(id)
        this.remember(this.answered, id, RECENT_INVITES)
        resolve(answer)
      }
      this.invites.set(id, done)
      this.parent.send({
        type: 'team-invite',
        id,
        team: p.team,
        from: p.from,
        role: p.role,
        capabilities: p.capabilities,
        goal: p.goal,
        depth: p.depth,
        ...(p.parent != null ? { parent: p.parent } : {}),
        expires: Date.now() + this.limits.inviteAnswerTimeout
      })
    })
  }

  /** A `team-answer`: throws AgentProtocolError for a malformed one */
  private onAnswer (msg: Record<string, unknown>): void {
    const { id, accept, code, reason } = msg
    if (typeof id !== 'string' || id.length === 0 || id.length > MAX_ID) throw new AgentProtocolError('team-answer.id must be an invitation id')
    if (typeof accept !== 'boolean') throw new AgentProtocolError('team-answer.accept must be a boolean')
    if (code != null && (typeof code !== 'string' || !(DECLINE_CODES as string[]).includes(code))) {
      throw new AgentProtocolError(`team-answer.code must be one of ${DECLINE_CODES.join(', ')}`)
    }
    if (reason != null && typeof reason !== 'string') throw new AgentProtocolError('team-answer.reason must be a string')
    const answer = this.invites.get(id)
    if (answer == null) {
      // an answer crossing the timeout is normal; an id never sent is not
      if (this.answered.has(id)) return
      throw new AgentProtocolError(`Unknown invitation ${id}`)
    }
    answer(accept ? { accept: true } : { accept: false, decline: { code: (code as DeclineCode | undefined) ?? 'OTHER', reason: (reason ?? '').slice(0, MAX_REASON) } })
  }

  // ---- the conversation, in ------------------------------------------------------

  private follow (team: Team): void {
    if (this.followed.has(team.id) || this.stopped.signal.aborted) return
    const c = new AbortController()
    this.followed.set(team.id, c)
    void this.pump(team, c.signal).catch((err: Error) => {
      this.log.error('team %s: following it for %s failed: %e', team.id, this.parent.did, err)
    }).finally(() => {
      if (this.followed.get(team.id) === c) this.followed.delete(team.id)
    })
  }

  /**
   * Write the team's events to the program from its first entry on, in order.
   * While the program's unread input is over maxTeamBacklogBytes, nothing is
   * read: the team's bounded events() reader may then overflow, and reading
   * starts again from the next entry (events() replays what the log holds),
   * so nothing is lost and nothing piles up here.
   */
  private async pump (team: Team, signal: AbortSignal): Promise<void> {
    let next = 0
    let sent = false
    for (;;) {
      try {
        for await (const ev of team.events({ from: next, signal })) {
          while (this.parent.input.writableLength > this.limits.maxTeamBacklogBytes && !signal.aborted) await this.drained(signal)
          if (signal.aborted) return
          next = this.deliver(team, ev, next)
          sent = true
          // the conversation is over for the agent: nothing more comes (spec 16.3)
          if (ev.type === 'concluded' || (ev.type === 'left' && ev.agent === this.parent.did)) {
            this.parent.send({ type: 'team-ended', team: team.id, next, reason: ev.type })
            return
          }
        }
      } catch (err: any) {
        if (signal.aborted) return
        if (err?.code !== EventsOverflowError.code) throw err
        this.log('team %s: the program of %s reads slowly; reading again from entry %d', team.id, this.parent.did, next)
        continue
      }
      if (signal.aborted) return
      // the team is closed on this node (dropped, or the team service stops)
      if (sent) this.parent.send({ type: 'team-ended', team: team.id, next, reason: 'closed' })
      return
    }
  }

  /** Write one event; returns the next entry to read */
  private deliver (team: Team, ev: TeamEvent, next: number): number {
    if (ev.type === 'truncated') {
      for (const [task, t] of this.assigns) if (t.id === team.id && t.seq >= ev.from) this.assigns.delete(task)
      this.parent.send({ type: 'team-truncated', team: team.id, from: ev.from, count: ev.count })
      return ev.from
    }
    if (ev.type !== 'message' || ev.seq < next) return next
    const p = ev.message.payload
    const body: Record<string, unknown> = p.type === 'roster' ? { roster: (p.body.roster as { payload: unknown }).payload } : p.body
    if (p.type === 'assign' && p.body.assignee === this.parent.did && typeof p.body.task === 'string') {
      this.assigns.delete(p.body.task)
      this.assigns.set(p.body.task, { id: team.id, seq: ev.seq, mode: String(p.body.mode), assigner: p.from })
      if (this.assigns.size > RECENT_ASSIGNS) this.assigns.delete(this.assigns.keys().next().value as string)
    }
    this.parent.send({
      type: 'team-message',
      team: team.id,
      seq: ev.seq,
      epoch: ev.epoch,
      from: p.from,
      kind: p.type,
      id: p.id,
      body,
      ...(p.re != null ? { re: p.re } : {}),
      ts: p.ts
    })
    return ev.seq + 1
  }

  // ---- the conversation, out ------------------------------------------------------

  /** A `team-post`: answered `team-posted` or `team-post-error`; throws AgentProtocolError when it has no valid id */
  private onPost (msg: Record<string, unknown>): void {
    const { id } = msg
    if (typeof id !== 'string' || id.length === 0 || id.length > MAX_ID) throw new AgentProtocolError('team-post.id must be a string of 1-128 characters')
    const fail = (code: string, message: string): void => {
      this.parent.send({ type: 'team-post-error', id, ...(typeof msg.team === 'string' ? { team: msg.team } : {}), code, message })
    }
    let post: { team: Team, kind: string, body: Record<string, unknown>, re?: number }
    try {
      post = this.checkPost(msg)
    } catch (err) {
      fail(errorCode(err, 'INVALID_POST'), errorMessage(err))
      if ((err as PostError).code === 'INVALID_POST') throw new AgentProtocolError(`team-post ${id}: ${errorMessage(err)}`)
      return
    }
    this.posts++
    void this.run(id, post).finally(() => { this.posts-- })
  }

  /** A `team-form`: answered `team-formed` or `team-form-error`; throws AgentProtocolError when it has no valid id or is malformed */
  private onForm (msg: Record<string, unknown>): void {
    const { id, goal, roles, flow } = msg
    if (typeof id !== 'string' || id.length === 0 || id.length > MAX_ID) throw new AgentProtocolError('team-form.id must be a string of 1-128 characters')
    const fail = (code: string, message: string, extra: Record<string, unknown> = {}): void => {
      this.parent.send({ type: 'team-form-error', id, code, message, ...extra })
    }
    if (!isObject(goal) || (roles != null && (!Array.isArray(roles) || roles.length === 0 || roles.length > MAX_ROLES || !roles.every(isObject)))) {
      fail('INVALID_FORM', `team-form needs a goal object and at most ${MAX_ROLES} roles`)
      throw new AgentProtocolError(`team-form ${id}: needs a goal object and at most ${MAX_ROLES} roles`)
    }
    if (flow != null && (!isObject(flow) || Object.keys(flow).some(k => !FLOW_FIELDS.has(k)))) {
      fail('INVALID_FORM', `team-form.flow must be an object of ${[...FLOW_FIELDS].join(', ')}`)
      throw new AgentProtocolError(`team-form ${id}: flow must be an object of ${[...FLOW_FIELDS].join(', ')}`)
    }
    const teams = this.node.teams
    if (teams == null) { fail('TEAMS_UNAVAILABLE', 'This node has no team service'); return }
    if (this.posts >= this.limits.maxConcurrentPosts) { fail('TOO_MANY_POSTS', `${this.limits.maxConcurrentPosts} posts are in flight`); return }
    if (this.followed.size >= this.limits.maxTeams) { fail('TOO_MANY_TEAMS', `The agent program follows ${this.limits.maxTeams} teams already`); return }
    this.posts++
    const signal = anySignal([this.parent.lifetime, AbortSignal.timeout(this.limits.formTimeout)])
    void (async () => {
      try {
        const team = await teams.form(this.parent.did, goal as unknown as TeamGoalInit, {
          signal, ...(roles != null ? { roles: roles as unknown as RoleInit[] } : {}), ...(flow != null ? { flow: flow as FlowOptions } : {})
        })
        this.parent.send({ type: 'team-formed', id, team: team.id })
        this.follow(team)
      } catch (err: any) {
        const code = this.failureCode(signal, err, 'FORMATION_FAILED')
        this.log('team-form %s of %s failed: %s', id, this.parent.did, errorMessage(err))
        fail(code, errorMessage(err), Array.isArray(err?.failures) ? { failures: err.failures } : {})
      } finally {
        signal.clear()
      }
    })().finally(() => { this.posts-- })
  }

  /** Sign and post (or leave), then answer `team-posted` or `team-post-error`; never rejects */
  private async run (id: string, post: { team: Team, kind: string, body: Record<string, unknown>, re?: number }): Promise<void> {
    const { team } = post
    const signal = anySignal([this.parent.lifetime, AbortSignal.timeout(this.limits.postTimeout)])
    try {
      if (post.kind === 'leave') {
        await team.leave(typeof post.body.reason === 'string' ? post.body.reason : undefined, { signal })
        this.parent.send({ type: 'team-posted', id, team: team.id, epoch: team.epoch })
        return
      }
      const { seq, epoch } = await team.post(post.kind as MessageType, post.body, { signal, ...(post.re != null ? { re: post.re } : {}) })
      this.parent.send({ type: 'team-posted', id, team: team.id, seq, epoch })
    } catch (err) {
      const code = this.failureCode(signal, err, 'POST_FAILED')
      this.log('team %s: post %s of %s failed: %s', team.id, id, this.parent.did, errorMessage(err))
      this.parent.send({ type: 'team-post-error', id, team: team.id, code, message: errorMessage(err) })
    } finally {
      signal.clear()
    }
  }

  /** The post's team, kind and body; throws PostError */
  private checkPost (msg: Record<string, unknown>): { team: Team, kind: string, body: Record<string, unknown>, re?: number } {
    const { team: teamId, kind, body, re } = msg
    if (typeof teamId !== 'string' || teamId.length === 0 || teamId.length > MAX_ID) throw new PostError('INVALID_POST', 'team-post.team must be a team id')
    if (typeof kind !== 'string' || !KIND.test(kind)) throw new PostError('INVALID_POST', 'team-post.kind must be a message type')
    if (NOT_POSTABLE.has(kind)) throw new PostError('INVALID_POST', `A program cannot post ${kind} messages`)
    if (body != null && !isObject(body)) throw new PostError('INVALID_POST', 'team-post.body must be an object')
    if (re != null && (typeof re !== 'number' || !Number.isSafeInteger(re) || re < 0)) throw new PostError('INVALID_POST', 'team-post.re must be a seq')
    if (this.node.teams == null) throw new PostError('TEAMS_UNAVAILABLE', 'This node has no team service')
    const team = this.node.teams.teams().find(t => t.id === teamId && t.agent === this.parent.did)
    if (team == null) throw new PostError('UNKNOWN_TEAM', `The agent is not a member of team ${teamId}`)
    if (this.posts >= this.limits.maxConcurrentPosts) throw new PostError('TOO_MANY_POSTS', `${this.limits.maxConcurrentPosts} posts are in flight`)
    return { team, kind, body: (body ?? {}) as Record<string, unknown>, ...(re != null ? { re: re as number } : {}) }
  }

  /** Resolves at the next `drain` of the program's input, or after BACKLOG_POLL to look again, or when `signal` aborts */
  private async drained (signal: AbortSignal): Promise<void> {
    const input = this.parent.input
    await new Promise<void>(resolve => {
      const done = (): void => {
        clearTimeout(timer)
        input.off('drain', done)
        signal.removeEventListener('abort', done)
        resolve()
      }
      const timer = setTimeout(done, BACKLOG_POLL)
      input.once('drain', done)
      signal.addEventListener('abort', done, { once: true })
    })
  }

  /** The code of a failed team request: the agent stopped, its time ran out, or the error's own */
  private failureCode (signal: AbortSignal, err: unknown, fallback: string): string {
    if (!signal.aborted) return errorCode(err, fallback)
    return this.parent.lifetime.aborted ? 'AGENT_EXITED' : 'TIMEOUT'
  }

  private remember (set: Set<string>, id: string, max: number): void {
    set.add(id)
    if (set.size > max) set.delete(set.values().next().value as string)
  }
}
