/**
 * Every command of the `ioa` tool, in the order of `ioa --help`.
 */
import { agentsCommand } from './agents.js'
import { cardCommand } from './card.js'
import { delegateCommand } from './delegate.js'
import { discoverCommand } from './discover.js'
import { doctorCommand } from './doctor.js'
import { keyNewCommand, keyShowCommand } from './key.js'
import { keyListCommand, keyPassphraseCommand } from './key-store.js'
import { loginCommand } from './login.js'
import { revokeCommand } from './revoke.js'
import { startCommand } from './start.js'
import { submitCommand } from './submit.js'
import { taskCommand } from './task.js'
import { teamWatchCommand } from './team.js'
import type { CommandSpec } from '../args.js'

export const COMMANDS: readonly CommandSpec[] = [
  startCommand,
  keyNewCommand,
  keyShowCommand,
  keyListCommand,
  keyPassphraseCommand,
  agentsCommand,
  discoverCommand,
  cardCommand,
  delegateCommand,
  revokeCommand,
  submitCommand,
  taskCommand,
  teamWatchCommand,
  doctorCommand,
  loginCommand
]
