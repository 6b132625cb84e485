/**
 * Error classes of the management plane (`spec/management.md`, "Management
 * protocol", Errors). Written out as named classes (`static name`, `static
 * code`), as the other layers' are; `fromRemote` turns a code received from
 * a peer back into its class (collab's codes, such as `UNAUTHORIZED` and
 * `ESCALATION`, keep their own classes).
 */
import { fromRemote as collabFromRemote } from '@ioa/collab'
import { CodedError, ErrorFamily, withCode } from '@ioa/transport'

/** Base class of every management error */
export class ManagementError extends CodedError {
  static override name = 'ManagementError'
}

/** The caller's delegation chain is not rooted at the node's operator (`management.operator`) */
export class NotOperatorError extends withCode(ManagementError, 'NOT_OPERATOR', 'The chain is not rooted at the operator') {
  static override name = 'NotOperatorError'
}

/** The leaf token of the caller's chain is addressed to another node */
export class WrongAudienceError extends withCode(ManagementError, 'WRONG_AUDIENCE', 'The token is addressed to another node') {
  static override name = 'WrongAudienceError'
}

/** The node has no operator configured: it answers no management request */
export class NoOperatorError extends withCode(ManagementError, 'NO_OPERATOR', 'No operator is configured on this node') {
  static override name = 'NoOperatorError'
}

/** A management request does not follow the schema */
export class BadManagementRequestError extends withCode(ManagementError, 'BAD_REQUEST', 'Malformed management request') {
  static override name = 'BadManagementRequestError'
}

/** The caller (or all callers together) already has as many open watches as the node allows */
export class TooManyWatchesError extends withCode(ManagementError, 'TOO_MANY_WATCHES', 'Too many open watches') {
  static override name = 'TooManyWatchesError'
}

/** A received snapshot does not follow the schema, or is not signed by the node that sent it */
export class InvalidNodeSnapshotError extends withCode(ManagementError, 'INVALID_NODE_SNAPSHOT', 'Invalid node snapshot') {
  static override name = 'InvalidNodeSnapshotError'
}

/** A subscriber of a topology's events fell more than `maxQueuedEvents` behind: its stream ends */
export class TopologyOverflowError extends withCode(ManagementError, 'TOPOLOGY_OVERFLOW', 'Too many topology events not read') {
  static override name = 'TopologyOverflowError'
}

/** A management agent's grant (`TopologyInit.proofs`) cannot work: addressed to another key, expired, or not granting `ioa.manage.watch`; thrown at start, never on the wire */
export class InvalidGrantError extends withCode(ManagementError, 'INVALID_GRANT', 'The management agent\'s grant cannot be used') {
  static override name = 'InvalidGrantError'
}

const FAMILY = new ErrorFamily<ManagementError>(ManagementError).register(
  NotOperatorError, WrongAudienceError, NoOperatorError, BadManagementRequestError, TooManyWatchesError, InvalidNodeSnapshotError, TopologyOverflowError
)

/** An error received from a peer, as the class of its code (management's, then collab's and below) */
export function fromRemote (err: unknown): unknown {
  const out = FAMILY.fromRemote(err)
  return out !== err ? out : collabFromRemote(err)
}
