/**
 * Error classes of teams (`spec/teams.md`, section 11). Each has a stable
 * `code`, also used on the wire; `teamFromRemote` turns a remote error with
 * one of these codes back into its class.
 */
import { CollabError, fromRemote } from '../errors.js'
import type { CollabErrorClass } from '../errors.js'

/** Base class of the team errors */
export class TeamError extends CollabError {
  static override name = 'TeamError'
}

export class UnknownTeamError extends TeamError {
  static override name = 'UnknownTeamError'
  static code = 'UNKNOWN_TEAM'
  constructor (message = 'Unknown team', options?: ErrorOptions) {
    super(UnknownTeamError.code, message, options)
    this.name = UnknownTeamError.name
  }
}

export class NotMemberError extends TeamError {
  static override name = 'NotMemberError'
  static code = 'NOT_MEMBER'
  constructor (message = 'Not a member of the team', options?: ErrorOptions) {
    super(NotMemberError.code, message, options)
    this.name = NotMemberError.name
  }
}

export class PeerMismatchError extends TeamError {
  static override name = 'PeerMismatchError'
  static code = 'PEER_MISMATCH'
  constructor (message = 'Request does not come from the peer of the member', options?: ErrorOptions) {
    super(PeerMismatchError.code, message, options)
    this.name = PeerMismatchError.name
  }
}

export class NotSequencerError extends TeamError {
  static override name = 'NotSequencerError'
  static code = 'NOT_SEQUENCER'
  constructor (message = 'Not the sequencer of the current epoch of the team', options?: ErrorOptions) {
    super(NotSequencerError.code, message, options)
    this.name = NotSequencerError.name
  }
}

export class StaleEpochError extends TeamError {
  static override name = 'StaleEpochError'
  static code = 'STALE_EPOCH'
  constructor (message = 'Epoch lower than one promised', options?: ErrorOptions) {
    super(StaleEpochError.code, message, options)
    this.name = StaleEpochError.name
  }
}

export class SequencerAliveError extends TeamError {
  static override name = 'SequencerAliveError'
  static code = 'SEQUENCER_ALIVE'
  constructor (message = 'The sequencer is still heard', options?: ErrorOptions) {
    super(SequencerAliveError.code, message, options)
    this.name = SequencerAliveError.name
  }
}

export class InvalidMessageError extends TeamError {
  static override name = 'InvalidMessageError'
  static code = 'INVALID_MESSAGE'
  constructor (message = 'Invalid team message', options?: ErrorOptions) {
    super(InvalidMessageError.code, message, options)
    this.name = InvalidMessageError.name
  }
}

export class InvalidRosterError extends TeamError {
  static override name = 'InvalidRosterError'
  static code = 'INVALID_ROSTER'
  constructor (message = 'Invalid roster', options?: ErrorOptions) {
    super(InvalidRosterError.code, message, options)
    this.name = InvalidRosterError.name
  }
}

export class InvalidTeamRecordError extends TeamError {
  static override name = 'InvalidTeamRecordError'
  static code = 'INVALID_TEAM_RECORD'
  constructor (message = 'Invalid team record', options?: ErrorOptions) {
    super(InvalidTeamRecordError.code, message, options)
    this.name = InvalidTeamRecordError.name
  }
}

export class HistoryFullError extends TeamError {
  static override name = 'HistoryFullError'
  static code = 'HISTORY_FULL'
  constructor (message = 'The history budget of the team is used', options?: ErrorOptions) {
    super(HistoryFullError.code, message, options)
    this.name = HistoryFullError.name
  }
}

export class TeamConcludedError extends TeamError {
  static override name = 'TeamConcludedError'
  static code = 'TEAM_CONCLUDED'
  constructor (message = 'The team concluded', options?: ErrorOptions) {
    super(TeamConcludedError.code, message, options)
    this.name = TeamConcludedError.name
  }
}

export class DepthExceededError extends TeamError {
  static override name = 'DepthExceededError'
  static code = 'DEPTH_EXCEEDED'
  constructor (message = 'Team nesting too deep', options?: ErrorOptions) {
    super(DepthExceededError.code, message, options)
    this.name = DepthExceededError.name
  }
}

