/**
 * Work done once at the end of an event-loop turn (`setImmediate`; a
 * microtask where there is none), in two phases: first every stream's
 * frames of the turn are written (`WriteCoalescer`), then every corked
 * socket is uncorked (`cork-writes`). One callback runs both, so frames
 * written at the end of a turn still join the socket writes of that turn
 * (a window update Yamux sent while the frames were being made, say) in
 * one syscall.
 */
import { logger } from '@libp2p/logger'

type Task = () => void

const log = logger('ioa:transport:turn-end')

const defer: (fn: () => void) => void = typeof setImmediate === 'function'
  ? (fn) => { setImmediate(fn) }
  : queueMicrotask

let flushes: Task[] = []
let uncorks: Task[] = []
let scheduled = false

/** One task failing must not keep the others of the turn from running */
function runAll (tasks: Task[]): void {
  for (const task of tasks) {
    try {
      task()
    } catch (err: any) {
      log.error('end-of-turn write failed - %e', err)
    }
  }
}

function run (): void {
  scheduled = false
  // a flush may cork a socket (its first write of the turn): uncork after all flushes
  while (flushes.length > 0) {
    const batch = flushes
    flushes = []
    runAll(batch)
  }
  const batch = uncorks
  uncorks = []
  runAll(batch)
}

function schedule (): void {
  if (!scheduled) {
    scheduled = true
    defer(run)
  }
}

/** Run `task` at the end of this turn, before the sockets are uncorked */
export function flushAtTurnEnd (task: Task): void {
  flushes.push(task)
  schedule()
}

/** Run `task` at the end of this turn, after every flush */
export function uncorkAtTurnEnd (task: Task): void {
  uncorks.push(task)
  schedule()
}
