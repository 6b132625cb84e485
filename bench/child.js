/**
 * A benchmark's child process: the same script run again with `args`
 * (through scripts/polyfill.js), talking JSON lines on stdin/stdout.
 */
import { spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'

/**
 * Start `script` (a file URL) with `args`. `next(ms?)` resolves with the
 * child's next line that `take` (if given) did not consume, and rejects once
 * the child has exited or after `ms`; `send(cmd)` writes one; `stop()` asks the child to stop
 * and kills it after 10 s. `options.execArgv` goes to node before the script
 * (e.g. `--cpu-prof`). A line that is not JSON (something in the child wrote
 * to stdout) is passed on to stderr.
 */
export function startChild (script, args, take, options = {}) {
  const execArgv = options.execArgv ?? []
  const child = spawn(process.execPath, [...execArgv, '--import', fileURLToPath(new URL('../scripts/polyfill.js', import.meta.url)), fileURLToPath(script), ...args], { stdio: ['pipe', 'pipe', 'inherit'] })
  const lines = createInterface({ input: child.stdout })
  const pending = []
  let exited
  lines.on('line', (line) => {
    let e
    try {
      e = JSON.parse(line)
    } catch {
      process.stderr.write(`[child ${child.pid}] ${line}\n`)
      return
    }
    if (take?.(e) !== true) pending.shift()?.resolve(e)
  })
  child.once('exit', (code, signal) => {
    exited = new Error(`${fileURLToPath(script)} ${args.join(' ')} exited (${signal ?? code})`)
    for (const p of pending.splice(0)) p.reject(exited)
  })
  // a child that exited no longer reads: its pipe's EPIPE is the 'exit' above
  child.stdin.on('error', () => {})
  const send = (cmd) => child.stdin.write(JSON.stringify(cmd) + '\n')
  return {
    pid: child.pid,
    next: (ms) => {
      if (exited != null) return Promise.reject(exited)
      return new Promise((resolve, reject) => {
        const waiter = { resolve, reject }
        pending.push(waiter)
        if (ms == null) return
        const timer = setTimeout(() => {
          pending.splice(pending.indexOf(waiter), 1)
          reject(new Error(`${fileURLToPath(script)} ${args.join(' ')}: no answer within ${ms} ms`))
        }, ms)
        waiter.resolve = (e) => { clearTimeout(timer); resolve(e) }
        waiter.reject = (err) => { clearTimeout(timer); reject(err) }
      })
    },
    send,
    async stop () {
      if (child.exitCode != null || child.signalCode != null) return
      const exited = new Promise(resolve => child.once('exit', resolve))
      send({ cmd: 'stop' })
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000)
      await exited
      clearTimeout(timer)
    }
  }
}