export class TooManyTeamsError extends TeamError {
  static override name = 'TooManyTeamsError'
  static code = 'TOO_MANY_TEAMS'
  constructor (message = 'Too many teams', options?: ErrorOptions) {
    super(TooManyTeamsError.code, message, options)
    this.name = TooManyTeamsError.name
  }
}

export class RecordExpiredError extends TeamError {
  static override name = 'RecordExpiredError'
  static code = 'EXPIRED'
  constructor (message = 'Record expired or outside the clock skew', options?: ErrorOptions) {
    super(RecordExpiredError.code, message, options)
    this.name = RecordExpiredError.name
  }
}

export class HistoryGapError extends TeamError {
  static override name = 'HistoryGapError'
  static code = 'GAP'
  constructor (message = 'History range not held', options?: ErrorOptions) {
    super(HistoryGapError.code, message, options)
    this.name = HistoryGapError.name
  }
}

export class DeclinedError extends TeamError {
  static override name = 'DeclinedError'
  static code = 'DECLINED'
  constructor (message = 'Invitation declined', options?: ErrorOptions) {
    super(DeclinedError.code, message, options)
    this.name = DeclinedError.name
  }
}

export class TeamStalledError extends TeamError {
  static override name = 'TeamStalledError'
  static code = 'TEAM_STALLED'
  constructor (message = 'No sequencer could take over', options?: ErrorOptions) {
    super(TeamStalledError.code, message, options)
    this.name = TeamStalledError.name
  }
}

export class TeamFormationError extends TeamError {
  static override name = 'TeamFormationError'
  static code = 'FORMATION_FAILED'
  constructor (message = 'The team could not be formed', options?: ErrorOptions) {
    super(TeamFormationError.code, message, options)
    this.name = TeamFormationError.name
  }
}

export class EventsOverflowError extends TeamError {
  static override name = 'EventsOverflowError'
  static code = 'EVENTS_OVERFLOW'
  constructor (message = 'An events() reader fell too far behind', options?: ErrorOptions) {
    super(EventsOverflowError.code, message, options)
    this.name = EventsOverflowError.name
  }
}

export class DivergedError extends TeamError {
  static override name = 'DivergedError'
  static code = 'DIVERGED'
  constructor (message = 'The log diverges from the sequencer', options?: ErrorOptions) {
    super(DivergedError.code, message, options)
    this.name = DivergedError.name
  }
}

export class UnknownProposalError extends TeamError {
  static override name = 'UnknownProposalError'
  static code = 'UNKNOWN_PROPOSAL'
  constructor (message = 'No open proposal matches the award', options?: ErrorOptions) {
    super(UnknownProposalError.code, message, options)
    this.name = UnknownProposalError.name
  }
}

export class IllegalTransitionError extends TeamError {
  static override name = 'IllegalTransitionError'
  static code = 'ILLEGAL_TRANSITION'
  constructor (message = 'The conversation\'s state does not allow this message', options?: ErrorOptions) {
    super(IllegalTransitionError.code, message, options)
    this.name = IllegalTransitionError.name
  }
}

export class NotYourTurnError extends TeamError {
  static override name = 'NotYourTurnError'
  static code = 'NOT_YOUR_TURN'
  constructor (message = 'Another member has the turn', options?: ErrorOptions) {
    super(NotYourTurnError.code, message, options)
    this.name = NotYourTurnError.name
  }
}

export class MaxTurnsError extends TeamError {
  static override name = 'MaxTurnsError'
  static code = 'MAX_TURNS'
  constructor (message = 'The conversation used its max_turns', options?: ErrorOptions) {
    super(MaxTurnsError.code, message, options)
    this.name = MaxTurnsError.name
  }
}

/**
 * A `discuss` or `propose` message repeats an earlier one (spec 10.7): the
 * message names the seq it repeats and the similarity, as
 * `repeats entry <seq> (similarity <s>)`, which a remote error is read back from
 */
