/**
 * A benchmark's child process: the same script run again with `args`
 * (through scripts/polyfill.js), talking JSON lines on stdin/stdout.
 */
import { spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'

/**
 * Start `script` (a file URL) with `args`. `next()` resolves with the child's
 * next line that `take` (if given) did not consume; `send(cmd)` writes one;
 * `stop()` asks the child to stop and kills it after 10 s.
 */
export function startChild (script, args, take) {
  const child = spawn(process.execPath, ['--import', fileURLToPath(new URL('../scripts/polyfill.js', import.meta.url)), fileURLToPath(script), ...args], { stdio: ['pipe', 'pipe', 'inherit'] })
  const lines = createInterface({ input: child.stdout })
  const pending = []
  lines.on('line', (line) => {
    const e = JSON.parse(line)
    if (take?.(e) !== true) pending.shift()?.(e)
  })
  const send = (cmd) => child.stdin.write(JSON.stringify(cmd) + '\n')
  return {
    next: () => new Promise(resolve => pending.push(resolve)),
    send,
    async stop () {
      if (child.exitCode != null) return
      const exited = new Promise(resolve => child.once('exit', resolve))
      send({ cmd: 'stop' })
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000)
      await exited
      clearTimeout(timer)
    }
  }
}
