/**
 * `ioa task <task-id> --to <did>`: the snapshot of a task this client
 * submitted (the executor answers only the peer that submitted it, so the
 * same --data-dir must be used).
 */
import { anySignal } from 'any-signal'
import { CLIENT_OPTIONS, bootstrapList, clientDataDir, parseDid, timeoutOf } from '../args.js'
import { UsageError } from '../errors.js'
import { toJson } from '../output.js'
import type { CommandSpec } from '../args.js'

export const taskCommand: CommandSpec = {
  name: 'task',
  summary: 'show a submitted task\'s state, progress and result',
  usage: ['task <task-id> --to <did> --bootstrap <multiaddr>... [--follow | --cancel] [--json]'],
  description: 'Asks the executing agent for the task\'s snapshot; --follow streams its events until it ends (as\nioa submit does), --cancel cancels it. Only the peer that submitted the task may read or cancel\nit: use the same client data directory (--data-dir, $IOA_HOME or ~/.ioa) as ioa submit.',
  positionals: 1,
  options: {
    to: { type: 'string', value: '<did>', description: 'the agent that runs the task' },
    follow: { type: 'boolean', description: 'stream the task\'s events until it ends; exit 0 only if it completed' },
    cancel: { type: 'boolean', description: 'cancel the task and show what became of it' },
    ...CLIENT_OPTIONS
  },
  examples: [
    'ioa task 6f1c…-… --to did:key:z6Mk… --bootstrap /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW…',
    'ioa task 6f1c…-… --to did:key:z6Mk… --follow --bootstrap /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW…'
  ],
  async run (args, ctx) {
    const taskId = args.positional(0, 'task-id')
    const [{ TASK_ID_PATTERN }, { withClient }] = await Promise.all([import('@ioa/collab/wire'), import('../client.js')])
    if (!TASK_ID_PATTERN.test(taskId)) throw new UsageError(`"${taskId.slice(0, 80)}" is not a task id`, 'task-id')
    const to = await parseDid(args.required('to'), '--to')
    const timeout = timeoutOf(args)
    const out = ctx.out
    const following = args.flag('follow')
    const canceling = args.flag('cancel')
    if (following && canceling) throw new UsageError('task: give --follow or --cancel, not both', '--cancel')
    const client = { bootstrap: await bootstrapList(args, ctx), dataDir: clientDataDir(args, ctx), timeout, signal: ctx.signal, out }
    if (following) {
      const { followEvents } = await import('./submit.js')
      return withClient(client, async ({ node }) => {
        return followEvents(node.tasks.resubscribe(to, taskId, { signal: ctx.signal }), taskId, to, Date.now(), out, ctx.signal)
      })
    }
    const task = await withClient(client, async ({ node }) => {
      const signal = anySignal([ctx.signal, AbortSignal.timeout(timeout)])
      try {
        return await (canceling ? node.tasks.cancel(to, taskId, { signal }) : node.tasks.get(to, taskId, { signal }))
      } finally {
        signal.clear()
      }
    })
    if (out.json) {
      out.emit(task)
      return 0
    }
    out.print(`task ${task.id}  ${task.skill}  ${task.state}`)
    out.print(`  created   ${new Date(task.createdAt).toISOString()}`)
    out.print(`  updated   ${new Date(task.updatedAt).toISOString()}`)
    if (task.deadline != null) out.print(`  deadline  ${new Date(task.deadline).toISOString()}`)
    for (const m of task.messages) out.print(`  message   ${typeof m === 'string' ? m : toJson(m)}`)
    for (const a of task.artifacts) out.print(`  artifact  ${toJson(a)}`)
    if (task.error != null) out.print(`  error     ${task.error.code}: ${task.error.message}`)
    if (task.result !== undefined) out.print(`  result    ${toJson(task.result, 2).split('\n').join('\n            ')}`)
    return 0
  }
}
