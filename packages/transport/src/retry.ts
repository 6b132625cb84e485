/**
 * The one table of what an error code says about a failed call: did the
 * request reach a peer serving the agent, may it be sent again, may another
 * peer be tried, does it count against the agent's record. Every layer reads
 * this table through the predicates below instead of keeping its own list
 * of "transient" codes (spec/transport.md, "Retrying after an error",
 * informative).
 *
 * The table lives in the transport, the lowest layer, so that every layer
 * reads the same one; the codes of the upper layers are named by their wire
 * code (their classes stay in their own `errors.ts`).
 */

/** The layer whose error family defines a code */
export type ErrorLayer = 'transport' | 'interconnect' | 'collab'

/** Did the request reach a peer that serves the agent? */
export type Reached =
  /** no: the dial failed, the peer does not serve the protocol or the agent, there is no route, or this node's messaging was not running; nothing was done there */
  'no' |
  /** maybe: it was sent, but the exchange broke before an answer (the stream closed, the time ran out); the work may have been done */
  'maybe' |
  /** yes: a serving peer answered with this error, or the caller gave up (every code not in the table) */
  'yes'

/** What one error code says about the failed call */
export interface RetryFacts {
  /** The layer that defines the code; a layer reads only the codes of its own layer and the layers below */
  readonly layer: ErrorLayer
  /** Did the request reach a peer that serves the agent */
  readonly reached: Reached
  /** Nothing was answered: a request that may run twice (a read, a cancel, a resubscribe) may be sent again, to the same or another serving peer */
  readonly repeatable: boolean
  /** One peer's connection or protocol failed, not the agent: another peer serving the agent may be tried */
  readonly otherPeer: boolean
  /** Says that the agent did not answer: a failure in the agent's outcome record (ranking) */
  readonly blame: boolean
}

const fact = (layer: ErrorLayer, reached: Reached, repeatable: boolean, otherPeer: boolean, blame: boolean): RetryFacts =>
  Object.freeze({ layer, reached, repeatable, otherPeer, blame })

/**
 * The facts of every code callers branch on. A code not listed is a peer's
 * answer, or the caller's own doing: {@link ANSWER}.
 */
export const RETRY_TABLE: Readonly<Record<string, RetryFacts>> = Object.freeze({
  // code                      layer           reached  repeatable otherPeer blame
  DIAL_FAILED: fact('transport', 'no', true, true, true),
  PROTOCOL_NOT_SUPPORTED: fact('transport', 'no', true, true, true),
  STREAM_CLOSED: fact('transport', 'maybe', true, true, true),
  NOT_STARTED: fact('transport', 'no', true, false, true),
  TIMEOUT: fact('transport', 'maybe', true, false, true),
  HANDLER_ERROR: fact('transport', 'yes', false, false, true),
  PEER_UNREACHABLE: fact('interconnect', 'no', false, false, true),
  UNKNOWN_AGENT: fact('interconnect', 'no', false, false, false),
  AGENT_NOT_HERE: fact('interconnect', 'no', false, false, false),
  LEASE_LAPSED: fact('collab', 'yes', false, false, true)
})

/** The facts of a code not in the table (an application's, a refusal, a cancel) */
export const ANSWER: RetryFacts = fact('transport', 'yes', false, false, false)

const RANK: Record<ErrorLayer, number> = { transport: 0, interconnect: 1, collab: 2 }

/** Options of the predicates */
export interface RetryReadOptions {
  /**
   * The layer that reads the code: a code of a layer above it is unknown to
   * it and read as {@link ANSWER}
   *
   * @default 'collab'
   */
  reader?: ErrorLayer
}

/** The code of an error, or undefined when it has none */
function codeOf (err: unknown): string | undefined {
  if (typeof err === 'string') return err
  const c = (err as { code?: unknown } | null | undefined)?.code
  return typeof c === 'string' ? c : undefined
}

/** The facts of an error or its code, as `reader` reads it */
export function retryFacts (errOrCode: unknown, options: RetryReadOptions = {}): RetryFacts {
  const code = codeOf(errOrCode)
  const facts = code != null && Object.hasOwn(RETRY_TABLE, code) ? RETRY_TABLE[code] : ANSWER
  return RANK[facts.layer] <= RANK[options.reader ?? 'collab'] ? facts : ANSWER
}

/** A request that may run twice may be sent again (same or another serving peer) */
export function isRepeatable (errOrCode: unknown, options?: RetryReadOptions): boolean {
  return retryFacts(errOrCode, options).repeatable
}

/** The request certainly reached no peer that serves the agent: no work was started */
export function isUnreached (errOrCode: unknown, options?: RetryReadOptions): boolean {
  return retryFacts(errOrCode, options).reached === 'no'
}

/** Options of {@link mayTryAnotherPeer} */
export interface AnotherPeerOptions extends RetryReadOptions {
  /** The request must not run twice: only a failure that certainly did not reach the peer allows another @default false */
  once?: boolean
}

/** Another peer serving the agent may be tried after this error */
export function mayTryAnotherPeer (errOrCode: unknown, options: AnotherPeerOptions = {}): boolean {
  const f = retryFacts(errOrCode, options)
  return f.otherPeer && (options.once !== true || f.reached === 'no')
}

/** Options of {@link countsAgainstAgent} */
export interface BlameOptions extends RetryReadOptions {
  /** Count only a failure after the request reached a serving peer (the caller counts "no peer reached" itself) @default false */
  reachedOnly?: boolean
}

/** The error counts as a failure in the agent's outcome record (ranking) */
export function countsAgainstAgent (errOrCode: unknown, options: BlameOptions = {}): boolean {
  const f = retryFacts(errOrCode, options)
  return f.blame && (options.reachedOnly !== true || f.reached !== 'no')
}
