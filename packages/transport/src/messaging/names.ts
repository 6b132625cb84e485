/**
 * Checks on the names a caller passes, and the peer a target names
 */
import { isMultiaddr } from '@multiformats/multiaddr'
import { METHOD_PATTERN } from '../codec.js'
import { InvalidArgumentError } from '../errors.js'
import type { MessageTarget } from './api.js'

/** Throws `InvalidArgumentError` unless `protocol` is a protocol id and `method` a method name (spec/transport.md) */
export function validateName (protocol: string, method: string): void {
  if (typeof protocol !== 'string' || !/^\/[\x21-\x7e]{1,255}$/.test(protocol)) {
    throw new InvalidArgumentError(`Invalid protocol id "${String(protocol)}"`)
  }
  if (typeof method !== 'string' || !METHOD_PATTERN.test(method)) {
    throw new InvalidArgumentError(`Invalid method name "${String(method)}"`)
  }
}

/** The peer id a target names, if it names one (a multiaddr without /p2p names none) */
export function targetPeer (target: MessageTarget): string | undefined {
  if (isMultiaddr(target)) {
    return target.getComponents().findLast(c => c.name === 'p2p')?.value
  }
  if (Array.isArray(target)) {
    return target.length > 0 ? targetPeer(target[0]) : undefined
  }
  return target.toString()
}