export class RepeatedError extends TeamError {
  static override name = 'RepeatedError'
  static code = 'REPEATED'
  /** The seq of the entry repeated (-1 when unknown) */
  readonly seq: number
  /** Jaccard similarity of the texts' 3-word shingles, rounded down to 3 decimals (-1 when unknown) */
  readonly similarity: number
  constructor (message = 'The message repeats the conversation', options?: ErrorOptions) {
    super(RepeatedError.code, message, options)
    this.name = RepeatedError.name
    const m = /repeats entry (\d+) \(similarity ([01](?:\.\d+)?)\)/.exec(message)
    this.seq = m == null ? -1 : Number(m[1])
    this.similarity = m == null ? -1 : Number(m[2])
  }

  static of (seq: number, similarity: number): RepeatedError {
    return new RepeatedError(`The message repeats entry ${seq} (similarity ${similarity})`)
  }
}

export class TooManyWatchersError extends TeamError {
  static override name = 'TooManyWatchersError'
  static code = 'TOO_MANY_WATCHERS'
  constructor (message = 'Too many watchers of the team on this node', options?: ErrorOptions) {
    super(TooManyWatchersError.code, message, options)
    this.name = TooManyWatchersError.name
  }
}

/** An assignee's node refuses a task that names a team assignment the team's log does not give to it (spec 10.6) */
export class NotAssignedError extends TeamError {
  static override name = 'NotAssignedError'
  static code = 'NOT_ASSIGNED'
  constructor (message = 'No such assignment for this agent', options?: ErrorOptions) {
    super(NotAssignedError.code, message, options)
    this.name = NotAssignedError.name
  }
}

/** More open assignments than `maxOpenPerTeam` / `maxOpenPerAssignee` (assigner) or `maxServedPerTeam` (assignee) allow (spec 10.6) */
export class TooManyAssignmentsError extends TeamError {
  static override name = 'TooManyAssignmentsError'
  static code = 'TOO_MANY_ASSIGNMENTS'
  constructor (message = 'Too many open assignments', options?: ErrorOptions) {
    super(TooManyAssignmentsError.code, message, options)
    this.name = TooManyAssignmentsError.name
  }
}

const BY_CODE = new Map<string, CollabErrorClass>([
  [UnknownTeamError.code, UnknownTeamError],
  [NotMemberError.code, NotMemberError],
  [PeerMismatchError.code, PeerMismatchError],
  [NotSequencerError.code, NotSequencerError],
  [StaleEpochError.code, StaleEpochError],
  [SequencerAliveError.code, SequencerAliveError],
  [InvalidMessageError.code, InvalidMessageError],
  [InvalidRosterError.code, InvalidRosterError],
  [InvalidTeamRecordError.code, InvalidTeamRecordError],
  [HistoryFullError.code, HistoryFullError],
  [TeamConcludedError.code, TeamConcludedError],
  [DepthExceededError.code, DepthExceededError],
  [TooManyTeamsError.code, TooManyTeamsError],
  [RecordExpiredError.code, RecordExpiredError],
  [HistoryGapError.code, HistoryGapError],
  [DeclinedError.code, DeclinedError],
  [TeamStalledError.code, TeamStalledError],
  [TeamFormationError.code, TeamFormationError],
  [DivergedError.code, DivergedError],
  [UnknownProposalError.code, UnknownProposalError],
  [IllegalTransitionError.code, IllegalTransitionError],
  [NotYourTurnError.code, NotYourTurnError],
  [MaxTurnsError.code, MaxTurnsError],
  [RepeatedError.code, RepeatedError],
  [TooManyWatchersError.code, TooManyWatchersError],
  [NotAssignedError.code, NotAssignedError],
  [TooManyAssignmentsError.code, TooManyAssignmentsError]
])

/**
 * Turn an error received from a peer into the matching team error class
 * (`remote === true`); other codes go to the collaboration layer's mapping
 */
export function teamFromRemote (err: unknown): unknown {
  const e = err as { code?: unknown, remote?: unknown, message?: string } | undefined
  if (e?.remote === true && typeof e.code === 'string') {
    const C = BY_CODE.get(e.code)
    if (C != null) {
      const out = new C(e.message, { cause: err })
      ;(out as TeamError & { remote: boolean }).remote = true
      return out
    }
  }
  return fromRemote(err)
}
