/** Errors of the node's tracing setup (spec/management.md 3) */
import { withCode } from '@ioa/transport'
import { ManagementError } from '../errors.js'

/** A tracing option is out of range (the message names the field) */
export class InvalidTracingConfigError extends withCode(ManagementError, 'INVALID_TRACING_CONFIG', 'Invalid tracing configuration') {
  static override name = 'InvalidTracingConfigError'
}
